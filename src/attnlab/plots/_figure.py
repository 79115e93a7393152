"""The one way a figure is made and written: a ``matplotlib.figure.Figure`` on its own Agg
canvas (no pyplot, no ``matplotlib.use()``, no global state), laid out, saved atomically to
every path asked for, then released."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab._files import atomic_path


def save_figure(fig: Figure, path: str | Path, **kwargs) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) under a temporary name, then rename."""
    with atomic_path(path) as tmp:
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
        if layout == "tight":
            fig.tight_layout()
        for p in [paths] if isinstance(paths, (str, Path)) else paths:
            save_figure(fig, p, **savefig)
    finally:
        fig.clear()
