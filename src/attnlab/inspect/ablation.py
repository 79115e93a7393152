"""Head ablation: how much a model's loss changes when one head's output is removed.

Michel et al. (2019), "Are Sixteen Heads Really Better than One?", measure a head's importance
by masking it (its output multiplied by 0) and reading the change of the loss; mean ablation
replaces the head's output by its mean over a reference batch instead, which keeps the
activation statistics the next layer expects (the usual choice in circuit analysis, e.g. Wang et
al. 2022). Attention mass says where a head looks; ablation says whether what it brings
matters. The two often disagree: heads that park most of their weight on the first token
(a sink) can usually be removed at little cost.

A head's output is the slice ``[h * D, (h + 1) * D)`` of its attention module's output
projection input (the concatenated heads, before ``W_O``), so ablation is a forward
pre-hook on that projection -- no code of the model is replaced. Works on attnlab's
:class:`~attnlab.nn.MultiheadAttention` (``out_proj``) and on transformers attention modules
whose output projection is ``o_proj``, ``out_proj``, ``c_proj`` (GPT-2) or ``o`` (T5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager

import torch
import torch.nn as nn

from attnlab.nn.multihead import MultiheadAttention as AttnlabMHA

_PROJECTIONS = ("out_proj", "o_proj", "c_proj", "o")
MODES = ("zero", "mean")


def attention_modules(model: nn.Module) -> list[tuple[nn.Module, nn.Module, int]]:
    """``(attention module, its output projection, heads)`` in module order: the "layers" of
    :func:`ablate_heads` and :func:`head_importance`."""
    found = []
    for m in model.modules():
        heads = getattr(m, "num_heads", None) or getattr(m, "n_heads", None) or \
            getattr(getattr(m, "config", None), "num_attention_heads", None)
        proj = next((getattr(m, p) for p in _PROJECTIONS
                     if isinstance(getattr(m, p, None), nn.Module)), None)
        if isinstance(m, AttnlabMHA) or (proj is not None and heads and
                                         type(m).__name__.endswith("Attention")):
            found.append((m, proj, int(m.num_heads if isinstance(m, AttnlabMHA) else heads)))
    if not found:
        raise ValueError(f"{type(model).__name__} has no attention module whose output "
                         "projection attnlab can reach (attnlab MultiheadAttention, or a "
                         f"transformers *Attention with one of {', '.join(_PROJECTIONS)})")
    return found


def _check(heads, modules):
    out = []
    for pair in heads:
        layer, head = pair
        if not 0 <= layer < len(modules) or not 0 <= head < modules[layer][2]:
            raise ValueError(f"head {pair} does not exist: the model has {len(modules)} "
                             f"attention layers of {modules[0][2]} heads (0-based)")
        out.append((int(layer), int(head)))
    return out


@contextmanager
def ablate_heads(model: nn.Module, heads: Iterable[tuple[int, int]], mode: str = "zero",
                 means: dict[int, torch.Tensor] | None = None):
    """Inside the block, the listed ``(layer, head)`` outputs are zeroed (``mode="zero"``) or
    replaced by ``means[layer][head]`` (``mode="mean"``, from :func:`head_means`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "mean" and means is None:
        raise ValueError("mode='mean' needs means= from head_means(model, run)")
    modules = attention_modules(model)
    chosen = _check(heads, modules)
    by_layer: dict[int, list[int]] = {}
    for layer, head in chosen:
        by_layer.setdefault(layer, []).append(head)
    handles = []
    for layer, hs in by_layer.items():
        _, proj, n_heads = modules[layer]

        def pre(mod, args, hs=hs, n_heads=n_heads, layer=layer):
            x = args[0]
            d = x.shape[-1] // n_heads
            x = x.clone()
            for h in hs:
                x[..., h * d:(h + 1) * d] = 0.0 if mode == "zero" else means[layer][h]
            return (x, *args[1:])

        handles.append(proj.register_forward_pre_hook(pre))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def head_means(model: nn.Module, run: Callable[[], object]) -> dict[int, torch.Tensor]:
    """Each head's mean output over every token ``run()`` feeds the model:
    ``{layer: (H, D)}``."""
    modules = attention_modules(model)
    sums: dict[int, list] = {}
    handles = []
    for layer, (_, proj, n_heads) in enumerate(modules):
        def pre(mod, args, layer=layer, n_heads=n_heads):
            x = args[0].detach().double()
            x = x.reshape(-1, n_heads, x.shape[-1] // n_heads)            # (tokens, H, D)
            s = sums.setdefault(layer, [0.0, 0])
            s[0] = s[0] + x.sum(0)
            s[1] += x.shape[0]
        handles.append(proj.register_forward_pre_hook(pre))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return {layer: (s / n).float() for layer, (s, n) in sums.items()}


@torch.no_grad()
def head_importance(model: nn.Module, loss: Callable[[], float], *, mode: str = "zero",
                    means: dict[int, torch.Tensor] | None = None,
                    heads: Iterable[tuple[int, int]] | None = None,
                    progress: bool = True) -> torch.Tensor:
    """``(layers, heads)``: ``loss()`` with that one head ablated minus ``loss()`` intact; NaN
    for the heads not asked for.

    ``loss`` evaluates the model (the loss, or any named output) and returns a float: one
    forward per head, so ``heads`` (a list of ``(layer, head)``) takes a subset, and
    ``progress`` shows a bar on a terminal (stderr). :func:`attnlab.inspect.importance.
    head_gradients` estimates every head at once from one backward. With ``mode="mean"`` the
    means default to those of the tokens ``loss()`` itself feeds.
    """
    from attnlab._progress import progress_bar

    modules = attention_modules(model)
    chosen = ([(layer, h) for layer, (_, _, n) in enumerate(modules) for h in range(n)]
              if heads is None else _check(heads, modules))
    if mode == "mean" and means is None:
        means = head_means(model, loss)
    base = float(loss())
    out = torch.full((len(modules), max(h for _, _, h in modules)), float("nan"),
                     dtype=torch.float64)
    with progress_bar(progress, "ablating heads") as bar:
        task = bar.add_task("ablating heads", total=len(chosen), losses="")
        for layer, head in chosen:
            with ablate_heads(model, [(layer, head)], mode=mode, means=means):
                out[layer, head] = float(loss()) - base
            bar.update(task, advance=1, losses=f"L{layer}H{head} {out[layer, head]:+.3f}")
    return out
