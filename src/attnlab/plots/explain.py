"""Heatmaps of an :class:`~attnlab.explain.Walkthrough`: the scores, the weights, the mask."""

from __future__ import annotations

from pathlib import Path

from attnlab.plots.heatmap import heatmap


def write_heatmaps(wt, out_dir: str | Path) -> list[Path]:
    """scores.png (scaled, masked S), weights.png (A) and mask.png in out_dir."""
    out_dir = Path(out_dir)
    labels = dict(row_labels=wt.tokens, col_labels=wt.tokens)
    return [
        heatmap(wt.scaled, out_dir / "scores.png", cmap="coolwarm", center=True,
                title=f"S = Q K^T * scale / T{wt.label}\n(hatched: masked)",
                colorbar_label="score", **labels),
        heatmap(wt.a, out_dir / "weights.png", title=f"A = softmax(S){wt.label}\n(rows sum to 1)",
                vmin=0.0, vmax=1.0, colorbar_label="weight", **labels),
        heatmap(wt.keep.double(), out_dir / "mask.png", categories=["masked", "may attend"],
                title=f"mask{wt.label} (True = may attend)", fmt="{:.0f}", **labels),
    ]
