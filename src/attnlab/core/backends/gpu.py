"""Triton kernels as backends: ``triton`` (dense, FlashAttention-2 style) and
``triton_blocksparse`` (the tiles of a :class:`~attnlab.core.layout.BlockLayout`).

The kernels live in :mod:`attnlab.core.backends._kernels` and are imported at the first call,
so ``import attnlab`` never needs Triton. This module prepares what they read (contiguous
``(BH, N, D)`` views, per-sequence lengths as numbers, the layout's tiles compressed by row
and by column), launches them, and wraps forward and backward in an autograd function.

Where they run. On CUDA tensors; on CPU tensors only under Triton's interpreter
(``TRITON_INTERPRET=1`` set before the first call), which is how the test suite checks them
without a GPU. On CUDA, ``backend="auto"`` prices them with the costs measured on an H200
(:mod:`attnlab.core.cuda_cost`, ``docs/benchmarks.md``): SDPA keeps the plain and
causal requests (its cuDNN and flash kernels are faster), ``triton`` takes windows, lse,
softcap and per-sequence lengths, which SDPA serves only with a dense mask or not at all.
Under the interpreter auto never picks them.

Measured on that GPU (``benchmarks/results/gpu/``): float32 tiles of the block-sparse kernels
fail to compile for sm_90 with Triton 3.6 (an assertion in ``ConvertTritonGPUToLLVM``), so
``triton_blocksparse`` refuses float32 on CUDA; the dense kernel passes every case in float32,
bfloat16 and float16.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import math
import os
import weakref
from dataclasses import dataclass

import torch

from attnlab.core.layout import BlockLayout, keep_for_backward, kept_for_backward
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.softmax import backward_terms
from attnlab.core.spec import AttentionOutput, AttentionSpec

# Tile sizes of the dense kernels and of the layouts the block-sparse one builds. 64 x 64 fits
# head dims up to 128 in an H100's shared memory with float32 accumulators; tests shrink them
# so that short sequences still cross tiles.
BLOCK_M = 64
BLOCK_N = 64
SPARSE_BLOCK = (64, 64)
_SIZES: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("attnlab_triton_sizes",
                                                                     default=None)


@contextlib.contextmanager
def tile_sizes(block_m: int = BLOCK_M, block_n: int = BLOCK_N,
               sparse_block: tuple[int, int] = SPARSE_BLOCK):
    """Within the block, the Triton kernels use these tiles (dense ``block_m x block_n``,
    layouts of ``sparse_block``); restored on exit. Triton needs powers of two >= 16."""
    for name, v in (("block_m", block_m), ("block_n", block_n),
                    ("sparse_block[0]", sparse_block[0]), ("sparse_block[1]", sparse_block[1])):
        if not isinstance(v, int) or v < 16 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {v!r}")
    token = _SIZES.set((block_m, block_n, tuple(sparse_block)))
    try:
        yield
    finally:
        _SIZES.reset(token)


def _sizes() -> tuple[int, int, tuple[int, int]]:
    return _SIZES.get() or (BLOCK_M, BLOCK_N, SPARSE_BLOCK)
MAX_HEAD_DIM = 256
_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def unavailable() -> str | None:
    """Why the Triton kernels cannot run on any tensor in this process (None if they can on
    some: CUDA ones, or CPU ones under the interpreter)."""
    try:
        found = importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):          # a broken or blocked installation
        found = False
    if not found:
        return "triton is not installed (pip install 'attnlab[gpu]')"
    return None


def _here() -> str | None:
    reason = unavailable()
    if reason is None and not _interpreted() and not torch.cuda.is_available():
        reason = ("no CUDA GPU (it runs on CUDA tensors; TRITON_INTERPRET=1 runs it on "
                  "CPU for testing)")
    return reason


def _interpreted() -> bool:
    """Whether the kernels run under Triton's interpreter: decided when they are first
    imported (Triton reads TRITON_INTERPRET then), read from the environment before that."""
    import sys

    mod = sys.modules.get("attnlab.core.backends._kernels")
    if mod is not None:
        return mod.INTERPRETED
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _kernels():
    from attnlab.core.backends import _kernels

    return _kernels


def _pow2(n: int) -> int:
    return max(16, 1 << (max(n, 1) - 1).bit_length())


@dataclass(frozen=True)
class _Geometry:
    """What the dense kernels read besides q, k, v: per-sequence real lengths and alignment
    (``(B,)`` int32 each) and the band as numbers."""

    q_len: torch.Tensor
    kv_len: torch.Tensor
    off: torch.Tensor
    band: tuple[int | None, int | None] | None


def _geometry(spec: AttentionSpec) -> _Geometry:
    n_b = spec.heads_view[0]
    dev = spec.device
    rule = getattr(spec.mask_fn, "lengths", None)

    def full(n):
        return torch.full((n_b,), n, dtype=torch.int32, device=dev)

    if rule is None:
        q_len, kv_len, band = full(spec.n_q), full(spec.n_k), spec.band
        off = full(spec.offset)
    elif rule.q is None:                                  # key padding; the request's band
        q_len, band = full(spec.n_q), spec.band
        kv_len = rule.kv.to(dev).clamp(max=spec.n_k).to(torch.int32)
        off = full(spec.offset)
    else:                                                 # varlen: aligned per sequence
        q_len = rule.q.to(dev).clamp(max=spec.n_q).to(torch.int32)
        kv_len = rule.kv.to(dev).clamp(max=spec.n_k).to(torch.int32)
        off, band = kv_len - q_len, rule.band
    return _Geometry(q_len.contiguous(), kv_len.contiguous(), off.contiguous(), band)


def _common(q, k, v, spec):
    """Launch arguments shared by every kernel."""
    return dict(n_q=spec.n_q, n_k=spec.n_k, d_k=spec.d_k, d_v=spec.d_v, H=spec.heads_view[1],
                G=spec.kv_groups, scale=spec.score_scale,
                cap=float(spec.softcap) if spec.softcap is not None else 1.0,
                SOFTCAP=spec.softcap is not None, BLOCK_DK=_pow2(spec.d_k),
                BLOCK_DV=_pow2(spec.d_v),
                # float32: full products, not TF32; halves: the tensor cores' own (the default)
                PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
                UPCAST=q.dtype == torch.bfloat16 and _interpreted())


def _backward_inputs(q, k, v, out, lse, d_out, d_lse):
    """What both backward launches read: dO contiguous, ``D = dO . O - dlse`` and lse with
    +inf on empty rows (the core's :func:`backward_terms`), and the gradient buffers."""
    d_out = d_out.contiguous()
    delta, lse_b = backward_terms(d_out.float(), out.float(), d_lse, lse)
    return d_out, delta.contiguous(), lse_b.contiguous(), (
        torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))


def _strides(*ts):
    return [s for t in ts for s in (t.stride(0), t.stride(1))]


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec: AttentionSpec, geo: _Geometry):
        # q (BH, N_q, D_k), k (BKV, N_k, D_k), v (BKV, N_k, D_v): contiguous, the input dtype
        kern = _kernels()
        n_bh = q.shape[0]
        out = torch.empty(n_bh, spec.n_q, spec.d_v, dtype=q.dtype, device=q.device)
        lse = torch.empty(n_bh, spec.n_q, dtype=torch.float32, device=q.device)
        left, right = geo.band if geo.band is not None else (None, None)
        band = dict(left=left or 0, right=right or 0, HAS_LEFT=left is not None,
                    HAS_RIGHT=right is not None)
        bm, bn, _ = _sizes()
        grid = (triton_cdiv(spec.n_q, bm), n_bh)
        kern.flash_fwd[grid](q, k, v, out, lse, geo.q_len, geo.kv_len, geo.off,
                             *_strides(q, k, v, out), **_common(q, k, v, spec), **band,
                             BLOCK_M=bm, BLOCK_N=bn)
        ctx.spec, ctx.geo, ctx.band, ctx.tiles = spec, geo, band, (bm, bn)
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        spec, geo, band = ctx.spec, ctx.geo, ctx.band
        kern = _kernels()
        d_out, delta, lse_b, (dq, dk, dv) = _backward_inputs(q, k, v, out, lse, d_out, d_lse)
        bm, bn = ctx.tiles
        args = dict(**_common(q, k, v, spec), **band, BLOCK_M=bm, BLOCK_N=bn)
        kern.flash_bwd_dkdv[(triton_cdiv(spec.n_k, bn), k.shape[0])](
            q, k, v, d_out, lse_b, delta, dk, dv, geo.q_len, geo.kv_len, geo.off,
            *_strides(q, k, v, d_out), **args)
        kern.flash_bwd_dq[(triton_cdiv(spec.n_q, bm), q.shape[0])](
            q, k, v, d_out, lse_b, delta, dq, geo.q_len, geo.kv_len, geo.off,
            *_strides(q, k, v, d_out), **args)
        return dq, dk, dv, None, None


def triton_cdiv(a: int, b: int) -> int:
    """Ceiling division, as ``triton.cdiv`` (without importing Triton)."""
    return -(-a // b)


def _flat(q, k, v, spec):
    n_bh, n_kv = math.prod(spec.batch_shape), math.prod(spec.kv_batch_shape)
    qf = q.reshape(n_bh, spec.n_q, spec.d_k).contiguous()
    kf = k.reshape(n_kv, spec.n_k, spec.d_k).contiguous()       # own heads under GQA
    vf = v.reshape(n_kv, spec.n_k, spec.d_v).contiguous()
    return qf, kf, vf


def _result(out, lse, q, spec):
    out = out.view(*spec.batch_shape, spec.n_q, spec.d_v)
    lse = lse.view(*spec.batch_shape, spec.n_q) if spec.need_lse else None   # float32
    return AttentionOutput(out=out, lse=lse)


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     spec: AttentionSpec) -> AttentionOutput:
    """The ``triton`` backend: FlashAttention-2's forward and backward kernels on CUDA tensors.

    Masks are passed as numbers (band, per-sequence lengths), never as a tensor. Accumulates
    in float32 whatever the input dtype; differs from the reference in the order of
    floating-point operations. Shapes as :func:`attnlab.attention`."""
    qf, kf, vf = _flat(q, k, v, spec)
    out, lse = _FlashAttention.apply(qf, kf, vf, spec, _geometry(spec))
    return _result(out, lse, q, spec)


# ----------------------------------------------------------------------------- block-sparse


@dataclass(frozen=True)
class _Tiles:
    """A layout's tiles as the block-sparse kernels read them."""

    row_ptr: torch.Tensor       # (n_qb + 1,) int32: tiles of query block qb are
    row_tiles: torch.Tensor     #   row_tiles[row_ptr[qb]:row_ptr[qb + 1]]
    col_ptr: torch.Tensor       # (n_kb + 1,) int32, the same by key block
    col_tiles: torch.Tensor
    tile_qb: torch.Tensor       # (T,) int32
    tile_kb: torch.Tensor       # (T,) int32
    tile_full: torch.Tensor     # (T,) int32: 1 where the tile keeps every entry in range
    keep: torch.Tensor          # (Bm, Hm, T, block_q, block_k) uint8
    n_qb: int
    n_kb: int


_TILES: "weakref.WeakKeyDictionary[BlockLayout, _Tiles]" = weakref.WeakKeyDictionary()


def _csr(index: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    order = torch.argsort(index, stable=True)
    ptr = torch.zeros(n + 1, dtype=torch.int64, device=index.device)
    ptr[1:] = torch.cumsum(torch.bincount(index, minlength=n), 0)
    return ptr.to(torch.int32), order.to(torch.int32)


def tiles_of(lay: BlockLayout) -> _Tiles:
    """The tiles of ``lay`` (computed once per layout)."""
    hit = _TILES.get(lay)
    if hit is not None:
        return hit
    bq, bk = lay.block_q, lay.block_k
    n_items, slots = lay.items_kv.shape
    bm, hm = lay.keep.shape[:2]
    item, slot = (lay.items_kv >= 0).nonzero(as_tuple=True)          # (T,) each
    qb, kb = lay.items_q[item], lay.items_kv[item, slot]
    keep = lay.keep.view(bm, hm, n_items, bq, slots, bk).permute(2, 4, 0, 1, 3, 5)[item, slot]
    keep = keep.permute(1, 2, 0, 3, 4).contiguous()                  # (Bm, Hm, T, bq, bk)
    dev = keep.device
    rows = qb[:, None] * bq + torch.arange(bq, device=dev)            # (T, bq)
    cols = kb[:, None] * bk + torch.arange(bk, device=dev)            # (T, bk)
    outside = (rows[:, :, None] >= lay.n_q) | (cols[:, None, :] >= lay.n_k)
    full = (keep | outside).flatten(3).all(dim=-1).all(dim=0).all(dim=0)     # (T,)
    n_qb, n_kb = triton_cdiv(lay.n_q, bq), triton_cdiv(lay.n_k, bk)
    row_ptr, row_tiles = _csr(qb, n_qb)
    col_ptr, col_tiles = _csr(kb, n_kb)
    if keep.shape[2] == 0:                        # no tile at all: the kernels read nothing
        keep = torch.zeros(1, 1, 1, bq, bk, dtype=torch.bool, device=dev)
    tiles = _Tiles(row_ptr, row_tiles, col_ptr, col_tiles, qb.to(torch.int32),
                   kb.to(torch.int32), full.to(torch.int32), keep.to(torch.uint8),
                   n_qb, n_kb)
    _TILES[lay] = tiles
    return tiles


def _keep_strides(tiles: _Tiles) -> list[int]:
    kp = tiles.keep
    return [kp.stride(0) if kp.shape[0] > 1 else 0, kp.stride(1) if kp.shape[1] > 1 else 0,
            kp.stride(2)]


class _SparseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec: AttentionSpec, lay: BlockLayout):
        kern = _kernels()
        t = tiles_of(lay)
        n_bh = q.shape[0]
        out = torch.empty(n_bh, spec.n_q, spec.d_v, dtype=q.dtype, device=q.device)
        lse = torch.empty(n_bh, spec.n_q, dtype=torch.float32, device=q.device)
        kern.sparse_fwd[(t.n_qb, n_bh)](
            q, k, v, out, lse, t.row_ptr, t.row_tiles, t.tile_kb, t.tile_full, t.keep,
            *_strides(q, k, v, out), *_keep_strides(t), **_common(q, k, v, spec),
            BLOCK_M=lay.block_q, BLOCK_N=lay.block_k)
        return keep_for_backward(ctx, spec, lay, q, k, v, out, lse)

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, spec, lay = kept_for_backward(ctx)
        kern = _kernels()
        t = tiles_of(lay)
        d_out, delta, lse_b, (dq, dk, dv) = _backward_inputs(q, k, v, out, lse, d_out, d_lse)
        args = dict(**_common(q, k, v, spec), BLOCK_M=lay.block_q, BLOCK_N=lay.block_k)
        kern.sparse_bwd_dkdv[(t.n_kb, k.shape[0])](
            q, k, v, d_out, lse_b, delta, dk, dv, t.col_ptr, t.col_tiles, t.tile_qb,
            t.tile_full, t.keep, *_strides(q, k, v, d_out), *_keep_strides(t), **args)
        kern.sparse_bwd_dq[(t.n_qb, q.shape[0])](
            q, k, v, d_out, lse_b, delta, dq, t.row_ptr, t.row_tiles, t.tile_kb, t.tile_full,
            t.keep, *_strides(q, k, v, d_out), *_keep_strides(t), **args)
        return dq, dk, dv, None, None


def _sparse_layout(spec: AttentionSpec) -> BlockLayout:
    from attnlab.core.backends.blocksparse import layout_for

    return layout_for(spec, _sizes()[2])


def triton_blocksparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 spec: AttentionSpec) -> AttentionOutput:
    """The ``triton_blocksparse`` backend: only a BlockLayout's tiles, walked by row (forward,
    dQ) and by column (dK, dV). Float32 accumulation; differs from the reference in the order
    of floating-point operations; shapes as :func:`attnlab.attention`."""
    qf, kf, vf = _flat(q, k, v, spec)
    out, lse = _SparseAttention.apply(qf, kf, vf, spec, _sparse_layout(spec))
    return _result(out, lse, q, spec)


# ----------------------------------------------------------------------------- registration


def _where(spec: AttentionSpec) -> str | None:
    reason = unavailable()
    if reason is not None:
        return reason
    if spec.device.type != "cuda" and not _interpreted():
        return (f"it runs on CUDA tensors, got {spec.device.type} (on CPU only under Triton's "
                "interpreter, TRITON_INTERPRET=1, for testing)")
    if max(spec.d_k, spec.d_v) > MAX_HEAD_DIM:
        return f"head dims up to {MAX_HEAD_DIM}, got d_k={spec.d_k}, d_v={spec.d_v}"
    if spec.mask is not None and spec.mask.requires_grad:
        return "it does not compute gradients for a mask"
    return None


def _dense_check(spec: AttentionSpec) -> str | None:
    reason = _where(spec)
    if reason is not None:
        return reason
    if spec.mask_fn is None:
        return None
    rule = getattr(spec.mask_fn, "lengths", None)
    if rule is None:
        return ("it takes causal, window and per-sequence lengths (masks.key_padding, "
                "masks.varlen, q_lengths / kv_lengths), not other mask functions; "
                "triton_blocksparse takes any")
    n_b = spec.heads_view[0]
    for name, t in (("q lengths", rule.q), ("kv lengths", rule.kv)):
        if t is not None and t.shape[0] != n_b:
            return f"its {name} have {t.shape[0]} entries for a batch of {n_b}"
    if rule.q is not None and spec.band is not None:
        return "it takes a varlen mask's own causal / window, not a second band on top"
    return None


def _sparse_check(spec: AttentionSpec) -> str | None:
    reason = _where(spec)
    if reason is not None:
        return reason
    if spec.device.type == "cuda" and spec.dtype == torch.float32:
        return ("its float32 tiles fail to compile for the GPU (Triton 3.6, sm_90, measured); "
                "use bfloat16 / float16, or backend='triton' for float32")
    if spec.band is None and spec.mask_fn is None and spec.mask is None:
        return "it needs a structured mask (causal, window, a mask function or a bool mask)"
    fn = spec.mask_fn
    if isinstance(fn, BlockLayout):
        for side, b in (("block_q", fn.block_q), ("block_k", fn.block_k)):
            if b < 16 or b & (b - 1):
                return f"its tiles need power-of-two sides >= 16, the layout's {side} is {b}"
        bm, hm = fn.keep.shape[:2]
        want = spec.heads_view
        if (bm > 1 and bm != want[0]) or (hm > 1 and hm != want[1]):
            return (f"the layout was built for (batch, heads) = ({bm}, {hm}), the request has "
                    f"{want}")
    return None


def _never(spec: AttentionSpec) -> float:
    # Off CUDA (the interpreter, for tests) auto never picks them; on CUDA the registry prices
    # them from the measured table (attnlab.core.cuda_cost) before this is asked.
    return float("inf")


register_backend(
    "triton", triton_attention,
    Capabilities(exact=True, lse=True, softcap=True, gqa=True, backward=True,
                 masks=frozenset({"causal", "window", "fn"}), dtypes=_DTYPES),
    description="Triton FlashAttention-2 kernels, forward and backward (CUDA; "
                "causal, window, per-sequence lengths)",
    cost=_never, check=_dense_check, available=_here, linear_memory=lambda spec: True,
)

register_backend(
    "triton_blocksparse", triton_blocksparse_attention,
    Capabilities(exact=True, lse=True, softcap=True, gqa=True, backward=True,
                 masks=frozenset({"bool", "causal", "window", "fn"}), dtypes=_DTYPES),
    description="Triton kernels over a BlockLayout's tiles, forward and backward (CUDA)",
    cost=_never, check=_sparse_check, available=_here, linear_memory=lambda spec: True,
)
