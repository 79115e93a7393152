"""Heatmaps of matrices: scores, weights, masks, metrics."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

from attnlab.plots._figure import figure, first_path


def heatmap_size(matrix) -> tuple[float, float]:
    """Inches for a heatmap of ``matrix``: 0.75 per column, 0.6 per row, up to a page (at 512
    tokens the figure is drawn at the matrix's own resolution, not 111 megapixels)."""
    n_rows, n_cols = np.shape(matrix)[-2:]
    return (min(14.0, max(4.0, 0.75 * n_cols + 2.5)), min(12.0, max(3.0, 0.6 * n_rows + 1.8)))


def save_heatmap(matrix, path: str | Path | Sequence[str | Path], *,
                 figsize: tuple[float, float] | None = None, draw=None, **options) -> Path:
    """:func:`draw_heatmap` in a figure of its own, written to ``path`` (or several paths: the
    same figure in each format). ``figsize`` defaults to :func:`heatmap_size`; ``draw``, a
    ``draw(matrix, ax)`` of a module's own heatmap, replaces :func:`draw_heatmap`."""
    with figure(path, figsize=figsize or heatmap_size(matrix)) as fig:
        if draw is None:
            draw_heatmap(matrix, fig.add_subplot(), **options)
        else:
            draw(matrix, fig.add_subplot())
    return first_path(path)


def draw_heatmap(matrix, ax, *, title: str,
            row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
            xlabel: str = "key", ylabel: str = "query", cmap: str = "viridis",
            annotate: bool | None = None, vmin: float | None = None, vmax: float | None = None,
            colorbar_label: str = "", fmt: str = "{:.2f}", center: bool = False,
            categories: Sequence[str] | None = None, norm=None):
    """Draw a matrix as a heatmap with labelled axes into ``ax`` (and its colour bar beside it);
    -inf cells (masked) are drawn hatched grey.

    Args:
        matrix: ``(N_q, N_k)`` array or tensor.
        ax: the matplotlib Axes to draw into (one of a caller's subplots, say).
        annotate: write each value in its cell (with ``fmt``); default when the matrix is at
            most 12 x 12.
        center: make the colour scale symmetric around 0 (for signed scores).
        categories: draw integer cells 0..len-1 as discrete categories with these names.
        norm: a matplotlib ``Normalize`` (e.g. ``TwoSlopeNorm`` to centre a diverging map on a
            value other than 0); replaces vmin / vmax.

    Returns:
        ``ax``.
    """
    m = np.asarray(matrix.detach().cpu() if hasattr(matrix, "detach") else matrix, dtype=float)
    n_rows, n_cols = m.shape
    masked = ~np.isfinite(m)
    shown = np.ma.masked_array(m, mask=masked)
    if annotate is None:
        annotate = n_rows <= 12 and n_cols <= 12
    if center and np.isfinite(m).any():
        lim = float(np.abs(m[np.isfinite(m)]).max()) or 1.0
        vmin, vmax = -lim, lim
    fig = ax.figure
    if categories is not None:
        colormap = ListedColormap(["#eeeeee", "#2f6db3", "#e0812b"][:len(categories)])
        vmin, vmax = -0.5, len(categories) - 0.5
    else:
        colormap = matplotlib.colormaps[cmap]
    colormap = colormap.with_extremes(bad="#d9d9d9")
    scale = {"norm": norm} if norm is not None else {"vmin": vmin, "vmax": vmax}
    im = ax.imshow(shown, cmap=colormap, aspect="auto", interpolation="nearest", **scale)
    if masked.any():
        ys, xs = np.nonzero(masked)
        for y, x in zip(ys, xs):
            ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///",
                                   edgecolor="#9a9a9a", linewidth=0))
    cbar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if categories is not None:
        cbar.set_ticks(range(len(categories)), labels=list(categories))
    if colorbar_label:
        cbar.set_label(colorbar_label)
    # Past 64 labels a tick per label is unreadable and slow to draw: every k-th one.
    if row_labels is not None:
        k = -(-n_rows // 48) if n_rows > 64 else 1
        ax.set_yticks(range(0, n_rows, k), labels=list(row_labels)[::k])
    if col_labels is not None:
        k = -(-n_cols // 48) if n_cols > 64 else 1
        ax.set_xticks(range(0, n_cols, k), labels=list(col_labels)[::k], rotation=45,
                      ha="right")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if annotate:
        for y in range(n_rows):
            for x in range(n_cols):
                if masked[y, x]:
                    ax.text(x, y, "-inf" if m[y, x] < 0 else "", ha="center", va="center",
                            fontsize=8, color="#555555")
                    continue
                r, g, b, _ = colormap(im.norm(m[y, x]))
                light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5     # text must contrast
                ax.text(x, y, fmt.format(m[y, x]), ha="center", va="center", fontsize=8,
                        color="black" if light else "white")
    return ax


