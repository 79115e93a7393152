"""Figures of the feature-attention (FT-Transformer) estimators, drawn from a fitted one
(the scikit-learn precedent: ``XDisplay.from_estimator``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.plots._figure import figure
from attnlab.plots.heatmap import heatmap


def plot_feature_attention(est, X, path: str | Path, title: str | None = None) -> Path:
    """Heatmap of ``est.feature_attention(X)``: feature tokens and [CLS] attending each other."""
    names = est.token_names_ + ["[CLS]"]
    return heatmap(est.feature_attention(X), path, title=title or (
        f"{type(est).__name__}: attention between feature tokens (mean of rows, heads, "
        "layers)"), row_labels=names, col_labels=names, xlabel="attended token",
        ylabel="attending token", colorbar_label="attention weight",
        annotate=len(names) <= 14,
        figsize=None if len(names) <= 14 else (min(14.0, 0.32 * len(names) + 4.5),
                                                min(12.0, 0.28 * len(names) + 3.0)))


def plot_importance(est, path: str | Path, title: str | None = None) -> Path:
    """Bar chart of ``est.feature_importances_``, largest on top, with the uniform 1/F line."""
    imp = est.feature_importances_
    order = np.argsort(imp)
    names = np.asarray(est.token_names_)[order]
    with figure(path, figsize=(6.5, 0.28 * len(imp) + 1.4)) as fig:
        ax = fig.add_subplot()
        ax.barh(range(len(imp)), imp[order], color="#2f6db3")
        ax.set_yticks(range(len(imp)), labels=names)
        ax.axvline(1 / len(imp), color="#999999", linestyle="--", linewidth=1,
                   label="uniform (1/F)")
        ax.set_xlabel("[CLS] attention (mean over heads, layers, training rows)")
        ax.set_title(title or "Feature importance from [CLS] attention")
        ax.legend(loc="lower right")
    return Path(path)
