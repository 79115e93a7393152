"""Modifiers that see positions only through ``q_idx - kv_idx``, as one number per diagonal.

ALiBi (``score - slopes[h] * (q_idx - kv_idx).abs()``), T5-style relative biases and sliding
windows written as a ``score_mod`` or a mask function depend on where a score sits only through
the distance ``q_idx - kv_idx`` (and the batch and head). Such a modifier is one number per
diagonal and head: ``(B*H, N_q + N_k - 1)`` values, linear in the length, that the compiled
tile loop (:mod:`attnlab.core.engine.compiled.loop`) adds to each score as it computes it, with no
pass of PyTorch operations per tile. A mask function of that kind is a set of diagonals: a
contiguous set is a band (tiles outside it are never computed), any other set is a bias of 0 and
-inf.

Which functions qualify is read from their graph, not guessed from values: the function is
traced once with :func:`torch.fx.experimental.proxy_tensor.make_fx` on small real inputs
(``score_mod`` s must enter only as ``score + f(...)`` or ``score - f(...)``, and ``q_idx`` and
``kv_idx`` only through ``q_idx - kv_idx`` or a comparison of the two). A function that
branches on tensor values fails to trace and keeps the eager path, as does any other shape.
The values per diagonal are then the function itself evaluated once per diagonal under
autograd, so gradients reach the tensors it captures (ALiBi's slopes, a learned table)
through the loop's gradient of each diagonal.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import torch

aten = torch.ops.aten

# ops that pass a value on unchanged (up to dtype and shape)
_SAME = {aten._to_copy.default, aten.view.default, aten.unsqueeze.default,
         aten.expand.default, aten.clone.default, aten.alias.default,
         aten.lift_fresh_copy.default, aten.detach.default, aten._unsafe_view.default,
         aten.reshape.default, aten.squeeze.dim, aten.squeeze.default}
# ops of q_idx and kv_idx that are functions of q_idx - kv_idx
_OF_DIFFERENCE = {aten.sub.Tensor, aten.ge.Tensor, aten.gt.Tensor, aten.le.Tensor,
                  aten.lt.Tensor, aten.eq.Tensor, aten.ne.Tensor}

_lock = threading.Lock()
_CACHE_SIZE = 32
_cache: collections.OrderedDict = collections.OrderedDict()   # (id, kind) -> (fn, bool)


@dataclass(frozen=True)
class _Value:
    deps: frozenset             # of "s", "b", "h", "q", "k", "d" (q_idx - kv_idx)
    kind: str | None = None     # "lin": score + f(...); "q" / "k": q_idx / kv_idx itself


def _nodes(arg) -> list:
    if isinstance(arg, torch.fx.Node):
        return [arg]
    if isinstance(arg, (list, tuple)):
        return [n for a in arg for n in _nodes(a)]
    if isinstance(arg, dict):
        return [n for a in arg.values() for n in _nodes(a)]
    return []


def _deps(args, values) -> frozenset:
    out: frozenset = frozenset()
    for n in _nodes(args):
        out |= values[n].deps
    return out


def _exact(value: _Value, dtype) -> bool:
    """Whether converting ``value`` to ``dtype`` keeps it (the score: float32 or wider; the
    positions: any type that holds every position exactly)."""
    if dtype is None or value.kind is None:
        return True
    if value.kind == "lin":
        return dtype in (torch.float32, torch.float64)
    return dtype in (torch.float32, torch.float64, torch.int32, torch.int64)


def _walk(graph, names: tuple[str, ...]) -> _Value:
    """The value the graph returns, as dependencies (see :class:`_Value`)."""
    values: dict = {}
    placeholders = iter(names)
    for node in graph.nodes:
        if node.op == "placeholder":
            name = next(placeholders)
            values[node] = _Value(frozenset({name}), {"s": "lin", "q": "q", "k": "k"}.get(name))
        elif node.op == "get_attr":
            values[node] = _Value(frozenset())
        elif node.op == "call_function":
            args, target = node.args, node.target
            first = args[0] if args and isinstance(args[0], torch.fx.Node) else None
            if (target in _SAME and first is not None and not _nodes((args[1:], node.kwargs))
                    and _exact(values[first], node.kwargs.get("dtype"))):
                values[node] = values[first]
                continue
            if (target in (aten.add.Tensor, aten.sub.Tensor) and node.kwargs.get("alpha", 1) == 1
                    and len(args) == 2):
                a, b = (values[x] if isinstance(x, torch.fx.Node) else _Value(frozenset())
                        for x in args)
                plus = target is aten.add.Tensor
                if (a.kind == "lin" and "s" not in b.deps) or \
                        (plus and b.kind == "lin" and "s" not in a.deps):
                    values[node] = _Value(a.deps | b.deps, "lin")
                    continue
            if target in _OF_DIFFERENCE and len(args) == 2 and all(
                    isinstance(x, torch.fx.Node) for x in args):
                if {values[args[0]].kind, values[args[1]].kind} == {"q", "k"}:
                    values[node] = _Value(frozenset({"d"}))
                    continue
            values[node] = _Value(_deps((args, node.kwargs), values))
        elif node.op == "output":
            outs = _nodes(node.args)
            return values[outs[0]] if len(outs) == 1 else _Value(frozenset({"?"}))
        else:                                       # call_module / call_method: not expected
            values[node] = _Value(frozenset({"?"}))
    return _Value(frozenset({"?"}))


def _traced(fn, example: tuple, names: tuple[str, ...]) -> _Value | None:
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with torch.no_grad():
            graph = make_fx(fn, tracing_mode="real")(*example).graph
    except Exception:                                 # noqa: BLE001 - any failure: not ours
        return None
    return _walk(graph, names)


def _cached(fn, kind: str, check) -> bool:
    key = (id(fn), kind)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key][1]
    ok = bool(check())
    with _lock:
        _cache[key] = (fn, ok)                      # fn kept alive: its id stays its own
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return ok


def _idx(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(n).view(1, 1, n), torch.arange(n).flip(0).view(1, 1, n)


def score_mod_is_diagonal(score_mod) -> bool:
    """Whether ``score_mod(s, b, h, q_idx, kv_idx)`` is ``s + f(b, h, q_idx - kv_idx)``."""
    def check():
        qi, ki = _idx(5)
        example = (torch.zeros(2, 1, 5), torch.zeros(2, 1, 1, dtype=torch.long),
                   torch.arange(2).view(2, 1, 1), qi, ki)
        value = _traced(score_mod, example, ("s", "b", "h", "q", "k"))
        return value is not None and value.kind == "lin" and value.deps <= {"s", "b", "h", "d"}
    return _cached(score_mod, "score_mod", check)


def mask_fn_is_diagonal(mask_fn) -> bool:
    """Whether ``mask_fn(b, h, q_idx, kv_idx)`` is ``f(b, h, q_idx - kv_idx)``."""
    def check():
        qi, ki = _idx(5)
        example = (torch.zeros(1, 1, 1, 1, dtype=torch.long), torch.arange(2).view(1, 2, 1, 1),
                   qi.view(1, 1, 1, 5), ki.view(1, 1, 1, 5))
        value = _traced(mask_fn, example, ("b", "h", "q", "k"))
        return value is not None and value.deps <= {"b", "h", "d"}
    return _cached(mask_fn, "mask_fn", check)


def positions(n_q: int, n_k: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q_idx, kv_idx)`` with one pair per diagonal: entry ``t`` has
    ``kv_idx - q_idx = t - (n_q - 1)``, from ``-(n_q - 1)`` to ``n_k - 1``."""
    e = torch.arange(-(n_q - 1), n_k, device=device)
    return (-e).clamp_min(0), e.clamp_min(0)


def score_bias(spec, n_bh: int) -> torch.Tensor:
    """``score_mod(0, b, h, q_idx, kv_idx)`` per diagonal, ``(B*H, N_q + N_k - 1)`` float32,
    under autograd (its gradient reaches the tensors the function captures)."""
    qi, ki = positions(spec.n_q, spec.n_k, spec.device)
    n = qi.numel()
    bh = torch.arange(n_bh, device=spec.device).view(n_bh, 1, 1)
    b, h = spec.head_index(bh)
    zero = torch.zeros(n_bh, 1, n, device=spec.device)
    out = spec.score_mod(zero, b, h, qi.view(1, 1, n), ki.view(1, 1, n))
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        raise TypeError(f"score_mod {getattr(spec.score_mod, '__name__', spec.score_mod)!r} "
                        f"must return a float tensor, got {type(out).__name__}")
    try:
        return out.expand(n_bh, 1, n).reshape(n_bh, n).float()
    except RuntimeError:
        raise ValueError(f"score_mod must return scores of the tile's shape (or broadcastable "
                         f"to it), got {tuple(out.shape)} for a tile of {(n_bh, 1, n)}; compute "
                         "it elementwise from score, b, h, q_idx, kv_idx") from None


def mask_keep(spec) -> torch.Tensor:
    """``mask_fn`` per diagonal, bool ``(B*H, N_q + N_k - 1)``."""
    qi, ki = positions(spec.n_q, spec.n_k, spec.device)
    n = qi.numel()
    batch, heads = spec.heads_view
    b = torch.arange(batch, device=spec.device).view(batch, 1, 1, 1)
    h = torch.arange(heads, device=spec.device).view(1, heads, 1, 1)
    keep = spec.mask_fn(b, h, qi.view(1, 1, 1, n), ki.view(1, 1, 1, n))
    if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool:
        raise TypeError(f"mask function {getattr(spec.mask_fn, '__name__', spec.mask_fn)!r} "
                        "must return a bool tensor; build it from comparisons such as "
                        "kv_idx <= q_idx")
    return keep.expand(batch, heads, 1, n).reshape(batch * heads, n)   # B*H: flat heads


def interval(keep: torch.Tensor) -> tuple[int, int] | None:
    """``(first, last)`` index of the one run of True shared by every row of ``keep``, or None
    where rows differ, a row keeps none, or its kept entries are not contiguous."""
    if not bool((keep == keep[:1]).all()):
        return None
    row = keep[0]
    idx = torch.nonzero(row).flatten()
    if idx.numel() == 0 or int(idx[-1] - idx[0]) + 1 != idx.numel():
        return None
    return int(idx[0]), int(idx[-1])
