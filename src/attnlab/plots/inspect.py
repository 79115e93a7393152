"""Figures of an inspection: one head, the model-wide grid, metric grids, rollout, head map.

Every figure is written as PNG and SVG, atomically (see :func:`attnlab.plots.figure`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attnlab.inspect.metrics import METRIC_TITLES
from attnlab.inspect.taxonomy import LABEL_COLORS, LABELS
from attnlab.plots._figure import figure
from attnlab.plots.heatmap import heatmap

def _both(stem: Path) -> list[Path]:
    return [stem.with_suffix(".png"), stem.with_suffix(".svg")]


def head_figure(a: torch.Tensor, tokens: list[str], layer: int, head: int,
                out_dir: Path) -> list[Path]:
    paths = _both(out_dir / f"head_L{layer}_H{head}")
    heatmap(a, paths, title=f"layer {layer}, head {head}", row_labels=tokens, col_labels=tokens,
            vmin=0.0, vmax=1.0, annotate=False, colorbar_label="attention weight")
    return paths


def model_grid(maps: torch.Tensor, out_dir: Path) -> list[Path]:
    """All layers x heads as small heatmaps (rows: layers, columns: heads)."""
    n_layers, n_heads = maps.shape[:2]
    paths = _both(out_dir / "model_grid")
    with figure(paths, figsize=(1.1 * n_heads + 1, 1.1 * n_layers + 0.8), dpi=110) as fig:
        axes = fig.subplots(n_layers, n_heads, squeeze=False)
        for layer in range(n_layers):
            for head in range(n_heads):
                ax = axes[layer][head]
                ax.imshow(maps[layer, head].numpy(), cmap="viridis", vmin=0, vmax=1,
                          interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if layer == 0:
                    ax.set_title(f"H{head}", fontsize=8)
                if head == 0:
                    ax.set_ylabel(f"L{layer}", fontsize=8)
        fig.suptitle("attention maps, every layer (rows) and head (columns)")
    return paths


def metric_grid(values: torch.Tensor, name: str, out_dir: Path) -> list[Path]:
    """A (layers x heads) metric as an annotated heatmap."""
    n_layers, n_heads = values.shape
    paths = _both(out_dir / f"metric_{name}")
    heatmap(values, paths, title=METRIC_TITLES.get(name, name), vmin=0.0,
            vmax=1.0 if float(values.max()) <= 1.0 else None, annotate=True,
            row_labels=[f"L{i}" for i in range(n_layers)],
            col_labels=[f"H{j}" for j in range(n_heads)], xlabel="head", ylabel="layer")
    return paths


def rollout_figure(r: torch.Tensor, tokens: list[str], out_dir: Path, name: str = "rollout",
                   title: str = "attention rollout") -> list[Path]:
    paths = _both(out_dir / name)
    heatmap(r, paths, title=title, row_labels=tokens, col_labels=tokens,
            xlabel="input token", ylabel="output position", annotate=False,
            colorbar_label="contribution")
    return paths


def embedding_figure(xy: torch.Tensor, labels: list[list[str]], out_dir: Path) -> list[Path]:
    """Heads placed by classical MDS of their JS distances, coloured by taxonomy label."""
    n_heads = len(labels[0])
    flat = [lab for row in labels for lab in row]
    paths = _both(out_dir / "head_embedding")
    with figure(paths, figsize=(7, 5.5), dpi=110) as fig:
        ax = fig.add_subplot()
        pts = np.asarray(xy)
        for label in LABELS:
            idx = [i for i, lab in enumerate(flat) if lab == label]
            if idx:
                ax.scatter(pts[idx, 0], pts[idx, 1], s=40, color=LABEL_COLORS[label], label=label,
                           edgecolor="white", linewidth=0.5)
        for i, (x, y) in enumerate(pts):
            ax.annotate(f"{i // n_heads}.{i % n_heads}", (x, y), fontsize=6, alpha=0.7,
                        xytext=(2, 2), textcoords="offset points")
        ax.set_title("heads by Jensen-Shannon distance (classical MDS); label: layer.head")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.legend(fontsize=8, loc="best")
    return paths


def write_figures(ins, out_dir: Path, head: tuple[int, int] | None = None) -> dict[str, Path]:
    """Every figure of an :class:`~attnlab.inspect.run.Inspection`; returns the PNG paths by
    name (each has an SVG twin)."""
    out_dir = Path(out_dir)
    figs: dict[str, Path] = {}
    layer, h = head if head is not None else _most_confident(ins)
    figs["head"] = head_figure(ins.maps[layer, h], ins.tokens, layer, h, out_dir)[0]
    figs["model_grid"] = model_grid(ins.maps, out_dir)[0]
    for name in ("entropy_ratio", "confidence", "prev", "next", "self", "cls", "sep", "punct",
                 "first", "within_segment"):
        values = getattr(ins.metrics, name, None)
        if values is not None:
            figs[f"metric_{name}"] = metric_grid(values, name, out_dir)[0]
    figs["rollout"] = rollout_figure(ins.rollout, ins.tokens, out_dir)[0]
    if ins.flow is not None:
        figs["flow"] = rollout_figure(ins.flow, ins.tokens, out_dir, "flow", "attention flow")[0]
    if ins.gradient is not None:
        # R starts as the identity and every layer adds to it; the identity is the same for any
        # input, so the figure shows what attention added.
        extra = ins.gradient - torch.eye(ins.gradient.shape[0], dtype=ins.gradient.dtype)
        figs["gradient"] = rollout_figure(
            extra, ins.tokens, out_dir, "gradient",
            "gradient-weighted attention, R - I (target: norm of the pooled embedding)")[0]
    figs["head_embedding"] = embedding_figure(ins.xy, ins.taxonomy.labels, out_dir)[0]
    return figs


def _most_confident(ins) -> tuple[int, int]:
    flat = int(ins.metrics.confidence.flatten().argmax())
    return divmod(flat, ins.heads)
