"""Score modifiers: FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx) -> score``.

A score modifier changes each scaled score by a function of where it sits: a relative
position bias, ALiBi slopes, a learnable per-head table. It runs on whole tiles: ``score`` is a
float tensor and ``b``, ``h``, ``q_idx``, ``kv_idx`` are integer tensors that broadcast against
it (batch, query head, query position, key position), so the function must be elementwise,
written with torch operations (indexing small tables by these indices is fine). Functions
written for ``torch.nn.attention.flex_attention`` work here unchanged.

Gradients. The reference backend differentiates through it with autograd. The tiled and
blocksparse backends recompute it tile by tile in their backward pass: the gradient flows to
the scores and to every tensor the function *captures* that requires grad (a learnable
bias in its closure, defaults, ``functools.partial`` arguments, or the parameters of an
``nn.Module`` used as the function), found by :func:`captured_tensors` and summed over tiles
in a fixed order, so it is deterministic (FlexAttention's bias gradients use atomic adds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                    torch.Tensor]


def captured_tensors(fn, _depth: int = 0, _seen: set | None = None) -> list[torch.Tensor]:
    """Tensors that require grad reachable from ``fn``: closure cells, defaults, bound
    ``self``, ``functools.partial`` arguments, module parameters, and containers of them."""
    seen = set() if _seen is None else _seen
    found: list[torch.Tensor] = []

    def visit(obj, depth):
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.requires_grad:
                found.append(obj)
        elif isinstance(obj, torch.nn.Module):
            found.extend(p for p in obj.parameters() if p.requires_grad)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for x in obj:
                visit(x, depth + 1)
        elif isinstance(obj, dict):
            for x in obj.values():
                visit(x, depth + 1)
        elif isinstance(obj, functools.partial):
            visit(obj.func, depth + 1)
            visit(obj.args, depth + 1)
            visit(obj.keywords, depth + 1)
        elif callable(obj):
            for cell in getattr(obj, "__closure__", None) or ():
                try:
                    visit(cell.cell_contents, depth + 1)
                except ValueError:                      # an empty cell
                    pass
            visit(getattr(obj, "__defaults__", None) or (), depth + 1)
            visit(getattr(obj, "__kwdefaults__", None) or {}, depth + 1)
            if hasattr(obj, "__self__"):
                visit(obj.__self__, depth + 1)
            code = getattr(obj, "__code__", None)
            glob = getattr(obj, "__globals__", None)
            if code is not None and glob is not None:   # module-level tables it reads
                for name in code.co_names:
                    if isinstance(glob.get(name), (torch.Tensor, torch.nn.Module)):
                        visit(glob[name], depth + 1)

    visit(fn, _depth)
    unique, ids = [], set()
    for t in found:
        if id(t) not in ids:
            ids.add(id(t))
            unique.append(t)
    return unique


def apply(score_mod: ScoreMod, s: torch.Tensor, b, h, q_idx, kv_idx) -> torch.Tensor:
    """``score_mod`` on a tile, checked: the result has the tile's shape and dtype."""
    out = score_mod(s, b, h, q_idx, kv_idx)
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        raise TypeError(f"score_mod {getattr(score_mod, '__name__', score_mod)!r} must return a "
                        f"float tensor, got {type(out).__name__}")
    try:
        return out.expand_as(s).to(s.dtype)
    except RuntimeError:
        raise ValueError(f"score_mod must return scores of the tile's shape {tuple(s.shape)} (or "
                         f"broadcastable to it), got {tuple(out.shape)}; compute it elementwise "
                         "from score, b, h, q_idx, kv_idx") from None


class TileGrad:
    """The backward of ``score_mod`` on one tile: recompute it under autograd, then turn the
    gradient of the modified scores into the gradient of the raw ones and accumulate the
    gradients of the captured tensors."""

    def __init__(self, score_mod: ScoreMod, captured: list[torch.Tensor],
                 grads: list[torch.Tensor | None]):
        self.score_mod, self.captured, self.grads = score_mod, captured, grads

    def forward(self, s: torch.Tensor, b, h, q_idx, kv_idx) -> tuple[torch.Tensor, object]:
        """Modified scores (detached) and a handle for :meth:`backward`."""
        raw = s.detach().requires_grad_()
        with torch.enable_grad():
            mod = apply(self.score_mod, raw, b, h, q_idx, kv_idx)
        return mod.detach(), (raw, mod)

    def backward(self, handle, d_mod: torch.Tensor) -> torch.Tensor:
        """The gradient of the raw scores from that of the modified ones; the captured tensors'
        gradients are accumulated on the way."""
        raw, mod = handle
        if not mod.requires_grad:                       # it does not depend on the score
            return torch.zeros_like(d_mod)
        out = torch.autograd.grad(mod, [raw, *self.captured], d_mod, allow_unused=True)
        for i, g in enumerate(out[1:]):
            if g is not None:
                self.grads[i] = g if self.grads[i] is None else self.grads[i] + g
        return torch.zeros_like(d_mod) if out[0] is None else out[0]
