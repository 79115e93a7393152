"""``attention()``: validate -> pick a backend -> run."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import torch

from attnlab.core import backends as _backends  # noqa: F401  (registers the built-in backends)
from attnlab.core.registry import get_backend, select_backend
from attnlab.core.softmax import add_sink
from attnlab.core.spec import (
    AttentionOutput,
    broadcast_shapes,
    build_spec,
    describe,
    spec_from_shapes,
)
from attnlab.core.weigh import weigh_values

# A function that takes over attention() calls while set (attnlab.distributed.sequence_parallel
# routes the calls of attnlab's modules to the sharded implementations through it). The core
# never sets it; a dispatched call runs with it unset, so nested calls compute locally.
_DISPATCH: contextvars.ContextVar = contextvars.ContextVar("attnlab_attention_dispatch",
                                                           default=None)


@contextlib.contextmanager
def dispatch_to(route):
    """While the block runs, ``attention(q, k, v, **options)`` calls ``route(q, k, v, options)``
    instead (options as a dict of every keyword). Restored on exit."""
    token = _DISPATCH.set(route)
    try:
        yield
    finally:
        _DISPATCH.reset(token)


def current_route():
    """The route :func:`dispatch_to` installed for this context, or None (modules ask whether
    their calls will be sharded, ``getattr(current_route(), "splits_sequence", False)``)."""
    return _DISPATCH.get()


@contextlib.contextmanager
def no_dispatch():
    """Compute locally inside the block even under :func:`dispatch_to`."""
    token = _DISPATCH.set(None)
    try:
        yield
    finally:
        _DISPATCH.reset(token)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask=None,
              causal: bool = False, window: int | tuple[int | None, int | None] | None = None,
              scale: float | None = None, temperature: float = 1.0, dropout_p: float = 0.0,
              generator: torch.Generator | None = None, softcap: float | None = None,
              score_mod=None, sinks: torch.Tensor | None = None, enable_gqa: bool = False,
              backend: str = "auto",
              return_weights: bool = False,
              return_lse: bool = False) -> torch.Tensor | AttentionOutput:
    r"""Scaled dot-product attention, ``O = softmax(Q K^T * scale / temperature + mask) V``.

    With ``softcap=c`` the scaled scores are soft-capped before the mask,
    ``S -> c tanh(S / c)`` (Gemma 2), which bounds every logit by c; a ``score_mod`` then
    changes each score by its position, ``S_ij -> score_mod(S_ij, b, h, i, j)``::

        S = Q K^T * scale / temperature -> softcap -> score_mod -> + float mask -> bool masks

    Causal alignment is **bottom-right**: query i keeps key j when ``j <= i + (N_k - N_q)``, so
    the last query sees every key (decoding with a cache). With N_q == N_k it is the usual
    lower triangle. SDPA's ``is_causal`` and FlexAttention's ``q_idx >= kv_idx`` are top-left;
    they agree with this one only when N_q == N_k::

        N_q = 2, N_k = 4          bottom-right (attnlab)     top-left (SDPA is_causal)
                                  k0 k1 k2 k3                k0 k1 k2 k3
                             q0    x  x  x  .           q0    x  .  .  .
                             q1    x  x  x  x           q1    x  x  .  .

    ``window=(left, right)`` keeps ``p - left <= j <= p + right`` with ``p = i + N_k - N_q``;
    causal, window and mask combine by AND. A query that may attend nothing gets output 0,
    weights 0, lse = -inf and zero gradients.

    Args:
        q: queries ``(..., N_q, D_k)``; leading dims (batch, heads) broadcast with k and v.
        k: keys ``(..., N_k, D_k)``.
        v: values ``(..., N_k, D_v)``.
        mask: broadcastable to ``(..., N_q, N_k)``. **bool: True = may attend** (as in
            ``scaled_dot_product_attention`` and FlexAttention; the opposite of
            ``torch.nn.MultiheadAttention``'s ``key_padding_mask``). A float mask is added to the
            scaled scores (``-inf`` allowed). A mask function ``fn(b, h, q_idx, kv_idx)`` from
            :mod:`attnlab.core.masks` is also accepted. Default None.
        causal: bottom-right aligned causal mask. Default False.
        window: ``int`` w for ``(w, w)``, or ``(left, right)`` with None for unbounded.
            Default None.
        scale: multiplies ``Q K^T``; default ``1/sqrt(D_k)``. Must be > 0.
        temperature: divides the scaled scores; > 1 flattens, < 1 sharpens. Default 1.0.
        dropout_p: dropout on the weights, in [0, 1). Applied whenever > 0 (pass 0.0 at eval).
        generator: makes dropout reproducible; reference and tiled draw the same mask from it.
        softcap: the cap c > 0 of ``c tanh(S / c)`` on the scaled scores, or None (default).
            Served by reference, tiled and blocksparse (not by torch's SDPA).
        score_mod: ``fn(score, b, h, q_idx, kv_idx) -> score`` applied to the scaled (and
            capped) scores before the mask, FlexAttention's signature: relative position biases,
            ALiBi, learnable per-head tables (see :mod:`attnlab.core.score_mod`). Gradients
            reach the tensors it captures. Served by reference, tiled and blocksparse.
        sinks: learnable attention sinks (Xiao et al. 2023, StreamingLLM; as in gpt-oss): one
            logit per head, broadcastable to the batch dims ``(..., H)``, that takes part in
            every row's softmax but carries no value, ``O_i = sum_j exp(S_ij - L_i) v_j`` with
            ``L_i = log(exp(sink) + sum_j exp(S_ij))``; the returned lse is ``L``. Folded in with
            the merge rule on any backend that returns lse; differentiable. Default None.
        enable_gqa: grouped-query / multi-query attention (as SDPA's ``enable_gqa``): k and v
            have ``H_kv`` heads in dim -3, q has ``H_q``, a multiple of it; query head h uses
            K/V head ``h // (H_q / H_kv)``. K/V are never repeated in memory. Default False.
        backend: ``"auto"`` (the fastest exact backend able to serve the request) or a name from
            :func:`attnlab.list_backends`.
        return_weights: also return the weights applied to v ``(..., N_q, N_k)``.
        return_lse: also return the log-sum-exp of the scores ``(..., N_q)``.

    Returns:
        ``out (..., N_q, D_v)``, or an :class:`AttentionOutput` (``out``, ``weights``, ``lse``)
        when ``return_weights`` or ``return_lse`` is set.

    Example:
        >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 3)
        >>> attention(q, k, v, causal=True).shape
        torch.Size([2, 4, 5, 3])
    """
    options = _options(locals())
    route = _DISPATCH.get()
    if route is not None:
        with no_dispatch():
            return route(q, k, v, options)
    req = _request(q, k, v, options)
    spec, chosen, sink = req.spec, req.backend, req.sink
    if spec.n_q == 0 or spec.n_k == 0:
        result = _empty(q, k, v, spec)
    else:
        q = q.expand(*spec.batch_shape, *q.shape[-2:])             # (*batch, N_q, D_k), a view
        k = k.expand(*spec.kv_batch_shape, *k.shape[-2:])          # (*batch_kv, N_k, D_k)
        v = v.expand(*spec.kv_batch_shape, *v.shape[-2:])          # (*batch_kv, N_k, D_v)
        result = chosen.fn(q, k, v, spec)
    if sink is not None:                       # one more logit, merged from (out, lse)
        result = _with_sink(result, sink)
        if not return_lse:
            result = AttentionOutput(out=result.out, weights=result.weights, lse=None)
    if return_weights or return_lse:
        return result
    return result.out


#: :func:`attention`'s keywords, written once: a route (:func:`dispatch_to`), the request
#: builder and :func:`which_backend` take them as one dict.
KEYWORDS = ("mask", "causal", "window", "scale", "temperature", "dropout_p", "generator",
            "softcap", "score_mod", "sinks", "enable_gqa", "backend", "return_weights",
            "return_lse")


def _options(frame: dict) -> dict:
    """The keywords of an :func:`attention`-shaped call from its ``locals()``."""
    return {name: frame[name] for name in KEYWORDS}


def which_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask=None,
                  causal: bool = False,
                  window: int | tuple[int | None, int | None] | None = None,
                  scale: float | None = None, temperature: float = 1.0, dropout_p: float = 0.0,
                  generator: torch.Generator | None = None, softcap: float | None = None,
                  score_mod=None, sinks: torch.Tensor | None = None, enable_gqa: bool = False,
                  backend: str = "auto", return_weights: bool = False,
                  return_lse: bool = False) -> str:
    """The name of the backend :func:`attention` would run for exactly these arguments.

    Takes :func:`attention`'s keywords, checked by the same request builder, so a request
    attention() refuses is refused here with the same message.

    Example:
        >>> q = torch.randn(1, 8, 4096, 64)
        >>> which_backend(q, q, q, window=(256, 256))
        'blocksparse'
    """
    return _request(q, k, v, _options(locals())).backend.name


@dataclasses.dataclass(frozen=True)
class _Request:
    """A checked call: the spec, the backend that serves it and the sinks as ``(*batch, 1)``
    logits (or None)."""

    spec: object
    backend: object
    sink: torch.Tensor | None


def _request(q, k, v, options: dict) -> _Request:
    """The one request builder of :func:`attention` and :func:`which_backend`."""
    o = dict(options)
    sinks, backend = o.pop("sinks"), o.pop("backend")
    spec = build_spec(q, k, v, **o)
    sink = _validate_sinks(sinks, spec)
    if sink is not None:                       # folded in from the backend's (out, lse)
        spec = dataclasses.replace(spec, need_lse=True)
        if backend != "auto" and get_backend(backend).why_not(spec) is not None \
                and not get_backend(backend).capabilities.lse:
            raise ValueError(f"backend {backend!r} cannot serve sinks: they are merged in from "
                             "the log-sum-exp, which it does not return; use backend='auto' or "
                             "one that returns lse (see attnlab.list_backends())")
    return _Request(spec, select_backend(backend, spec), sink)


def attend(scores: torch.Tensor, v: torch.Tensor, *, mask=None, causal: bool = False,
           window: int | tuple[int | None, int | None] | None = None, temperature: float = 1.0,
           dropout_p: float = 0.0, generator: torch.Generator | None = None,
           return_weights: bool = False,
           return_lse: bool = False) -> torch.Tensor | AttentionOutput:
    r"""Attention from scores you computed: ``O = softmax(scores / temperature + mask) V``.

    For learned scoring functions (additive, bilinear, ...) that are not a scaled dot product.
    Masks, causal/window alignment, dropout, fully masked rows and the typed result follow
    exactly the contract of :func:`attention` (the scores play the role of the scaled scores).

    Args:
        scores: ``(..., N_q, N_k)`` raw scores.
        v: values ``(..., N_k, D_v)``.
        mask, causal, window, temperature, dropout_p, generator, return_weights, return_lse:
            as in :func:`attention`.

    Returns:
        ``out (..., N_q, D_v)`` or an :class:`AttentionOutput`.

    Example:
        >>> s, v = torch.randn(2, 5, 7), torch.randn(2, 7, 3)
        >>> attend(s, v, causal=True).shape
        torch.Size([2, 5, 3])
    """
    batch_shape = _validate_scores(scores, v)
    spec = spec_from_shapes(
        batch_shape, scores.shape[-2], scores.shape[-1], 0, v.shape[-1], scores.dtype,
        scores.device, requires_grad=torch.is_grad_enabled() and (scores.requires_grad
                                                                  or v.requires_grad),
        mask=mask, causal=causal, window=window, scale=1.0, temperature=temperature,
        dropout_p=dropout_p, generator=generator, return_weights=return_weights,
        return_lse=return_lse)
    scores = scores.expand(*spec.batch_shape, *scores.shape[-2:])  # (*batch, N_q, N_k)
    v = v.expand(*spec.batch_shape, *v.shape[-2:])                # (*batch, N_k, D_v)
    result = weigh_values(scores / spec.temperature, v, spec)
    if return_weights or return_lse:
        return result
    return result.out


def _validate_scores(scores, v) -> tuple[int, ...]:
    """Check the tensors of :func:`attend`; returns the broadcast batch shape."""
    for name, t, shape in (("scores", scores, "(..., N_q, N_k)"), ("v", v, "(..., N_k, D_v)")):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            raise TypeError(f"{name} must be a tensor of shape {shape}, got {describe(t)}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating tensor, got {t.dtype}; convert with "
                            f"{name}.float()")
    if v.dtype != scores.dtype:
        raise TypeError(f"scores and v must share one dtype, got {scores.dtype} and {v.dtype}; "
                        "cast one, e.g. v.to(scores.dtype)")
    if v.device != scores.device:
        raise ValueError(f"scores and v must be on one device, got {scores.device} and "
                         f"{v.device}; move v with v.to(scores.device)")
    if scores.shape[-1] != v.shape[-2]:
        raise ValueError(f"scores has {scores.shape[-1]} keys (dim -1) but v has {v.shape[-2]} "
                         f"(dim -2), got scores {tuple(scores.shape)} and v {tuple(v.shape)}; "
                         "pair every key with a value")
    try:
        return tuple(broadcast_shapes(scores.shape[:-2], v.shape[:-2]))
    except RuntimeError:
        raise ValueError(f"leading dims of scores {tuple(scores.shape[:-2])} and v "
                         f"{tuple(v.shape[:-2])} do not broadcast; give them the same (B, H) "
                         "or size 1 where shared") from None


def _empty(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec) -> AttentionOutput:
    """No keys or no queries: every query sees nothing, so out = 0, weights = 0, lse = -inf
    (the contract's fully masked row), on every backend. The result stays connected to q, k, v
    (through an empty sum) so that backward gives their zero gradients."""
    zero = sum(t.reshape(-1)[:0].sum() for t in (q, k, v))    # sums over no elements: 0
    shape = (*spec.batch_shape, spec.n_q)
    out = zero + v.new_zeros(*shape, spec.d_v)                  # (*batch, N_q, D_v)
    weights = zero + v.new_zeros(*shape, spec.n_k) if spec.need_weights else None
    lse = zero + v.new_full(shape, float("-inf")) if spec.need_lse else None
    return AttentionOutput(out=out, weights=weights, lse=lse)


def _validate_sinks(sinks, spec) -> torch.Tensor | None:
    """Sinks broadcast to the batch dims: returns them as ``(*batch, 1)`` logits."""
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor) or not sinks.dtype.is_floating_point:
        raise TypeError(f"sinks must be a float tensor of one logit per head, shape (H,) or "
                        f"broadcastable to {spec.batch_shape}, got {describe(sinks)}")
    try:
        ok = tuple(broadcast_shapes(sinks.shape, spec.batch_shape)) == spec.batch_shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"sinks of shape {tuple(sinks.shape)} do not broadcast to the batch "
                         f"dims {spec.batch_shape}; give one logit per head, shape (H,)")
    if sinks.device != spec.device:
        raise ValueError(f"sinks are on {sinks.device} but q is on {spec.device}; move them")
    return sinks.to(spec.dtype).expand(spec.batch_shape).unsqueeze(-1)   # (*batch, 1)


def _with_sink(res: AttentionOutput, sink: torch.Tensor) -> AttentionOutput:
    """A sink is one more key with logit ``sink`` and value 0: merge ``(out, lse)`` with the
    partial result ``(0, sink)`` (the one merge rule of :mod:`attnlab.core.softmax`)."""
    out, lse = add_sink(res.out, res.lse, sink)                      # sink (*batch, 1)
    weights = None
    if res.weights is not None:
        share = torch.exp(res.lse - lse).nan_to_num(0.0).unsqueeze(-1)   # mass left to keys
        weights = (res.weights * share).to(res.weights.dtype)
    # a backend's lse may be float32 under half-precision inputs: the output keeps the input
    # dtype (a bfloat16 model's next projection expects it)
    return AttentionOutput(out=out.to(res.out.dtype), weights=weights, lse=lse)
