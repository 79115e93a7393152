"""Figures of an inspection: one head, the model-wide grid, metric grids, rollout, head map.

Every figure is written as PNG and SVG, atomically (see :func:`attnlab.plots.figure`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
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


GRID_CELL = 128   # pixels per map in the model grid; longer maps are max-pooled to it


def grid_mosaic(maps: torch.Tensor) -> tuple[np.ndarray, int, int]:
    """The model grid's image: every ``(L, H)`` map max-pooled to at most ``GRID_CELL``
    pixels a side and divided by its own largest weight, tiled with NaN gaps. Returns the
    image, the tile size and the tile pitch."""
    n_layers, n_heads, n, _ = maps.shape
    cell = min(n, GRID_CELL)
    a = maps.detach().float().reshape(n_layers * n_heads, 1, n, n)
    if n > cell:
        a = torch.nn.functional.adaptive_max_pool2d(a, cell)
    a = (a / a.amax((-2, -1), keepdim=True).clamp_min(1e-12))[:, 0]  # (LH, cell, cell)
    gap = max(1, cell // 12)
    step = cell + gap
    mosaic = np.full((n_layers * step - gap, n_heads * step - gap), np.nan)
    for i, tile in enumerate(a.numpy()):
        r, c = divmod(i, n_heads)
        mosaic[r * step:r * step + cell, c * step:c * step + cell] = tile
    return mosaic, cell, step


def model_grid(maps: torch.Tensor, out_dir: Path) -> list[Path]:
    """All layers x heads in one image (rows: layers, columns: heads), each map scaled to its
    own largest weight so that a diffuse head is as visible as a sharp one. Maps longer than
    ``GRID_CELL`` tokens are max-pooled to it (a peak stays a peak); one image instead of one
    axes per head draws in a fraction of a second at any length."""
    n_layers, n_heads, n, _ = maps.shape
    mosaic, cell, step = grid_mosaic(maps)
    paths = _both(out_dir / "model_grid")
    width = 1.0 * n_heads + 1.6
    with figure(paths, figsize=(width, (width - 1.6) * mosaic.shape[0] / mosaic.shape[1] + 0.9),
                dpi=max(110, int(1.2 * step))) as fig:
        ax = fig.add_subplot()
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
        im = ax.imshow(np.ma.masked_invalid(mosaic), cmap=cmap, vmin=0, vmax=1,
                       interpolation="nearest")
        ax.set_xticks([c * step + cell / 2 for c in range(n_heads)],
                      labels=[f"H{h}" for h in range(n_heads)], fontsize=8)
        ax.set_yticks([r * step + cell / 2 for r in range(n_layers)],
                      labels=[f"L{layer}" for layer in range(n_layers)], fontsize=8)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01, label="weight / the map's largest")
        pooled = f"; {n} tokens max-pooled to {cell}" if n > cell else ""
        ax.set_title(f"attention maps, every layer (rows) and head (columns){pooled}",
                     fontsize=9)
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
