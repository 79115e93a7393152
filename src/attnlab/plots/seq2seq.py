"""The alignment figure of a seq2seq model with attention (Bahdanau et al. 2015, figure 3)."""

from __future__ import annotations

from pathlib import Path

from attnlab.plots.heatmap import draw_heatmap, save_heatmap


def draw_alignment(tr, ax, title: str | None = None):
    """Cross-attention of a :class:`~attnlab.models.seq2seq.Translation` into ``ax``: output
    tokens (rows) against input tokens (columns)."""
    rows = list(tr.output) + ["</s>"]
    return draw_heatmap(tr.alignment, ax, title=title or f"alignment: {tr.source} -> "
                        f"{tr.output}", row_labels=rows[:tr.alignment.shape[0]],
                        col_labels=list(tr.source), xlabel="input token",
                        ylabel="output token", colorbar_label="attention α", annotate=False)


def save_alignment(tr, path, title: str | None = None) -> Path:
    """:func:`draw_alignment` written to ``path``."""
    return save_heatmap(tr.alignment, path, draw=lambda m, ax: draw_alignment(tr, ax, title))


