"""Figures of sharded attention: which rank computes which part of a causal attention matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.colors import ListedColormap

from attnlab.distributed import layout as L
from attnlab.plots._figure import figure

RANK_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
               "#8C8C8C")


def draw_layout(axes, *, n: int = 32, world: int = 4):
    """Into ``axes`` (two panels): the causal matrix of ``n`` queries x ``n`` keys under the
    contiguous and the zig-zag layouts, each kept (query, key) pair coloured by the rank that
    computes it (the rank holding the query), with every rank's share of the pairs."""
    cmap = ListedColormap(["#FFFFFF", *RANK_COLORS[:world]])
    for ax, name in zip(axes, ("contiguous", "zigzag")):
        ranges = L.shard_ranges(n, world, name)
        owner = np.zeros(n, dtype=int)
        for r, rr in enumerate(ranges):
            for a, b in rr:
                owner[a:b] = r + 1
        keep = np.tril(np.ones((n, n), dtype=bool))
        grid = np.where(keep, owner[:, None], 0)
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=world, interpolation="nearest")
        work = L.causal_work(ranges)
        title = "contiguous" if name == "contiguous" else "zig-zag"
        ax.set_title(f"{title}: busiest rank does {max(work) / (sum(work) / world):.2f}x "
                     "its share", fontsize=10)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        for r, rr in enumerate(ranges):
            for a, b in rr:
                ax.annotate(f"rank {r}", xy=(n - 0.5, (a + b - 1) / 2), xytext=(9, 0),
                            textcoords="offset points", va="center", fontsize=8, ha="left",
                            color=RANK_COLORS[r], annotation_clip=False)
        ax.set_xticks(range(0, n + 1, max(1, n // 4)))
        ax.set_yticks(range(0, n + 1, max(1, n // 4)))
        shares = ", ".join(f"{w / sum(work):.0%}" for w in work)
        ax.text(0.02, 0.02, f"pairs per rank: {shares}", transform=ax.transAxes,
                fontsize=8, va="bottom")
    axes[0].figure.suptitle(f"Causal attention of {n} tokens over {world} ranks: who "
                            "computes what", fontsize=11)
    return axes


def save_layout(paths: str | Path | list, *, n: int = 32, world: int = 4) -> None:
    """:func:`draw_layout` written to ``paths``."""
    with figure(paths, figsize=(9.6, 4.8)) as fig:
        draw_layout(fig.subplots(1, 2), n=n, world=world)


