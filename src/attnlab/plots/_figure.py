"""The one way a figure is made and written: a ``matplotlib.figure.Figure`` on its own Agg
canvas (no pyplot, no ``matplotlib.use()``, no global state), laid out, saved atomically to
every path asked for, then released."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab._files import atomic_path

# Fonts with CJK glyphs that matplotlib falls back to when one is installed (token labels of
# Chinese or Japanese text otherwise draw as empty boxes).
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei", "PingFang SC",
             "Hiragino Sans GB", "AR PL UMing CN")


@lru_cache(maxsize=1)
def _fallback_fonts() -> tuple[str, ...]:
    from matplotlib import font_manager

    have = {f.name for f in font_manager.fontManager.ttflist}
    return ("DejaVu Sans",) + tuple(f for f in CJK_FONTS if f in have)


@contextmanager
def _fonts(name: str):
    """CJK fallback fonts and TrueType embedding while text is laid out, drawn and saved
    (inside an ``rc_context``: the caller's settings are untouched); the glyphs still missing are
    reported in one warning that names a character and the fix, instead of matplotlib's one
    per glyph."""
    import matplotlib

    # TrueType (42), not Type 3, fonts in PDF and PostScript: publishers' checkers reject
    # Type 3, and its glyphs are bitmaps to some viewers
    with warnings.catch_warnings(record=True) as caught, matplotlib.rc_context(
            {"font.sans-serif": list(_fallback_fonts())
             + list(matplotlib.rcParams["font.sans-serif"]),
             "pdf.fonttype": 42, "ps.fonttype": 42}):
        warnings.simplefilter("always")
        yield
    missing = []
    for w in caught:
        m = re.search(r"Glyph \d+ \((.+?)\) missing", str(w.message))
        if m is None:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        else:
            ch = m.group(1)
            if ch.startswith("\\N{"):
                import unicodedata

                ch = unicodedata.lookup(ch[3:-1])
            if ch not in missing:
                missing.append(ch)
    if missing:
        warnings.warn(f"figure {name}: {len(missing)} character(s) such as {missing[0]!r} have "
                      "no glyph in the installed fonts and show as empty boxes; install a CJK "
                      "font (Debian: apt-get install fonts-noto-cjk)", UserWarning, stacklevel=3)


def save_figure(fig: Figure, path: str | Path, **kwargs) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) under a temporary name, then rename."""
    with _fonts(Path(path).name), atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or None, **kwargs)
    return Path(path)


@contextmanager
def figure(paths: str | Path | Sequence[str | Path], *, figsize: tuple[float, float],
           dpi: int = 120, layout: str | None = "tight", **savefig) -> Iterator[Figure]:
    """Draw on the yielded figure; on leaving the block it is saved to each of ``paths`` (say a
    ``.png`` and an ``.svg`` twin) and cleared. Nothing is written if the block raises.

    Example:
        >>> with figure("out/bars.png", figsize=(4, 3)) as fig:   # doctest: +SKIP
        ...     fig.add_subplot().bar([0, 1], [2, 3])
    """
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    try:
        yield fig
        targets = [paths] if isinstance(paths, (str, Path)) else list(paths)
        with _fonts(Path(targets[0]).name if targets else "figure"):
            if layout == "tight":
                fig.tight_layout()
            for p in targets:
                save_figure(fig, p, **savefig)
    finally:
        fig.clear()


def first_path(paths: str | Path | Sequence[str | Path]) -> Path:
    """The first of one path or several."""
    return Path(paths if isinstance(paths, (str, Path)) else list(paths)[0])
