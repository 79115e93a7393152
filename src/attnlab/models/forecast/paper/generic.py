"""The other estimators' paper section (tables, graphs): a short model section from their
equations and results, in English or Chinese."""

from __future__ import annotations

from attnlab.models.forecast.paper.document import _table
from attnlab.models.forecast.paper.text import LANGS
from attnlab.models.latex import Equations, escape_tex, text_with_math

_GENERIC = {
    "en": {"title": "Model: {name}", "results": "Results", "symbols": "Symbols",
           "formulation": "Formulation", "assumptions": "Assumptions",
           "symbol": "Symbol", "meaning": "Meaning", "method": "Method"},
    "zh": {"title": "模型：{name}", "results": "结果分析", "symbols": "符号说明",
           "formulation": "模型建立", "assumptions": "模型假设",
           "symbol": "符号", "meaning": "含义", "method": "方法"},
}


def model_section_tex(eq: Equations, *, assumptions: list[str],
                      results: list[tuple[str, list[str], list[tuple[str, ...]]]],
                      sentences: list[str], figures: list[tuple[str, str]],
                      lang: str = "en") -> str:
    """A model section for the other estimators' fits (tables, graphs): assumptions, the
    symbol table, the formulation, the figures ``(file, caption)``, and the results tables
    ``(caption, header, rows)`` with the ``sentences`` that read them; nothing else."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    t = _GENERIC[lang]
    doc = ([r"\documentclass[11pt]{ctexart}" if lang == "zh" else r"\documentclass[11pt]{article}"]
           + [r"\usepackage{amsmath,amssymb,graphicx,booktabs,float}",
              r"\usepackage[margin=2.5cm]{geometry}", r"\begin{document}",
              f"\\section*{{{t['title'].format(name=escape_tex(eq.title))}}}",
              f"\\subsection*{{{t['assumptions']}}}", r"\begin{enumerate}"]
           + [f"  \\item {escape_tex(a)}" for a in assumptions] + [r"\end{enumerate}",
                                                                  f"\\subsection*{{{t['symbols']}}}"])
    doc += _table([(f"${s}$", text_with_math(w)) for s, w in eq.where],
                  [t["symbol"], t["meaning"]], t["symbols"], cols=r"lp{0.68\linewidth}")
    body = eq.to_latex().split("\n")
    doc += [f"\\subsection*{{{t['formulation']}}}"]
    doc += body[body.index(r"\begin{align}"):body.index(r"\end{align}") + 1]
    for file, caption in figures:
        doc += [r"\begin{figure}[!htbp]", r"\centering",
                f"\\includegraphics[width=0.8\\linewidth]{{{file}}}",
                f"\\caption{{{escape_tex(caption)}}}", r"\end{figure}"]
    doc.append(f"\\subsection*{{{t['results']}}}")
    for caption, header, rows in results:
        doc += _table([tuple(escape_tex(c) for c in r) for r in rows],
                      [escape_tex(h) for h in header], escape_tex(caption))
    doc += [escape_tex(s) for s in sentences]
    doc.append(r"\end{document}")
    return "\n".join(doc) + "\n"
