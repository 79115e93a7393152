"""Figures of an inspection: one head, the model-wide grid, metric grids, rollout, head map.

Every figure is written as PNG and SVG, atomically (see :func:`attnlab.plots.figure`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import torch

from attnlab.inspect.labels import LABEL_COLORS, LABELS
from attnlab.inspect.metrics import METRIC_TITLES
from attnlab.plots._figure import figure
from attnlab.plots.heatmap import draw_heatmap, save_heatmap


def _both(stem: Path) -> list[Path]:
    return [stem.with_suffix(".png"), stem.with_suffix(".svg")]


def draw_head(a: torch.Tensor, tokens: list[str], layer: int, head: int, ax):
    """One head's map ``(N, N)`` into ``ax``, on a 0-1 scale."""
    return draw_heatmap(a, ax, title=f"layer {layer}, head {head}", row_labels=tokens,
                        col_labels=tokens, vmin=0.0, vmax=1.0, annotate=False,
                        colorbar_label="attention weight")


def save_head(a: torch.Tensor, tokens: list[str], layer: int, head: int,
              out_dir: Path) -> list[Path]:
    """:func:`draw_head` as ``head_L{layer}_H{head}.png`` and ``.svg`` in ``out_dir``."""
    paths = _both(out_dir / f"head_L{layer}_H{head}")
    save_heatmap(a, paths, draw=lambda m, ax: draw_head(a, tokens, layer, head, ax))
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


def draw_model_grid(maps: torch.Tensor, ax):
    """All layers x heads ``(L, H, N, N)`` in one image into ``ax`` (rows: layers, columns:
    heads), each map scaled to its own largest weight so that a diffuse head is as visible as
    a sharp one. Maps longer than ``GRID_CELL`` tokens are max-pooled to it (a peak stays a
    peak); one image instead of one axes per head draws in a fraction of a second at any
    length."""
    n_layers, n_heads, n, _ = maps.shape
    mosaic, cell, step = grid_mosaic(maps)
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
    ax.figure.colorbar(im, ax=ax, fraction=0.02, pad=0.01, label="weight / the map's largest")
    pooled = f"; {n} tokens max-pooled to {cell}" if n > cell else ""
    ax.set_title(f"attention maps, every layer (rows) and head (columns){pooled}", fontsize=9)
    return ax


def save_model_grid(maps: torch.Tensor, out_dir: Path) -> list[Path]:
    """:func:`draw_model_grid` as ``model_grid.png`` and ``.svg`` in ``out_dir``."""
    n_layers, n_heads = maps.shape[:2]
    mosaic, cell, step = grid_mosaic(maps[:1, :1])
    rows = n_layers * step - (step - cell)
    cols = n_heads * step - (step - cell)
    paths = _both(out_dir / "model_grid")
    width = 1.0 * n_heads + 1.6
    with figure(paths, figsize=(width, (width - 1.6) * rows / cols + 0.9),
                dpi=max(110, int(1.2 * step))) as fig:
        draw_model_grid(maps, fig.add_subplot())
    return paths


def draw_metric_grid(values: torch.Tensor, name: str, ax):
    """A (layers x heads) metric as an annotated heatmap into ``ax``."""
    n_layers, n_heads = values.shape
    return draw_heatmap(values, ax, title=METRIC_TITLES.get(name, name), vmin=0.0,
                        vmax=1.0 if float(values.max()) <= 1.0 else None, annotate=True,
                        row_labels=[f"L{i}" for i in range(n_layers)],
                        col_labels=[f"H{j}" for j in range(n_heads)], xlabel="head",
                        ylabel="layer")


def save_metric_grid(values: torch.Tensor, name: str, out_dir: Path) -> list[Path]:
    """:func:`draw_metric_grid` as ``metric_{name}.png`` and ``.svg`` in ``out_dir``."""
    paths = _both(out_dir / f"metric_{name}")
    save_heatmap(values, paths, draw=lambda m, ax: draw_metric_grid(values, name, ax))
    return paths


def draw_rollout(r: torch.Tensor, tokens: list[str], ax, title: str = "attention rollout"):
    """A token-to-token attribution matrix (rollout, flow, relevance) into ``ax``."""
    return draw_heatmap(r, ax, title=title, row_labels=tokens, col_labels=tokens,
                        xlabel="input token", ylabel="output position", annotate=False,
                        colorbar_label="contribution")


def save_rollout(r: torch.Tensor, tokens: list[str], out_dir: Path, name: str = "rollout",
                 title: str = "attention rollout") -> list[Path]:
    """:func:`draw_rollout` as ``{name}.png`` and ``.svg`` in ``out_dir``."""
    paths = _both(out_dir / name)
    save_heatmap(r, paths, draw=lambda m, ax: draw_rollout(r, tokens, ax, title))
    return paths


def draw_embedding(xy: torch.Tensor, labels: list[list[str]], ax):
    """Heads placed by classical MDS of their JS distances into ``ax``, coloured by taxonomy
    label."""
    n_heads = len(labels[0])
    flat = [lab for row in labels for lab in row]
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
    return ax


def save_embedding(xy: torch.Tensor, labels: list[list[str]], out_dir: Path) -> list[Path]:
    """:func:`draw_embedding` as ``head_embedding.png`` and ``.svg`` in ``out_dir``."""
    paths = _both(out_dir / "head_embedding")
    with figure(paths, figsize=(7, 5.5), dpi=110) as fig:
        draw_embedding(xy, labels, fig.add_subplot())
    return paths


def save_figures(ins, out_dir: Path, head: tuple[int, int] | None = None) -> dict[str, Path]:
    """Every figure of an :class:`~attnlab.inspect.run.Inspection`; returns the PNG paths by
    name (each has an SVG twin)."""
    out_dir = Path(out_dir)
    figs: dict[str, Path] = {}
    layer, h = head if head is not None else _most_confident(ins)
    figs["head"] = save_head(ins.maps[layer, h], ins.tokens, layer, h, out_dir)[0]
    figs["model_grid"] = save_model_grid(ins.maps, out_dir)[0]
    for name in ("entropy_ratio", "max_weight", "prev_mass", "next_mass", "self_mass", "cls",
                 "sep", "punct", "sink_mass", "local_mass", "within_segment"):
        values = getattr(ins.metrics, name, None)
        if values is not None:
            figs[f"metric_{name}"] = save_metric_grid(values, name, out_dir)[0]
    figs["rollout"] = save_rollout(ins.rollout, ins.tokens, out_dir)[0]
    if ins.flow is not None:
        figs["flow"] = save_rollout(ins.flow, ins.tokens, out_dir, "flow", "attention flow")[0]
    if ins.gradient is not None:
        # R starts as the identity and every layer adds to it; the identity is the same for any
        # input, so the figure shows what attention added.
        extra = ins.gradient - torch.eye(ins.gradient.shape[0], dtype=ins.gradient.dtype)
        figs["gradient"] = save_rollout(
            extra, ins.tokens, out_dir, "gradient",
            "gradient-weighted attention, R - I (target: norm of the pooled embedding)")[0]
    figs["head_embedding"] = save_embedding(ins.xy, ins.taxonomy.labels, out_dir)[0]
    return figs


def _most_confident(ins) -> tuple[int, int]:
    flat = int(ins.metrics.max_weight.flatten().argmax())
    return divmod(flat, ins.heads)


