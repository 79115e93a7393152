"""Figures of the Triton kernels' launch grids: which program computes which tile."""

from __future__ import annotations

from pathlib import Path

from matplotlib.patches import Patch, Rectangle

from attnlab.core import masks as M
from attnlab.core.layout import block_layout
from attnlab.core.masks import band_range
from attnlab.plots._figure import figure

PROGRAM_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
                  "#8C8C8C")


def _tiles(ax, kinds, owner, title, n_rows, n_cols, block, label):
    """``kinds[(row, col)]`` in {'full', 'partial'}; ``owner(row, col)`` the program index."""
    bq, bk = block
    for (r, c), kind in kinds.items():
        color = PROGRAM_COLORS[owner(r, c) % len(PROGRAM_COLORS)]
        ax.add_patch(Rectangle((c * bk, r * bq), bk, bq, facecolor=color,
                               alpha=1.0 if kind == "full" else 0.45,
                               hatch=None if kind == "full" else "///", edgecolor="white",
                               linewidth=1.0))
    ax.set_xlim(0, n_cols * bk)
    ax.set_ylim(n_rows * bq, 0)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.text(0.98, 0.02, label, transform=ax.transAxes, fontsize=7.5, ha="right", va="bottom")


def draw_launch_grid(axes, *, n: int = 256, block: int = 32, window: int = 80):
    """The ``n x n`` score matrix of a causal sliding-window request cut into ``block`` tiles,
    three times: the forward / dQ grid (one program per query block walks its row), the dK / dV
    grid (one program per key block walks its column) and a block-sparse layout (dilated window
    plus a global token). Solid tiles keep every entry (no mask is read), hatched ones read the
    mask, blank ones are never visited. Drawn into ``axes`` (three panels); returns them."""
    band = (window, 0)
    nb = -(-n // block)
    kinds = {}
    for r in range(nb):
        rng = band_range(band, 0, r * block, min((r + 1) * block, n), n)
        for c in range(nb):
            kind = rng.tile_kind(c * block, min((c + 1) * block, n))
            if kind != "skip":
                kinds[(r, c)] = kind
    visited = len(kinds)
    lay = block_layout(M.or_masks(M.dilated(2, window, 0), M.global_tokens(1)), n, n,
                       block=(block, block))
    from attnlab.core.backends.gpu import tiles_of  # needs no triton: plain tensor work

    t = tiles_of(lay)
    sparse = {(int(q), int(k)): "full" if int(f) else "partial"
              for q, k, f in zip(t.tile_qb, t.tile_kb, t.tile_full)}
    fig = axes[0].figure
    _tiles(axes[0], kinds, lambda r, c: r,
           "forward and dQ: grid (N_q / BLOCK_M, B·H)\none program per query block "
           "walks its row", nb, nb, (block, block),
           f"{visited} of {nb * nb} tiles visited")
    _tiles(axes[1], kinds, lambda r, c: c,
           "dK, dV: grid (N_k / BLOCK_N, B·H_kv)\none program per key block walks its "
           "column", nb, nb, (block, block), "no atomics: each program owns its dK, dV")
    _tiles(axes[2], sparse, lambda r, c: r,
           "triton_blocksparse: a layout's tiles\n(dilated causal window + 1 global token)",
           nb, nb, (block, block), f"{len(sparse)} tiles; read via row / column lists")
    fig.legend(handles=[Patch(facecolor="#4C72B0", label="tile that keeps every entry"),
                        Patch(facecolor="#4C72B0", alpha=0.45, hatch="///",
                              label="tile that reads the mask"),
                        Patch(facecolor="white", edgecolor="#999999",
                              label="never visited")],
               loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8,
               frameon=False)
    fig.suptitle(f"Triton kernels on {n} tokens, causal window {window}, {block} x {block} "
                 "tiles: colour = the program that computes the tile", fontsize=10)
    fig.subplots_adjust(bottom=0.17, top=0.8, wspace=0.35)
    return axes


def save_launch_grid(paths: str | Path | list, *, n: int = 256, block: int = 32,
                     window: int = 80) -> None:
    """:func:`draw_launch_grid` written to ``paths``."""
    with figure(paths, figsize=(12.6, 4.6), layout=None) as fig:
        draw_launch_grid(fig.subplots(1, 3), n=n, block=block, window=window)


