"""The paper sections the applied jobs write: the forecaster's (write_paper, compiled by
pdflatex or xelatex), the table and graph models' short ones."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

from attnlab._files import write_text_atomic

ENGINES = {"en": "pdflatex", "zh": "xelatex"}


def compile_tex(folder: Path, name: str, lang: str, timeout: float = 300) -> Path:
    """Run the language's engine on ``folder/name``; returns the PDF, or raises ValueError with
    the log's first error line."""
    engine = ENGINES[lang]
    if shutil.which(engine) is None:
        raise FileNotFoundError(engine)
    res = subprocess.run([engine, "-interaction=nonstopmode", "-halt-on-error", name],
                         cwd=folder, capture_output=True, text=True, timeout=timeout)
    pdf = folder / (Path(name).stem + ".pdf")
    if res.returncode != 0 or not pdf.exists():
        first = next((ln for ln in res.stdout.splitlines() if ln.startswith("!")), "no log line")
        raise ValueError(f"{engine} failed on {name}: {first}")
    for ext in (".aux", ".log"):
        (folder / (Path(name).stem + ext)).unlink(missing_ok=True)
    return pdf

def write_paper(d: Path, inputs, lang: str, compile_pdf: bool | None,
                train: list | None = None) -> list[str]:
    """Figures (vector PDFs at print size, in ``lang``), ``paper.tex`` and (where an engine
    exists, or when asked) ``paper.pdf`` in the folder ``d``; ``train``: a panel's training
    parts, for its forecast figure. Returns the files written."""
    from attnlab._files import write_text_atomic
    from attnlab.models.forecast.paper import paper_tex
    from attnlab.models.forecast.paper.context import is_panel
    from attnlab.plots import paper as figures

    d.mkdir(parents=True, exist_ok=True)
    model, bt, panel = inputs.model, inputs.backtest, is_panel(inputs)
    figures.save_architecture(model, d / "architecture.pdf", lang, panel)
    inputs.figures = {"architecture": "architecture.pdf"}
    if panel and train is not None:
        _, inputs.shown = figures.save_panel(bt, train, d / "backtest.pdf", lang)
        inputs.figures["backtest"] = "backtest.pdf"
    elif not panel and inputs.y is not None and bt is not None:
        figures.save_backtest(inputs.y, bt, d / "backtest.pdf", lang)
        inputs.figures["backtest"] = "backtest.pdf"
    att = np.asarray(bt.attention if bt is not None else np.zeros((0, 0)), dtype=float)
    rows = np.isfinite(att).all(1) if att.ndim == 2 and att.shape[1] else np.zeros(0, bool)
    if model.pool != "mean" and rows.any():
        labels = [lab for lab, ok in zip(inputs.origin_labels, rows) if ok]
        figures.save_attention(att[rows], labels, d / "attention.pdf", lang, panel)
        inputs.figures["attention"] = "attention.pdf"
    files = list(inputs.figures.values())
    write_text_atomic(d / "paper.tex", paper_tex(inputs, lang))
    files.append("paper.tex")
    if compile_pdf is False:
        return files
    try:
        compile_tex(d, "paper.tex", lang)
        files.append("paper.pdf")
    except FileNotFoundError:
        if compile_pdf:
            raise ValueError(f"--compile needs {ENGINES[lang]} (TeX Live; for Chinese also "
                             "ctex: Debian's texlive-xetex and texlive-lang-chinese)") from None
    return files


def paper_folder(d: Path, bt, index, name: str, y=None, model=None) -> None:
    """The paper section of a fit (``attnlab paper`` adds the ablation and sensitivity):
    paper.tex and its figures (not compiled: `attnlab paper` compiles). ``bt`` None (a series
    too short for a backtest): the paper is on the final ``model`` and says that its accuracy
    was not measured."""
    from attnlab.models.forecast.paper import PaperInputs
    from attnlab.plots.forecast import time_label

    if bt is None:
        inputs = PaperInputs(model, None, name, [], y=y)
    else:
        inputs = PaperInputs(bt.model, bt, name, [time_label(index, t) for t in bt.origins],
                             y=y)
    write_paper(d, inputs, "en", False)


def table_paper(d: Path, est, m: dict) -> None:
    """paper/ of a table fit: the model section with the cross-validation comparison."""
    from attnlab.models.forecast.paper import model_section_tex

    d.mkdir(parents=True, exist_ok=True)
    rows = sorted(m["cv"].items(), key=lambda kv: -kv[1]["mean"])
    best_other = max((kv for kv in rows if not kv[0].startswith("attention")),
                     key=lambda kv: kv[1]["mean"])
    ours = m["cv"]["attention (FT-Transformer)"]["mean"]
    sentences = [f"The attention model's mean {m['scoring']} over the {m['folds']} folds is "
                 f"{ours:.4f}, " + ("at or above" if ours >= best_other[1]["mean"] else "below")
                 + f" the best baseline ({best_other[0]}, {best_other[1]['mean']:.4f})."]
    tex = model_section_tex(
        est.equations(),
        assumptions=["Rows are independent draws from one population; the folds are a random "
                     "partition of them" + (" stratified by class." if m["task"] ==
                                            "classification" else "."),
                     "Numeric features enter through their training quantiles (a quantile "
                     "transform), categorical ones through an embedding per level.",
                     f"Every model is scored on the same {m['folds']} folds ({m['scoring']})."],
        results=[(f"{m['folds']}-fold cross-validation, {m['rows']} rows, {m['features']} "
                  "features.", ["model", f"mean {m['scoring']}", "std"],
                  [(k, f"{v['mean']:.4f}", f"{v['std']:.4f}") for k, v in rows])],
        sentences=sentences,
        figures=[("../importance.png", "Feature importance from the [CLS] token's attention."),
                 ("../attention.png", "Attention between feature tokens.")])
    write_text_atomic(d / "paper.tex", tex)


def graph_paper(d: Path, clf, m: dict) -> None:
    """paper/ of a graph fit: the model section with the held-out (or the seeds') comparison."""
    from attnlab.models.forecast.paper import model_section_tex

    d.mkdir(parents=True, exist_ok=True)
    if "gat_mean" in m:                                   # the karate study over seeds
        rows = [("GAT", f"{m['gat_mean']:.3f}", f"{m['gat_std']:.3f}"),
                ("label propagation", f"{m['lp_mean']:.3f}", f"{m['lp_std']:.3f}"),
                ("spectral (normalised Laplacian)", f"{m['spectral_mean']:.3f}",
                 f"{m['spectral_std']:.3f}")]
        caption = f"Accuracy on the unlabelled nodes over {len(m['rows'])} random splits."
    elif m.get("holdout", {}).get("folds"):
        h = m["holdout"]
        rows = [(k, f"{h[k + '_mean']:.3f}", f"{h[k + '_std']:.3f}")
                for k in ("gat", "label_propagation", "majority")]
        caption = f"Accuracy on held-out labelled nodes, {h['folds']} folds."
    else:
        rows, caption = [], ""
    tex = model_section_tex(
        clf.equations(),
        assumptions=["The graph is given and fixed; a node's label depends on its own "
                     "features and on its neighbours'.",
                     "Labelled and unlabelled nodes come from the same population."],
        results=[(caption, ["method", "accuracy", "std"], rows)] if rows else [],
        sentences=[] if rows else ["Too few labelled nodes for a held-out estimate: only the "
                                   "training accuracy was measured."],
        figures=[("../graph.png", "The graph with the model's predictions."),
                 ("../attention.png", "Attention weights between nodes.")])
    write_text_atomic(d / "paper.tex", tex)
