"""The alignment figure of a seq2seq model with attention (Bahdanau et al. 2015, figure 3)."""

from __future__ import annotations

from pathlib import Path

from attnlab.plots.heatmap import heatmap


def plot_alignment(tr, path, title: str | None = None) -> Path:
    """Cross-attention of a :class:`~attnlab.models.seq2seq.Translation`: output tokens (rows)
    against input tokens (columns)."""
    rows = list(tr.output) + ["</s>"]
    return heatmap(tr.alignment, path, title=title or f"alignment: {tr.source} -> {tr.output}",
                   row_labels=rows[:tr.alignment.shape[0]], col_labels=list(tr.source),
                   xlabel="input token", ylabel="output token", colorbar_label="attention α",
                   annotate=False)
