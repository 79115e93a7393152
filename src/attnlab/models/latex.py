"""A model's equations, written once and rendered as a LaTeX fragment or as Markdown.

Each estimator builds an :class:`Equations` with its fitted dimensions filled in; ``to_latex``
gives an ``align`` environment (needs ``amsmath`` and ``amssymb``) plus a short "where" list,
ready to paste into a paper; ``to_markdown`` gives the same equations as ``$$`` blocks for a
notebook or a README. Every equation is also valid matplotlib mathtext, which the tests use to
parse them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TEX_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&",
                "#": r"\#", "^": r"\^{}", "_": r"\_", "%": r"\%", "~": r"\~{}"}


def escape_tex(text: str) -> str:
    """Escape user text (column names) for LaTeX text mode."""
    return "".join(_TEX_SPECIAL.get(c, c) for c in str(text))


_INLINE = re.compile(r"\\\((.*?)\\\)")


def text_with_math(meaning: str) -> str:
    """A meaning for LaTeX: plain text escaped, ``\\( ... \\)`` segments kept as inline math.
    (User text passed through :func:`escape_tex` first can never open a math segment: its
    backslashes become ``\\textbackslash{}``.)"""
    out, last = [], 0
    for m in _INLINE.finditer(meaning):
        out.append(escape_tex(meaning[last:m.start()]))
        out.append(f"${m.group(1)}$")
        last = m.end()
    out.append(escape_tex(meaning[last:]))
    return "".join(out)


def markdown_with_math(meaning: str) -> str:
    """Inline ``$...$`` math kept as is in Markdown text, the rest escaped."""
    return _INLINE.sub(lambda m: f"${m.group(1)}$", meaning)


@dataclass
class Equations:
    """``lines`` are ``(lhs, rhs)`` pairs of math; ``where`` are ``(symbol, meaning)`` pairs
    (meaning is plain text, escaped on output, except ``\\( ... \\)`` inline math)."""

    title: str
    lines: list[tuple[str, str]]
    where: list[tuple[str, str]] = field(default_factory=list)

    def to_latex(self) -> str:
        """The equations as a LaTeX ``align`` fragment with the symbol table."""
        out = [f"% {escape_tex(self.title)} (attnlab to_latex; needs amsmath, amssymb)",
               r"\begin{align}"]
        for i, (lhs, rhs) in enumerate(self.lines):
            end = r" \\" if i < len(self.lines) - 1 else ""
            out.append(f"  {lhs} &= {rhs}{end}")
        out.append(r"\end{align}")
        if self.where:
            out.append(r"where")
            out.append(r"\begin{itemize}")
            for sym, meaning in self.where:
                out.append(f"  \\item ${sym}$: {text_with_math(meaning)}")
            out.append(r"\end{itemize}")
        return "\n".join(out) + "\n"

    def to_markdown(self) -> str:
        """The equations as Markdown with ``$$`` math and the symbol table."""
        out = [f"**{self.title}**", ""]
        for lhs, rhs in self.lines:
            out += ["$$", f"{lhs} = {rhs}", "$$", ""]
        if self.where:
            out.append("where")
            out.append("")
            for sym, meaning in self.where:
                out.append(f"- ${sym}$: {markdown_with_math(meaning)}")
        return "\n".join(out) + "\n"

    def math(self) -> list[str]:
        """Every piece of math, one string each (``lhs = rhs`` and the symbols)."""
        return [f"{lhs} = {rhs}" for lhs, rhs in self.lines] + [s for s, _ in self.where]

