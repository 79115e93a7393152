"""Heatmaps of an :class:`~attnlab.explain.Walkthrough`: the scores, the weights, the mask."""

from __future__ import annotations

from pathlib import Path

from attnlab.plots.heatmap import draw_heatmap, save_heatmap


def _labels(wt) -> dict:
    return dict(row_labels=wt.tokens, col_labels=wt.tokens)


def draw_scores(wt, ax):
    """The scaled, masked scores ``S * scale / T`` (hatched: masked) into ``ax``."""
    return draw_heatmap(wt.scaled, ax, cmap="coolwarm", center=True,
                        title=f"S = Q K^T * scale / T{wt.label}\n(hatched: masked)",
                        colorbar_label="score", **_labels(wt))


def draw_weights(wt, ax):
    """The weights ``A = softmax(S)`` on a 0-1 scale into ``ax``."""
    return draw_heatmap(wt.a, ax, title=f"A = softmax(S){wt.label}\n(rows sum to 1)", vmin=0.0,
                        vmax=1.0, colorbar_label="weight", **_labels(wt))


def draw_mask(wt, ax):
    """The keep-mask (True = may attend) as two categories into ``ax``."""
    return draw_heatmap(wt.keep.double(), ax, categories=["masked", "may attend"],
                        title=f"mask{wt.label} (True = may attend)", fmt="{:.0f}",
                        **_labels(wt))


def save_heatmaps(wt, out_dir: str | Path) -> list[Path]:
    """scores.png (scaled, masked S), weights.png (A) and mask.png in ``out_dir``."""
    out_dir = Path(out_dir)
    return [save_heatmap(m, out_dir / name, draw=draw)
            for m, name, draw in ((wt.scaled, "scores.png", lambda m, ax: draw_scores(wt, ax)),
                                  (wt.a, "weights.png", lambda m, ax: draw_weights(wt, ax)),
                                  (wt.keep, "mask.png", lambda m, ax: draw_mask(wt, ax)))]


