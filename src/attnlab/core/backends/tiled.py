"""Flash-style exact attention: online softmax over tiles, O(N) memory (Dao et al. 2022, 2023).

Forward. For each block of queries, walk the key blocks; each tile gives a partial result
``(o_b, lse_b)`` and :func:`~attnlab.core.softmax.merge_partials` folds it into the running one.
No N_q x N_k tensor exists beyond one ``(BH, block_q, block_k)`` tile. Tiles that the causal or
window band excludes are never computed, and tiles the band covers entirely are not masked.

Backward. Only q, k, v, the output and lse ``(BH, N_q)`` are saved. Each tile's probabilities
are recomputed exactly as ``P = exp(S - lse)``, and with ``D_i = sum_d dO_id O_id``::

    dV += P^T dO        dP = dO V^T        dS = P * (dP - D + dlse)
    dQ += dS K * c      dK += dS^T Q * c   (c = scale / temperature)

``dlse`` is the gradient flowing into the returned lse, so lse can itself be used in a loss or
in a later merge. Fully masked rows have lse = -inf; the backward uses +inf there so that P = 0.

bfloat16 and float16 inputs are computed in float32 tile by tile, as flash kernels accumulate.
Differs from the reference only in the order of floating-point operations.
"""

from __future__ import annotations

import math
import types

import torch

from attnlab.core.dropout import keep_mask
from attnlab.core.masks import band_range, tile_of
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.score_mod import TileGrad
from attnlab.core.score_mod import apply as apply_score_mod
from attnlab.core.softmax import backward_terms, block_lse, finite_or_zero, merge_partials
from attnlab.core.spec import AttentionOutput, AttentionSpec

# Tile sizes. Large tiles keep the Python loop short and the matmuls efficient on CPU; a
# (8, 512, 1024) float32 tile is 16 MiB. Tests shrink them to exercise many tiles.
BLOCK_Q = 512
BLOCK_K = 1024


def _tile_kinds(spec: AttentionSpec, i0: int, i1: int):
    """``(j0, j1, kind)`` for every key block of query rows ``i0 .. i1-1``; kind is 'skip' if
    the band excludes the whole tile, 'full' if it keeps all of it, else 'partial'."""
    r = band_range(spec.band, spec.offset, i0, i1, spec.n_k) if spec.band is not None else None
    for j0 in range(0, spec.n_k, BLOCK_K):
        j1 = min(j0 + BLOCK_K, spec.n_k)
        yield j0, j1, "full" if r is None else r.tile_kind(j0, j1)


class _Tiles:
    """Per-tile pieces shared by forward and backward (the same scores, masks and dropout)."""

    def __init__(self, spec: AttentionSpec, n_bh: int):
        self.spec = spec
        self.n_bh = n_bh
        self.g = spec.kv_groups                 # query heads per K/V head (GQA), 1 otherwise
        self.bh = torch.arange(n_bh, device=spec.device).view(n_bh, 1, 1)
        self.b_idx, self.h_idx = spec.head_index(self.bh)      # (BH, 1, 1) for score_mod
        self._bufs: dict[tuple, torch.Tensor] = {}
        self.mod_grad = None                    # a score_mod.TileGrad in the backward pass

    # Grouped-query attention without repeating K/V: the G query heads of one K/V head are
    # consecutive (h = kv * G + g), so (BH, m, X) is (BKV, G * m, X) and one bmm serves them.
    def _rows(self, a: torch.Tensor) -> torch.Tensor:
        return a.reshape(a.shape[0] // self.g, self.g * a.shape[1], a.shape[2])

    def qk(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``a (BH, m, X) @ b (BKV, n, X)^T -> (BH, m, n)``."""
        if self.g == 1:
            return torch.bmm(a, b.transpose(1, 2), out=out)
        res = torch.bmm(self._rows(a), b.transpose(1, 2),
                        out=None if out is None else self._rows(out))
        return res.view(a.shape[0], a.shape[1], b.shape[1])

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a (BH, m, n) @ b (BKV, n, X) -> (BH, m, X)``."""
        if self.g == 1:
            return torch.bmm(a, b)
        return torch.bmm(self._rows(a), b).view(a.shape[0], a.shape[1], b.shape[2])

    def tmm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a^T @ b`` summed over each K/V head's query heads: ``a (BH, m, n)``,
        ``b (BH, m, X) -> (BKV, n, X)``."""
        if self.g == 1:
            return torch.bmm(a.transpose(1, 2), b)
        return torch.bmm(self._rows(a).transpose(1, 2), self._rows(b))

    def buffer(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A scratch tensor reused across tiles: fresh multi-MiB allocations each tile cost
        page faults that show up as a large share of the run time on CPU."""
        key = (name, shape)
        if key not in self._bufs:
            self._bufs[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
        return self._bufs[key]

    def _flat(self, t: torch.Tensor, bq: int, bk: int) -> torch.Tensor:
        """A tile of shape broadcastable to ``batch_shape + (bq, bk)`` as ``(BH or 1, bq, bk)``."""
        if t.dim() <= 2 or all(d == 1 for d in t.shape[:-2]):
            return t.reshape(1, *t.shape[-2:]).expand(1, bq, bk)      # the same for every (b, h)
        return t.expand(*self.spec.batch_shape, bq, bk).reshape(self.n_bh, bq, bk)

    def scores(self, q_s: torch.Tensor, k: torch.Tensor, i0: int, i1: int, j0: int, j1: int,
               kind: str, shift: torch.Tensor | None = None, cap_grad: bool = False):
        """Scaled, capped, masked scores of a tile ``(BH, bq, bk)``, minus ``shift (BH, bq, 1)``
        if given; None if the tile keeps nothing. With ``cap_grad``, ``(scores, d cap / d s)``
        (None without a softcap)."""
        spec = self.spec
        bq, bk = i1 - i0, j1 - j0
        keep = None
        if kind == "partial" or spec.mask_fn is not None:
            keep = spec.structure_tile((i0, i1), (j0, j1))      # (bq, bk) or batch + (bq, bk)
        if spec.mask is not None and spec.mask.dtype == torch.bool:
            m = tile_of(spec.mask, (i0, i1), (j0, j1))          # broadcast dims stay size 1
            keep = m if keep is None else keep & m
        if keep is not None:
            keep = self._flat(keep, bq, bk)                      # (BH or 1, bq, bk)
            if not keep.any():
                return (None, (None, None)) if cap_grad else None
        s = self.qk(q_s[:, i0:i1], k[:, j0:j1],
                    out=self.buffer("s", (self.n_bh, bq, bk), q_s))      # (BH, bq, bk)
        spec.cap(s)                                              # before the mask, as Gemma 2
        dcap = spec.cap_grad(s) if cap_grad else None
        handle = None
        if spec.score_mod is not None:
            idx = (self.b_idx, self.h_idx, torch.arange(i0, i1, device=s.device).view(1, -1, 1),
                   torch.arange(j0, j1, device=s.device).view(1, 1, -1))
            if self.mod_grad is not None:
                mod, handle = self.mod_grad.forward(s, *idx)
            else:
                mod = apply_score_mod(spec.score_mod, s, *idx)
            s.copy_(mod)
        if shift is not None:
            # A separate pass: baddbmm with a broadcast input is slower here than bmm + sub_.
            s.sub_(shift)
        bias = spec.float_bias()
        if bias is not None:
            s += self._flat(tile_of(bias, (i0, i1), (j0, j1)), bq, bk).to(s.dtype)
        if keep is not None:
            s.masked_fill_(~keep, float("-inf"))
        return (s, (dcap, handle)) if cap_grad else s

    def dropout_scale(self, i0: int, i1: int, j0: int, j1: int, dtype: torch.dtype) -> torch.Tensor:
        """keep / (1 - p) for the tile, ``(BH, bq, bk)``."""
        spec = self.spec
        dev = spec.device
        keep = keep_mask(spec.dropout_seed, spec.dropout_p, self.bh,
                         torch.arange(i0, i1, device=dev).view(1, -1, 1),
                         torch.arange(j0, j1, device=dev).view(1, 1, -1), spec.n_q, spec.n_k)
        return keep.to(dtype) / (1.0 - spec.dropout_p)


def _key_blocks(spec: AttentionSpec, i0: int, i1: int):
    for j0, j1, kind in _tile_kinds(spec, i0, i1):
        if kind != "skip":
            yield j0, j1, kind


class _TiledAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec: AttentionSpec, *captured):
        # q (BH, N_q, D_k), k (BKV, N_k, D_k), v (BKV, N_k, D_v), all in the compute dtype;
        # BKV = BH / kv_groups (grouped-query attention), BH otherwise
        n_bh = q.shape[0]
        tiles = _Tiles(spec, n_bh)
        q_s = q * spec.score_scale
        out = torch.zeros(n_bh, spec.n_q, spec.d_v, dtype=q.dtype, device=q.device)
        lse = torch.full((n_bh, spec.n_q), float("-inf"), dtype=q.dtype, device=q.device)
        # Softmax shift without a max pass (as in the band path of blocksparse): without an
        # additive bias, |q_i| * max_j |k_j| bounds every score of row i, so exp cannot overflow;
        # a tile whose row sums fall below 1e-30 is redone with the exact row max. Only tiles
        # that mask nothing use it: in a masked tile, rows with no kept key sum to 0 anyway, and
        # telling them apart costs more than the max pass it saves (measured).
        # With a softcap c the capped scores lie in (-c, c): c itself is the shift, and for
        # c <= 34 every exp(s - c) >= e^-68 keeps a row sum above the 1e-30 fallback threshold.
        bound = (spec.float_bias() is None and spec.mask is None and spec.mask_fn is None
                 and spec.score_mod is None
                 and (spec.softcap is None or spec.softcap <= 34.0))
        if bound and spec.softcap is None:
            qnorm = q_s.norm(dim=-1, keepdim=True)                       # (BH, N_q, 1)
            kmax = k.norm(dim=-1).amax(dim=-1).repeat_interleave(spec.kv_groups).view(
                n_bh, 1, 1)                                               # (BH, 1, 1)
        elif bound:
            cap = torch.full((n_bh, 1, 1), spec.softcap, dtype=q.dtype, device=q.device)
        for i0 in range(0, spec.n_q, BLOCK_Q):
            i1 = min(i0 + BLOCK_Q, spec.n_q)
            o_acc, lse_acc = out[:, i0:i1], lse[:, i0:i1]     # (BH, bq, D_v), (BH, bq)
            shift = None                                       # (BH, bq, 1)
            if bound:
                shift = (qnorm[:, i0:i1] * kmax if spec.softcap is None
                         else cap.expand(n_bh, i1 - i0, 1))
            for j0, j1, kind in _key_blocks(spec, i0, i1):
                use_shift = bound and kind == "full"
                s = tiles.scores(q_s, k, i0, i1, j0, j1, kind, shift if use_shift else None)
                if s is None:
                    continue
                if use_shift:
                    m = shift
                    p = s.exp_()
                    l = p.sum(dim=-1)
                    if bool((l < 1e-30).any()):                         # bound far too loose
                        s = tiles.scores(q_s, k, i0, i1, j0, j1, kind)
                        use_shift = False
                if not use_shift:
                    m = finite_or_zero(s.amax(dim=-1, keepdim=True))   # (BH, bq, 1)
                    p = s.sub_(m).exp_()                                # (BH, bq, bk), in place
                    l = p.sum(dim=-1)                                   # (BH, bq)
                if spec.dropout_p > 0:
                    p.mul_(tiles.dropout_scale(i0, i1, j0, j1, p.dtype))
                l_safe, lse_blk = block_lse(m.squeeze(-1), l)
                o_blk = tiles.mm(p, v[:, j0:j1]) / l_safe.unsqueeze(-1)    # (BH, bq, D_v)
                o_acc, lse_acc = merge_partials(o_acc, lse_acc, o_blk, lse_blk)
            out[:, i0:i1], lse[:, i0:i1] = o_acc, lse_acc
        ctx.spec = spec
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        spec: AttentionSpec = ctx.spec
        tiles = _Tiles(spec, q.shape[0])
        captured_grads = [None] * len(spec.captured)
        if spec.score_mod is not None:
            tiles.mod_grad = TileGrad(spec.score_mod, list(spec.captured), captured_grads)
        c = spec.score_scale
        q_s = q * c
        d_out = d_out.contiguous()
        # D_i = dO_i . O_i equals sum_j P_ij dP_ij (with dropout folded in), the softmax Jacobian term.
        delta, lse_b = backward_terms(d_out, out, d_lse, lse)   # (BH, N_q) each
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for i0 in range(0, spec.n_q, BLOCK_Q):
            i1 = min(i0 + BLOCK_Q, spec.n_q)
            do_blk = d_out[:, i0:i1]                             # (BH, bq, D_v)
            for j0, j1, kind in _key_blocks(spec, i0, i1):
                s, (dcap, mod) = tiles.scores(q_s, k, i0, i1, j0, j1, kind, cap_grad=True)
                if s is None:
                    continue
                p = s.sub_(lse_b[:, i0:i1, None]).exp_()          # (BH, bq, bk) exact softmax
                dp = tiles.qk(do_blk, v[:, j0:j1],
                              out=tiles.buffer("dp", p.shape, p))      # (BH, bq, bk)
                if spec.dropout_p > 0:
                    z = tiles.dropout_scale(i0, i1, j0, j1, p.dtype)
                    dv[:, j0:j1] += tiles.tmm(p * z, do_blk)
                    dp.mul_(z)
                else:
                    dv[:, j0:j1] += tiles.tmm(p, do_blk)              # (BKV, bk, D_v)
                ds = dp.sub_(delta[:, i0:i1, None]).mul_(p)        # (BH, bq, bk)
                if mod is not None:                                 # through score_mod
                    ds = tiles.mod_grad.backward(mod, ds)
                if dcap is not None:
                    ds.mul_(dcap)                                   # through c tanh(s / c)
                dq[:, i0:i1] += tiles.mm(ds, k[:, j0:j1]) * c
                dk[:, j0:j1] += tiles.tmm(ds, q_s[:, i0:i1])
        return (dq, dk, dv, None, *captured_grads)


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    spec: AttentionSpec) -> AttentionOutput:
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    n_bh, n_kv = math.prod(spec.batch_shape), math.prod(spec.kv_batch_shape)
    # (..., N, D) -> (BH, N, D); expand+reshape copies only where leading dims were broadcast.
    # K/V keep their own heads under GQA: (BKV, N, D), never repeated.
    qf = q.expand(*spec.batch_shape, *q.shape[-2:]).reshape(n_bh, spec.n_q, spec.d_k).to(compute)
    kf = k.expand(*spec.kv_batch_shape, *k.shape[-2:]).reshape(n_kv, spec.n_k, spec.d_k).to(compute)
    vf = v.expand(*spec.kv_batch_shape, *v.shape[-2:]).reshape(n_kv, spec.n_k, spec.d_v).to(compute)
    out, lse = _TiledAttention.apply(qf, kf, vf, spec, *spec.captured)
    out = out.to(q.dtype).view(*spec.batch_shape, spec.n_q, spec.d_v)
    lse = lse.view(*spec.batch_shape, spec.n_q) if spec.need_lse else None
    return AttentionOutput(out=out, lse=lse)


def _tile_fractions(spec: AttentionSpec) -> tuple[float, float]:
    """Fractions of the score matrix in tiles computed without a mask and with one."""
    masked_everywhere = spec.mask is not None or spec.mask_fn is not None
    if spec.band is None:
        return (0.0, 1.0) if masked_everywhere else (1.0, 0.0)
    total = full = partial = 0
    for i0 in range(0, spec.n_q, BLOCK_Q):
        i1 = min(i0 + BLOCK_Q, spec.n_q)
        for j0, j1, kind in _tile_kinds(spec, i0, i1):
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


def _tiled_check(spec: AttentionSpec) -> str | None:
    if spec.mask is not None and spec.mask.requires_grad:
        return "it does not compute gradients for a float mask that requires grad"
    return None


register_backend(
    "tiled", tiled_attention,
    Capabilities(exact=True, weights=False, lse=True, dropout=True, softcap=True, gqa=True,
                 score_mod=True, backward=True),
    description="flash-style online softmax over tiles; O(N) memory; skips tiles outside a band",
    cost=_tiled_cost,
    check=_tiled_check,
)


def block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, d_out: torch.Tensor, d_lse: torch.Tensor | None,
                   spec: AttentionSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of one block of keys that is part of a larger softmax.

    ``out`` and ``lse`` are the **whole** row's result (over every key, not only this block's),
    ``d_out`` / ``d_lse`` their cotangents. The tile backward above needs nothing else: it
    recomputes ``P = exp(S - lse)`` for this block's keys, which are exactly the entries of the
    full softmax in these columns, and ``D = dO . O - dlse`` is a per-row constant. So the
    gradients of blocks computed apart (ring attention, docs/distributed.md) sum to the
    gradients of the whole. ``spec`` describes the block (``build_spec`` of its q, k, v and
    masks); q ``(..., N_q, D_k)``, k, v ``(..., N_k, ·)``, out ``(..., N_q, D_v)``, lse ``(..., N_q)``.
    """
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    n_bh, n_kv = math.prod(spec.batch_shape), math.prod(spec.kv_batch_shape)

    def flat(t, shape, n):
        return t.expand(*shape, *t.shape[-2:]).reshape(n, *t.shape[-2:]).to(compute)
    qf, kf, vf = flat(q, spec.batch_shape, n_bh), flat(k, spec.kv_batch_shape, n_kv), \
        flat(v, spec.kv_batch_shape, n_kv)
    of = flat(out, spec.batch_shape, n_bh)
    dof = flat(d_out, spec.batch_shape, n_bh)
    lf = lse.expand(*spec.batch_shape, spec.n_q).reshape(n_bh, spec.n_q).to(compute)
    dlf = None if d_lse is None else \
        d_lse.expand(*spec.batch_shape, spec.n_q).reshape(n_bh, spec.n_q).to(compute)
    ctx = types.SimpleNamespace(saved_tensors=(qf, kf, vf, of, lf), spec=spec)
    dq, dk, dv = _TiledAttention.backward(ctx, dof, dlf)[:3]
    return (dq.view(*spec.batch_shape, spec.n_q, spec.d_k),
            dk.view(*spec.kv_batch_shape, spec.n_k, spec.d_k),
            dv.view(*spec.kv_batch_shape, spec.n_k, spec.d_v))
