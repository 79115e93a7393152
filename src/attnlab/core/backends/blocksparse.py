"""Block-sparse exact attention: compute only the tiles a structured mask keeps.

The request's mask (causal/window band, mask functions, a bool mask) is mapped once to a
:class:`~attnlab.core.layout.BlockLayout` (cached per mask function and sizes, or passed in as
``mask=layout``). Each work item pairs one query block with ``G`` key blocks; a batch of items
is computed with a handful of large batched operations::

    q_g (BH, C, bq, D)   k_g, v_g (BH, C, G*bk, D)      gathered blocks
    S = q_g k_gᵀ · c, masked by the item's exact keep-mask, softmax -> (o, lse) per item

and items of the same query block (a global token's row, say) are folded together with
:func:`~attnlab.core.softmax.merge_partials`. The backward pass recomputes each item's
probabilities from the saved lse, like the tiled backend, and scatters dK, dV with index_add.
Memory is O(N · D) plus one batch of items; time is proportional to the number of kept tiles.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F

from attnlab.core.backends import _band
from attnlab.core.dropout import keep_mask
from attnlab.core.engine.compiled import loop
from attnlab.core.geometry import band_range
from attnlab.core.layout import BlockLayout, block_layout, keep_for_backward, kept_for_backward
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.score_mod import TileGrad
from attnlab.core.score_mod import apply as apply_score_mod
from attnlab.core.softmax import (
    backward_terms,
    block_lse,
    finite_or_zero,
    merge_partials,
)
from attnlab.core.spec import AttentionOutput, AttentionSpec, compute_dtype

BLOCK = (128, 128)          # tiles of general layouts (the pure-band path uses _band.BLOCK)
# Items computed together; bounds the gathered k/v and the score batch (~64 MiB at BH=8, G=8).
ITEMS_PER_STEP = 16
_CACHE: OrderedDict[tuple, BlockLayout] = OrderedDict()


@dataclasses.dataclass(frozen=True)
class TileSizes:
    """Tile sizes of the blocksparse backend: ``block`` (query, key) tiles of general layouts,
    ``band_block`` and ``run`` (query blocks per step) of the pure-band path, ``items`` work
    items computed together."""

    block: tuple[int, int] = BLOCK
    band_block: int = _band.BLOCK
    run: int = _band.RUN
    items: int = ITEMS_PER_STEP


_SIZES: contextvars.ContextVar[TileSizes | None] = contextvars.ContextVar(
    "attnlab_blocksparse_sizes", default=None)


def sizes() -> TileSizes:
    """The tile sizes in force (the defaults, or those of an enclosing :func:`tile_sizes`)."""
    return _SIZES.get() or TileSizes()


@contextlib.contextmanager
def tile_sizes(block: tuple[int, int] | None = None, band_block: int | None = None,
               run: int | None = None, items: int | None = None):
    """Within the block, blocksparse uses these tile sizes (the others keep their defaults;
    restored on exit). For tests that must cross many tiles, and for tuning."""
    given = {k: v for k, v in dict(block=block, band_block=band_block, run=run,
                                   items=items).items() if v is not None}
    for name, v in given.items():
        vals = v if name == "block" else (v,)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in vals) \
                or (name == "block" and len(vals) != 2):
            raise ValueError(f"{name} must be {'a pair of ints' if name == 'block' else 'an int'}"
                             f" >= 1, got {v!r}")
    token = _SIZES.set(dataclasses.replace(sizes(), **given))
    try:
        yield
    finally:
        _SIZES.reset(token)
_CACHE_SIZE = 16


def _cache_key(spec: AttentionSpec, dense: torch.Tensor | None,
               block: tuple[int, int] | None = None) -> tuple:
    b, h = spec.heads_view
    block = sizes().block if block is None else block
    return (id(spec.mask_fn), spec.n_q, spec.n_k, spec.band, b, h, str(spec.device), block,
            id(dense) if dense is not None else None)


def layout_for(spec: AttentionSpec, block: tuple[int, int] | None = None) -> BlockLayout:
    """The layout serving spec: the one passed as ``mask=`` if it fits, else a cached or new one
    with tiles of ``block`` (the Triton kernel builds its own with smaller tiles)."""
    block = sizes().block if block is None else block
    fn = spec.mask_fn
    if isinstance(fn, BlockLayout) and spec.mask is None \
            and (fn.n_q, fn.n_k) == (spec.n_q, spec.n_k) \
            and (spec.band is None or spec.band == fn.band):
        return fn if fn.keep.device == spec.device else fn.to(spec.device)
    b, h = spec.heads_view
    dense = spec.mask if spec.mask is not None and spec.mask.dtype == torch.bool else None
    key = _cache_key(spec, dense, block)
    if dense is not None:
        dense = spec.in_heads_view(dense)                    # (B or 1, H or 1, N_q?, N_k?)
    hit = _CACHE.get(key)
    if hit is not None and hit.mask_fn is fn:
        _CACHE.move_to_end(key)
        return hit
    lay = block_layout(fn, spec.n_q, spec.n_k, band=spec.band, dense=dense, batch=b, heads=h,
                       block=block, device=spec.device)
    if dense is None:                        # a dense tensor may change in place: do not cache
        _CACHE[key] = lay
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return lay


class _Items:
    """Gathers and masks shared by forward and backward."""

    def __init__(self, spec: AttentionSpec, lay: BlockLayout, n_bh: int):
        self.spec, self.lay, self.n_bh = spec, lay, n_bh
        self.gk = lay.slots * lay.block_k
        self.g = spec.kv_groups              # query heads per K/V head (GQA), 1 otherwise
        self.bh = torch.arange(n_bh, device=spec.device).view(n_bh, 1, 1, 1)
        self.b_idx, self.h_idx = spec.head_index(self.bh)      # (BH, 1, 1, 1) for score_mod
        self.mod_grad = None                 # a score_mod.TileGrad in the backward pass

    def gather(self, blocks: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``blocks (BH, nb, b, D)``, ``idx (C, G)`` -> ``(BH, C, G*b, D)``; -1 slots read block 0
        (their scores are masked). K/V blocks under GQA have BKV = BH / kv_groups rows."""
        g = blocks[:, idx.clamp_min(0)]                                     # (BH, C, G, b, D)
        return g.reshape(blocks.shape[0], idx.shape[0], -1, blocks.shape[-1])

    # Grouped-query attention: query head h = kv * G + g, so (BH, ...) is (BKV, G, ...) and
    # each K/V head broadcasts over its G query heads in the matmul; K/V are never repeated.
    def _grouped(self, a: torch.Tensor) -> torch.Tensor:
        return a.view(a.shape[0] // self.g, self.g, *a.shape[1:])

    def qk(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a (BH, C, m, X) @ b (BKV, C, n, X)^T -> (BH, C, m, n)``."""
        if self.g == 1:
            return a @ b.transpose(-1, -2)
        return (self._grouped(a) @ b.unsqueeze(1).transpose(-1, -2)).flatten(0, 1)

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a (BH, C, m, n) @ b (BKV, C, n, X) -> (BH, C, m, X)``."""
        if self.g == 1:
            return a @ b
        return (self._grouped(a) @ b.unsqueeze(1)).flatten(0, 1)

    def tmm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a^T @ b`` summed over each K/V head's query heads -> ``(BKV, C, n, X)``."""
        if self.g == 1:
            return a.transpose(-1, -2) @ b
        return (self._grouped(a).transpose(-1, -2) @ self._grouped(b)).sum(1)

    def keep(self, i0: int, i1: int) -> torch.Tensor:
        """``(BH or 1, C, bq, G*bk)`` keep-mask of items i0..i1-1."""
        k = self.lay.keep[:, :, i0:i1]                                      # (Bm, Hm, C, bq, GK)
        if k.shape[0] == 1 and k.shape[1] == 1:
            return k[0]
        bshape = self.spec.batch_shape
        b, h = (bshape[0], 1) if len(bshape) == 1 else (math.prod(bshape[:-1]), bshape[-1])
        return k.expand(b, h, *k.shape[2:]).reshape(self.n_bh, *k.shape[2:])

    def scores(self, q_s, kb, i0, i1):
        """Capped, masked scores of items i0..i1-1, the gathered queries, and d cap / d s
        (None without a softcap)."""
        qi, kvi = self.lay.items_q[i0:i1], self.lay.items_kv[i0:i1]
        q_g = q_s[:, qi]                                                    # (BH, C, bq, D)
        s = self.qk(q_g, self.gather(kb, kvi))                              # (BH, C, bq, G*bk)
        self.spec.cap(s)                                                    # before the mask
        dcap = self.spec.cap_grad(s)
        handle = None
        if self.spec.score_mod is not None:
            rows, cols = self.positions(i0, i1)
            # padded rows / empty slots are masked below; clamp so a table lookup stays inside
            idx = (self.b_idx, self.h_idx, rows.clamp_max(self.spec.n_q - 1),
                   cols.clamp_max(self.spec.n_k - 1))
            if self.mod_grad is not None:
                mod, handle = self.mod_grad.forward(s, *idx)
            else:
                mod = apply_score_mod(self.spec.score_mod, s, *idx)
            s.copy_(mod)
        s.masked_fill_(~self.keep(i0, i1), float("-inf"))
        return s, q_g, (dcap, handle)

    def positions(self, i0, i1):
        lay = self.lay
        rows = (lay.items_q[i0:i1, None] * lay.block_q
                + torch.arange(lay.block_q, device=self.bh.device))
        cols = (lay.items_kv[i0:i1, :, None].clamp_min(0) * lay.block_k
                + torch.arange(lay.block_k, device=self.bh.device)).reshape(i1 - i0, -1)
        return rows[None, :, :, None], cols[None, :, None, :]             # (1,C,bq,1), (1,C,1,GK)

    def dropout_scale(self, i0, i1, dtype):
        spec = self.spec
        rows, cols = self.positions(i0, i1)
        keep = keep_mask(spec.dropout_seed, spec.dropout_p, self.bh, rows, cols, spec.n_q, spec.n_k)
        return keep.to(dtype) / (1.0 - spec.dropout_p)


def _steps(lay: BlockLayout):
    """Item ranges of at most ``sizes().items`` that never cross a round."""
    step = sizes().items
    for r0, r1 in lay.rounds():
        for i0 in range(r0, r1, step):
            yield i0, min(i0 + step, r1)


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """``(BH, N, D)`` -> zero-padded ``(BH, ceil(N / block), block, D)``."""
    n = x.shape[1]
    pad = -n % block
    if pad:
        x = F.pad(x, (0, 0, 0, pad))
    return x.view(x.shape[0], -1, block, x.shape[-1])


class _BlockSparseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec: AttentionSpec, lay: BlockLayout, *captured):
        # q (BH, N_q, D_k), k (BH, N_k, D_k), v (BH, N_k, D_v)
        n_bh = q.shape[0]
        it = _Items(spec, lay, n_bh)
        qb = _blocks(q * spec.score_scale, lay.block_q)                     # (BH, nqb, bq, D_k)
        kb, vb = _blocks(k, lay.block_k), _blocks(v, lay.block_k)           # (BH, nkb, bk, D)
        out = torch.zeros(n_bh, qb.shape[1], lay.block_q, spec.d_v, dtype=q.dtype, device=q.device)
        lse = torch.full(out.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        for i0, i1 in _steps(lay):
            s, _, _ = it.scores(qb, kb, i0, i1)
            m = finite_or_zero(s.amax(dim=-1, keepdim=True))                 # (BH, C, bq, 1)
            p = s.sub_(m).exp_()
            l = p.sum(dim=-1)                                               # (BH, C, bq)
            if spec.dropout_p > 0:
                p.mul_(it.dropout_scale(i0, i1, p.dtype))
            l_safe, lse_i = block_lse(m.squeeze(-1), l)
            o = it.mm(p, it.gather(vb, lay.items_kv[i0:i1])) / l_safe.unsqueeze(-1)   # (BH,C,bq,Dv)
            qi = lay.items_q[i0:i1]                       # unique within a round
            out[:, qi], lse[:, qi] = merge_partials(out[:, qi], lse[:, qi], o, lse_i)
        out = out.view(n_bh, -1, spec.d_v)[:, : spec.n_q]
        lse = lse.view(n_bh, -1)[:, : spec.n_q]
        return keep_for_backward(ctx, spec, lay, q, k, v, out, lse)

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, spec, lay = kept_for_backward(ctx)
        n_bh = q.shape[0]
        it = _Items(spec, lay, n_bh)
        captured_grads = [None] * len(spec.captured)
        if spec.score_mod is not None:
            it.mod_grad = TileGrad(spec.score_mod, list(spec.captured), captured_grads)
        c = spec.score_scale
        delta, lse_b = backward_terms(d_out, out, d_lse, lse)                # (BH, N_q) each
        qb = _blocks(q * c, lay.block_q)
        kb, vb = _blocks(k, lay.block_k), _blocks(v, lay.block_k)
        dob = _blocks(d_out.contiguous(), lay.block_q)                       # (BH, nqb, bq, D_v)
        lseb = _blocks(lse_b.unsqueeze(-1), lay.block_q).squeeze(-1)        # (BH, nqb, bq)
        deltab = _blocks(delta.unsqueeze(-1), lay.block_q).squeeze(-1)
        dqb, dkb, dvb = torch.zeros_like(qb), torch.zeros_like(kb), torch.zeros_like(vb)
        for i0, i1 in _steps(lay):
            qi, kvi = lay.items_q[i0:i1], lay.items_kv[i0:i1]
            s, q_g, (dcap, mod) = it.scores(qb, kb, i0, i1)
            p = s.sub_(lseb[:, qi, :, None]).exp_()                          # (BH, C, bq, G*bk)
            do_g = dob[:, qi]                                                # (BH, C, bq, D_v)
            v_g, k_g = it.gather(vb, kvi), it.gather(kb, kvi)
            dp = it.qk(do_g, v_g)                                            # (BH, C, bq, G*bk)
            if spec.dropout_p > 0:
                z = it.dropout_scale(i0, i1, p.dtype)
                dv_g = it.tmm(p * z, do_g)
                dp.mul_(z)
            else:
                dv_g = it.tmm(p, do_g)                                       # (BKV, C, G*bk, D_v)
            ds = dp.sub_(deltab[:, qi, :, None]).mul_(p)                     # (BH, C, bq, G*bk)
            if mod is not None:                                              # through score_mod
                ds = it.mod_grad.backward(mod, ds)
            if dcap is not None:
                ds.mul_(dcap)                                                # through c tanh(s/c)
            dqb.index_add_(1, qi, it.mm(ds, k_g) * c)
            flat = kvi.clamp_min(0).flatten()                                # (C*G,)
            shape = (kb.shape[0], -1, lay.block_k)                           # (BKV, C*G, bk)
            dkb.index_add_(1, flat, it.tmm(ds, q_g).reshape(*shape, kb.shape[-1]))
            dvb.index_add_(1, flat, dv_g.reshape(*shape, vb.shape[-1]))
        dq = dqb.view(n_bh, -1, q.shape[-1])[:, : spec.n_q]
        dk = dkb.view(k.shape[0], -1, k.shape[-1])[:, : spec.n_k]
        dv = dvb.view(v.shape[0], -1, v.shape[-1])[:, : spec.n_k]
        return (dq, dk, dv, None, None, *captured_grads)


def blocksparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          spec: AttentionSpec) -> AttentionOutput:
    """The blocksparse backend: ``(out, lse)`` computed only on the tiles a structured mask keeps.

    A pure band goes to the contiguous band path (:mod:`~attnlab.core.backends._band`), any
    other structure to the gathered tiles of a :class:`~attnlab.core.layout.BlockLayout`.
    Differs from the reference only in the order of floating-point operations (and exp2 on
    log2-unit scores on the band path); q ``(..., N_q, D_k)``, k ``(..., N_k, D_k)``,
    v ``(..., N_k, D_v)``; out ``(..., N_q, D_v)``, lse ``(..., N_q)``."""
    compute = compute_dtype(q.dtype)
    n_bh, n_kv = math.prod(spec.batch_shape), math.prod(spec.kv_batch_shape)
    qf = q.reshape(n_bh, spec.n_q, spec.d_k).to(compute)
    kf = k.reshape(n_kv, spec.n_k, spec.d_k).to(compute)              # own heads under GQA
    vf = v.reshape(n_kv, spec.n_k, spec.d_v).to(compute)
    if _band.applies(spec) and loop.wanted(spec):   # the compiled tile loop, K/V not repeated
        ts = sizes()
        block = loop.BAND_TILES if ts.band_block == _band.BLOCK else (ts.band_block,) * 2
        out, lse = loop.Attention.apply(qf, kf, vf, spec, *block)
    elif _band.applies(spec):
        ts = sizes()
        if spec.kv_groups > 1:        # the band path pairs each query head with its own K/V
            kf = kf.repeat_interleave(spec.kv_groups, dim=0)                # (BH, N_k, D_k)
            vf = vf.repeat_interleave(spec.kv_groups, dim=0)                # (BH, N_k, D_v)
            spec = dataclasses.replace(spec, kv_groups=1)
        out, lse = _band.BandAttention.apply(qf, kf, vf, spec, ts.band_block, ts.run)
    else:
        out, lse = _BlockSparseAttention.apply(qf, kf, vf, spec, layout_for(spec), *spec.captured)
    out = out.to(q.dtype).reshape(*spec.batch_shape, spec.n_q, spec.d_v)
    lse = lse.reshape(*spec.batch_shape, spec.n_q) if spec.need_lse else None
    return AttentionOutput(out=out, lse=lse)


def _check(spec: AttentionSpec) -> str | None:
    if spec.band is None and spec.mask_fn is None and spec.mask is None:
        return "it needs a structured mask (causal, window, a mask function or a bool mask)"
    return None


def _cost(spec: AttentionSpec) -> float:
    """Estimated microseconds (2-core CPU, D=64): ~1.5x a fused kernel per kept score, plus a
    fixed overhead; the density of a band is known without building the layout."""
    if spec.mask is not None:
        # A dense mask already costs O(N_q * N_k) to build and to scan for a layout: the dense
        # backends serve it; blocksparse runs on it only when named.
        return float("inf")
    if _band.applies(spec):
        geometry = _band.Band(spec, sizes().band_block)
        density = min(1.0, geometry.g / max(geometry.nkb, 1))
    elif spec.mask_fn is None:
        density = _band_density(spec)
    elif isinstance(spec.mask_fn, BlockLayout):
        density = spec.mask_fn.density
    else:
        # Pricing has no side effects: a layout built earlier for this mask function is used,
        # but none is built (or cached) here; without one the band bounds the density. Pass
        # mask=block_layout(...) to let auto see a sparse mask function's real density.
        hit = _CACHE.get(_cache_key(spec, None))
        density = hit.density if hit is not None and hit.mask_fn is spec.mask_fn else (
            _band_density(spec) if spec.band is not None else 1.0)
    return 400.0 + 2.4e-3 * density * spec.entries


def _band_density(spec: AttentionSpec) -> float:
    """Fraction of the tiles of the block grid the band reaches (no layout is built)."""
    bq, bk = sizes().block
    nqb, nkb = -(-spec.n_q // bq), -(-spec.n_k // bk)
    total = 0
    for qb in range(nqb):
        lo, hi = band_range(spec.band, spec.offset, qb * bq, min((qb + 1) * bq, spec.n_q),
                            spec.n_k)[:2]
        total += max(0, -(-hi // bk) - lo // bk) if hi > lo else 0
    return total / max(nqb * nkb, 1)


register_backend(
    "blocksparse", blocksparse_attention,
    Capabilities(exact=True, weights=False, lse=True, dropout=True, softcap=True, gqa=True,
                 score_mod=True, backward=True,
                 masks=frozenset({"bool", "causal", "window", "fn"})),
    description="computes only the tiles a structured mask keeps (band, dilated, global, "
                "segments); layouts reusable as mask=",
    cost=_cost, check=_check,
    linear_memory=_band.applies,      # a band's blocks; other layouts keep their score blocks
)
