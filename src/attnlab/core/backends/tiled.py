"""Flash-style exact attention: online softmax over tiles, O(N) memory (Dao et al. 2022, 2023).

The public face of the tile engine (:mod:`attnlab.core.engine`): it flattens the call to
``(BH, N, D)`` in the compute dtype and runs it on the compiled loop
(:mod:`attnlab.core.engine.compiled.loop`) where that takes it (no tensor mask or dropout,
float32 compute, no modifier or only ones that see positions through ``q_idx - kv_idx``), else
on the eager loop (:mod:`attnlab.core.engine.eager.loop`), which is also the reference the
compiled one is tested against. Both skip tiles outside a causal or window band and mask only
the tiles a band cuts.

Without a float mask the scores are in units of log2 e, so every exponential is ``exp2``: the
same numbers, about 3x faster than ``exp`` on CPU (FlashAttention-2's kernels do the same).
With a float mask they stay natural: ``finfo.min`` times log2 e would overflow to -inf and turn
a huge mask into a full one.

bfloat16 and float16 inputs are computed in float32 tile by tile, as flash kernels accumulate.
Differs from the reference only in the order of floating-point operations.
"""

from __future__ import annotations

import math

import torch

from attnlab.core.backends.reference import absorbed_rows_by_formula
from attnlab.core.engine.compiled import loop
from attnlab.core.engine.eager.loop import tile_backward, tile_forward
from attnlab.core.engine.tiles import (  # tile_sizes: the backend's, as blocksparse's and gpu's
    base2,
    sizes,
    split_lse,
    tile_kinds,
    tile_sizes,  # noqa: F401
    tiles_overridden,
)
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.spec import AttentionOutput, AttentionSpec, compute_dtype


class _TiledAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, spec: AttentionSpec, *captured):
        # q (BH, N_q, D_k), k (BKV, N_k, D_k), v (BKV, N_k, D_v), compute dtype; BKV = BH /
        # kv_groups (grouped-query attention). bias: the float mask when it requires grad.
        out, m, r = tile_forward(q, k, v, spec, spec.float_bias())
        ctx.spec = spec
        ctx.save_for_backward(q, k, v, out, m, r)
        return out, split_lse(m, r, base2(spec))

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, m, r = ctx.saved_tensors
        spec: AttentionSpec = ctx.spec
        bias = spec.float_bias()
        dq, dk, dv, d_bias, captured = tile_backward(
            q, k, v, out, m, r, d_out, d_lse, spec, bias, need_bias_grad=ctx.needs_input_grad[3])
        if d_bias is not None:
            d_bias = d_bias.to(bias.dtype)
        return (dq, dk, dv, d_bias, None, *captured)


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    spec: AttentionSpec) -> AttentionOutput:
    """The tiled backend: ``(out, lse)`` of ``softmax(S) V`` computed tile by tile.

    Differs from the reference only in the order of floating-point operations (and exp2 on
    log2-unit scores); q ``(..., N_q, D_k)``, k ``(..., N_k, D_k)``, v ``(..., N_k, D_v)``
    expanded to ``spec``'s batch shape; out ``(..., N_q, D_v)``, lse ``(..., N_q)``."""
    compute = compute_dtype(q.dtype)
    n_bh, n_kv = math.prod(spec.batch_shape), math.prod(spec.kv_batch_shape)
    # (..., N, D) -> (BH, N, D); expand+reshape copies only where leading dims were broadcast.
    # K/V keep their own heads under GQA: (BKV, N, D), never repeated.
    qf = q.expand(*spec.batch_shape, *q.shape[-2:]).reshape(n_bh, spec.n_q, spec.d_k).to(compute)
    kf = k.expand(*spec.kv_batch_shape, *k.shape[-2:]).reshape(n_kv, spec.n_k, spec.d_k).to(compute)
    vf = v.expand(*spec.kv_batch_shape, *v.shape[-2:]).reshape(n_kv, spec.n_k, spec.d_v).to(compute)
    bias = spec.float_bias()
    trained = bias if bias is not None and bias.requires_grad else None
    if loop.wanted(spec, modifiers=True):     # the same loop, compiled
        mod_bias, band = loop.modifiers(spec, n_bh)
        out, lse = loop.Attention.apply(qf, kf, vf, spec, *_compiled_sizes(spec, band),
                                        mod_bias, band)
    else:
        out, lse = _TiledAttention.apply(qf, kf, vf, trained, spec, *spec.captured)
    out = out.to(q.dtype).view(*spec.batch_shape, spec.n_q, spec.d_v)
    lse = lse.view(*spec.batch_shape, spec.n_q) if spec.need_lse else None
    if compute != q.dtype:
        # float32 keeps the scores that a half-precision S + m rounds away (float16's minimum
        # is only -65504): rows whose every key carries it get the formula's answer in the
        # input dtype, as eager attention and the reference give it
        out = absorbed_rows_by_formula(q, k, v, spec, out)
    return AttentionOutput(out=out, lse=lse)


def _compiled_sizes(spec: AttentionSpec, band: tuple[int, int, int]) -> tuple[int, int]:
    """The compiled loop's tiles: those of an enclosing :func:`tile_sizes`, else the defaults,
    or :data:`attnlab.core.engine.compiled.loop.BAND_TILES` for a window that reaches across the
    keys on neither side (``band`` as :func:`attnlab.core.engine.compiled.loop.band_args`: a mask
    function may have narrowed the call's)."""
    _, left, right = band
    if tiles_overridden() or max(left, right) >= spec.n_k - 1:
        return sizes()
    return loop.BAND_TILES


def _tile_fractions(spec: AttentionSpec) -> tuple[float, float]:
    """Fractions of the score matrix in tiles computed without a mask and with one."""
    masked_everywhere = spec.mask is not None or spec.mask_fn is not None
    if spec.band is None:
        return (0.0, 1.0) if masked_everywhere else (1.0, 0.0)
    total = full = partial = 0
    block_q, block_k = sizes()
    for i0 in range(0, spec.n_q, block_q):
        i1 = min(i0 + block_q, spec.n_q)
        for j0, j1, kind in tile_kinds(spec, i0, i1, block_k):
            area = (i1 - i0) * (j1 - j0)
            total += area
            if kind == "full" and not masked_everywhere:
                full += area
            elif kind != "skip":
                partial += area
    return full / max(total, 1), partial / max(total, 1)


def _tiled_cost(spec: AttentionSpec) -> float:
    """Estimated microseconds, fitted on a 2-core CPU (B=1, H=8, D=64): Python-level tiling
    costs ~1.45x a fused kernel per score, a tile that needs a mask ~2x that, plus a fixed
    overhead; tiles outside a causal/window band cost nothing."""
    full, partial = _tile_fractions(spec)
    return 250.0 + 1.6e-3 * (full + 2.1 * partial) * spec.entries


register_backend(
    "tiled", tiled_attention,
    Capabilities(exact=True, weights=False, lse=True, dropout=True, softcap=True, gqa=True,
                 score_mod=True, backward=True),
    description="flash-style online softmax over tiles; O(N) memory; skips tiles outside a band",
    cost=_tiled_cost,
    linear_memory=lambda spec: True,                      # one tile at a time
)
