"""Figures of the feature-attention (FT-Transformer) estimators, drawn from a fitted one
(the scikit-learn precedent: ``XDisplay.from_estimator``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.plots._figure import figure
from attnlab.plots.heatmap import draw_heatmap, save_heatmap


def draw_feature_attention(est, X, ax, title: str | None = None):
    """Heatmap of ``est.feature_attention(X)`` into ``ax``: feature tokens and [CLS] attending
    each other."""
    names = est.token_names_ + ["[CLS]"]
    return draw_heatmap(est.feature_attention(X), ax, title=title or (
        f"{type(est).__name__}: attention between feature tokens (mean of rows, heads, "
        "layers)"), row_labels=names, col_labels=names, xlabel="attended token",
        ylabel="attending token", colorbar_label="attention weight",
        annotate=len(names) <= 14)


def save_feature_attention(est, X, path: str | Path, title: str | None = None) -> Path:
    """:func:`draw_feature_attention` written to ``path``."""
    n = len(est.token_names_) + 1
    size = None if n <= 14 else (min(14.0, 0.32 * n + 4.5), min(12.0, 0.28 * n + 3.0))
    return save_heatmap(np.zeros((n, n)), path, figsize=size,
                        draw=lambda m, ax: draw_feature_attention(est, X, ax, title))


def draw_importance(est, ax, title: str | None = None):
    """Bar chart of ``est.feature_importances_`` into ``ax``, largest on top, with the uniform
    1/F line."""
    imp = est.feature_importances_
    order = np.argsort(imp)
    names = np.asarray(est.token_names_)[order]
    ax.barh(range(len(imp)), imp[order], color="#2f6db3")
    ax.set_yticks(range(len(imp)), labels=names)
    ax.axvline(1 / len(imp), color="#999999", linestyle="--", linewidth=1, label="uniform (1/F)")
    ax.set_xlabel("[CLS] attention (mean over heads, layers, training rows)")
    ax.set_title(title or "Feature importance from [CLS] attention")
    ax.legend(loc="lower right")
    return ax


def save_importance(est, path: str | Path, title: str | None = None) -> Path:
    """:func:`draw_importance` written to ``path``."""
    with figure(path, figsize=(6.5, 0.28 * len(est.feature_importances_) + 1.4)) as fig:
        draw_importance(est, fig.add_subplot(), title)
    return Path(path)


