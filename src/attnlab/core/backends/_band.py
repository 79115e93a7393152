"""The blocksparse backend's fast path for a pure band (sliding window, causal local attention).

With square blocks of size b, query block ``qb`` needs key blocks ``qb + lo .. qb + lo + G - 1``
for constants ``lo`` and ``G`` (the band is translation invariant). So for a run of C
consecutive query blocks, slot g reads the *contiguous* key blocks ``s0 + lo + g ...``: no
gather, no index_add, just slices of K and V padded with zero blocks at both ends::

    S[:, :, g] = Q_blocks @ K_blocks[s0 + lo + g : ... + C]ᵀ      (BH, C, b, b) per slot
    softmax over (g, key)         O = sum_g P[:, :, g] @ V_blocks[s0 + lo + g : ... + C]

Slots whose tile the band covers entirely are not masked; the others get a fixed (b, b) mask,
and the runs at either end of the sequence get the exact mask from positions.
"""

from __future__ import annotations

import math

import torch

from attnlab.core.dropout import keep_mask
from attnlab.core.geometry import band_range
from attnlab.core.softmax import backward_terms, finite_or_zero
from attnlab.core.spec import AttentionSpec

# Scores are in units of log2 e (q carries the factor), so every exponential is exp2, about 3x
# cheaper than exp on CPU; lse is returned in natural units.
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)

BLOCK = 64        # square blocks: measured fastest for windows of a few hundred keys
RUN = 8           # query blocks per step (a run's scores: G x 8 x BH x 64 x 64)


class Band:
    """Geometry of a band on a square block grid."""

    def __init__(self, spec: AttentionSpec, block: int, run: int = RUN):
        left, right = spec.band
        b, off = block, spec.offset
        self.spec, self.b, self.run = spec, b, run
        self.left, self.right = left, right
        self.nqb, self.nkb = -(-spec.n_q // b), -(-spec.n_k // b)
        # Keys of query block 0, unclipped: block qb needs the same blocks shifted by qb.
        keys = band_range(spec.band, off, 0, b, None)
        self.lo = keys.lo // b                                # first key block of query block 0
        self.g = (keys.hi - 1) // b - self.lo + 1             # key blocks per query block
        self.pad_l = max(0, -self.lo)
        self.pad_r = max(0, self.nqb - 1 + self.lo + self.g - self.nkb)
        # The (b, b) pattern of slot g is the same for every interior query block.
        i = torch.arange(b, device=spec.device)
        # Partial slots get an additive 0/-inf bias, fused into the score matmul (baddbmm).
        self.slot_bias: list[torch.Tensor | None] = []
        for g in range(self.g):
            d = (self.lo + g) * b + i[None, :] - i[:, None] - off   # key pos - query pos (qb = 0)
            keep = (d >= -left) & (d <= right)                      # (b, b)
            self.slot_bias.append(None if bool(keep.all()) else torch.zeros(
                b, b, dtype=spec.dtype if spec.dtype == torch.float64 else torch.float32,
                device=spec.device).masked_fill_(~keep, float("-inf")))

    def exact_keep(self, s0: int, c: int) -> torch.Tensor:
        """``(C, G, b, b)`` keep-mask from positions, for runs at the sequence ends."""
        b, dev = self.b, self.spec.device
        qb = torch.arange(s0, s0 + c, device=dev).view(c, 1, 1, 1)
        g = torch.arange(self.g, device=dev).view(1, self.g, 1, 1)
        i = torch.arange(b, device=dev).view(1, 1, b, 1)
        j = torch.arange(b, device=dev).view(1, 1, 1, b)
        row = qb * b + i
        key = (qb + self.lo + g) * b + j
        d = key - row - self.spec.offset
        return (d >= -self.left) & (d <= self.right) & (key >= 0) & (key < self.spec.n_k) & (
            row < self.spec.n_q)

    def is_edge(self, s0: int, c: int) -> bool:
        return (s0 + self.lo < 0 or s0 + c - 1 + self.lo + self.g > self.nkb
                or (s0 + c) * self.b > self.spec.n_q)

    def runs(self):
        for s0 in range(0, self.nqb, self.run):
            yield s0, min(self.run, self.nqb - s0)

    # Blocks first, (nb, BH, b, D): a run of blocks is then one contiguous slice, and every
    # matmul below is a plain batched matmul without hidden copies.
    def _blocked(self, x: torch.Tensor, lead: int, total: int, scale: float = 1.0) -> torch.Tensor:
        """``(BH, N, D)`` -> ``(total, BH, b, D)`` with row r of ``scale * x`` at block
        ``lead + r // b`` and zeros elsewhere, in one pass."""
        n_bh, n, d = x.shape
        b = self.b
        out = x.new_empty(total, n_bh, b, d)
        full = n // b
        out[:lead].zero_()
        torch.mul(x[:, : full * b].view(n_bh, full, b, d).transpose(0, 1), scale,
                  out=out[lead:lead + full])
        rest = n - full * b
        if rest:
            torch.mul(x[:, full * b:], scale, out=out[lead + full, :, :rest])
            out[lead + full, :, rest:].zero_()
        out[lead + full + (1 if rest else 0):].zero_()
        return out

    def blocks_q(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """``(BH, N_q, D)`` -> ``(nqb, BH, b, D)`` zero padded (and scaled)."""
        return self._blocked(x, 0, self.nqb, scale)

    def blocks_k(self, x: torch.Tensor) -> torch.Tensor:
        """``(BH, N_k, D)`` -> ``(pad_l + nkb + pad_r, BH, b, D)``: key block kb sits at
        index ``kb + pad_l``."""
        return self._blocked(x, self.pad_l, self.pad_l + self.nkb + self.pad_r)

    @staticmethod
    def unblock(x: torch.Tensor, n: int) -> torch.Tensor:
        """``(nb, BH, b, *rest)`` -> ``(BH, n, *rest)``."""
        x = x.transpose(0, 1)
        return x.reshape(x.shape[0], -1, *x.shape[3:])[:, :n]

    def key_slice(self, s0: int, c: int, g: int) -> slice:
        start = s0 + self.lo + g + self.pad_l
        return slice(start, start + c)

    def scores(self, qb, kb, s0, c, buf, shift: torch.Tensor | None = None):
        """Masked scores of a run, ``(G, C, BH, b, b)`` written into ``buf``; minus ``shift``
        ``(C * BH, b, 1)`` when given."""
        q = qb[s0:s0 + c].flatten(0, 1)                             # (C * BH, b, D)
        edge = self.is_edge(s0, c)
        for g in range(self.g):
            k = kb[self.key_slice(s0, c, g)].flatten(0, 1).transpose(-1, -2)   # (C * BH, D, b)
            out = buf[g].view(-1, self.b, self.b)
            bias = None if edge else self.slot_bias[g]
            if bias is None:
                torch.bmm(q, k, out=out)
            else:
                torch.baddbmm(bias.to(q.dtype), q, k, out=out)
        if shift is not None:
            # One pass over all slots: cheaper than fusing a broadcast shift into each matmul.
            buf.sub_(shift.view(1, *buf.shape[1:4], 1))
        if edge:
            keep = self.exact_keep(s0, c).transpose(0, 1)[:, :, None]  # (G, C, 1, b, b)
            buf.masked_fill_(~keep, float("-inf"))
        return buf

    def dropout_scale(self, n_bh: int, s0: int, c: int, dtype) -> torch.Tensor:
        """keep / (1 - p) for a run, ``(G, C, BH, b, b)``."""
        spec, b, dev = self.spec, self.b, self.spec.device
        g = torch.arange(self.g, device=dev).view(self.g, 1, 1, 1, 1)
        qb = torch.arange(s0, s0 + c, device=dev).view(1, c, 1, 1, 1)
        bh = torch.arange(n_bh, device=dev).view(1, 1, n_bh, 1, 1)
        rows = qb * b + torch.arange(b, device=dev).view(1, 1, 1, b, 1)
        cols = ((qb + self.lo + g) * b
                + torch.arange(b, device=dev).view(1, 1, 1, 1, b)).clamp_min(0)
        keep = keep_mask(spec.dropout_seed, spec.dropout_p, bh, rows, cols, spec.n_q, spec.n_k)
        return keep.to(dtype) / (1.0 - spec.dropout_p)


def applies(spec: AttentionSpec) -> bool:
    """A pure band, finite on both sides, and nothing else to mask (nor a softcap, which must
    come before the mask this path fuses into the score matmul). Grouped-query K/V are served
    with K and V repeated per query head (O(N D) more memory, none in N^2)."""
    return (spec.band is not None and None not in spec.band and spec.mask is None
            and spec.mask_fn is None and spec.softcap is None and spec.score_mod is None)


class BandAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec: AttentionSpec, block: int, run: int):
        # q (BH, N_q, D_k), k (BH, N_k, D_k), v (BH, N_k, D_v)
        band = Band(spec, block, run)
        n_bh, b, G = q.shape[0], band.b, band.g
        qb = band.blocks_q(q, spec.score_scale * LOG2E)                 # (nqb, BH, b, D_k)
        kb, vb = band.blocks_k(k), band.blocks_k(v)                     # (nkb', BH, b, D)
        # Outputs in their final layout; each run writes its (C, BH, b, .) slice strided.
        out = torch.empty(n_bh, band.nqb, b, spec.d_v, dtype=q.dtype, device=q.device)
        lse = torch.empty(n_bh, band.nqb, b, dtype=q.dtype, device=q.device)
        out_t, lse_t = out.transpose(0, 1), lse.transpose(0, 1)        # (nqb, BH, b, .) views
        # Softmax shift without a max pass: |q_i| * max_j |k_j| bounds every score of row i
        # (Cauchy-Schwarz), so exp never overflows, and subtracting it is fused into the score
        # matmul. A run whose row sums come out tiny (the bound far above the true max, or
        # rows with no key) is redone with the exact row max.
        # When every bound is at most 64 (log2 units) no shift is needed: exp2 stays in
        # [2^-64, 2^64] and the pass that subtracts it is saved.
        qnorm = qb.norm(dim=-1, keepdim=True)                           # (nqb, BH, b, 1)
        kmax = k.norm(dim=-1).amax(dim=-1).view(1, n_bh, 1, 1)          # (1, BH, 1, 1)
        small = float(qnorm.max()) * float(kmax.max()) <= 64.0 if qnorm.numel() else True
        bufs = {}
        for s0, c in band.runs():
            if c not in bufs:
                bufs[c] = torch.empty(G, c, n_bh, b, b, dtype=q.dtype, device=q.device)
            shift = (torch.zeros_like(qnorm[s0:s0 + c]) if small
                     else qnorm[s0:s0 + c] * kmax)                      # (C, BH, b, 1)
            p = band.scores(qb, kb, s0, c, bufs[c],
                            None if small else shift.flatten(0, 1)).exp2_()
            l = p.sum(dim=(0, 4))                                       # (C, BH, b)
            m = shift[None]                                             # (1, C, BH, b, 1)
            if bool((l < 1e-30).any()):
                s = band.scores(qb, kb, s0, c, bufs[c])                 # (G, C, BH, b, b)
                m = finite_or_zero(s.amax(dim=(0, 4), keepdim=True))    # (1, C, BH, b, 1)
                p = s.sub_(m).exp2_()
                l = p.sum(dim=(0, 4))
            if spec.dropout_p > 0:
                p.mul_(band.dropout_scale(n_bh, s0, c, p.dtype))
            o = p[0] @ vb[band.key_slice(s0, c, 0)]                     # (C, BH, b, D_v)
            o3 = o.view(-1, b, spec.d_v)
            for g in range(1, G):                                       # o += P_g V_g, fused
                o3.baddbmm_(p[g].flatten(0, 1), vb[band.key_slice(s0, c, g)].flatten(0, 1))
            empty = l == 0
            l_safe = torch.where(empty, torch.ones_like(l), l)
            lse_t[s0:s0 + c] = torch.where(empty, float("-inf"),
                                           (m[0, ..., 0] + torch.log2(l_safe)) * LN2)
            torch.div(o, l_safe.unsqueeze(-1), out=out_t[s0:s0 + c])
        out = out.view(n_bh, -1, spec.d_v)[:, : spec.n_q]
        lse = lse.view(n_bh, -1)[:, : spec.n_q]
        ctx.spec, ctx.block, ctx.run = spec, block, run
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        spec = ctx.spec
        band = Band(spec, ctx.block, ctx.run)
        n_bh, b, G, c_ = q.shape[0], band.b, band.g, spec.score_scale
        delta, lse_b = backward_terms(d_out, out, d_lse, lse)           # (BH, N_q) each
        qb = band.blocks_q(q, c_ * LOG2E)                               # (nqb, BH, b, D_k)
        kb, vb = band.blocks_k(k), band.blocks_k(v)
        dob = band.blocks_q(d_out.contiguous())                         # (nqb, BH, b, D_v)
        lseb = band.blocks_q(lse_b.unsqueeze(-1), LOG2E)                # (nqb, BH, b, 1)
        deltab = band.blocks_q(delta.unsqueeze(-1))                     # (nqb, BH, b, 1)
        dqb, dkb, dvb = torch.zeros_like(qb), torch.zeros_like(kb), torch.zeros_like(vb)
        bufs = {}
        for s0, c in band.runs():
            if c not in bufs:
                bufs[c] = torch.empty(G, c, n_bh, b, b, dtype=q.dtype, device=q.device)
            s = band.scores(qb, kb, s0, c, bufs[c])
            p = s.sub_(lseb[s0:s0 + c][None]).exp2_()                   # (G, C, BH, b, b)
            z = band.dropout_scale(n_bh, s0, c, p.dtype) if spec.dropout_p > 0 else None
            # (C * BH, b, .) views: plain bmm, and baddbmm_ accumulates in place (no temporary
            # per product, no 4-D matmul dispatch).
            do3 = dob[s0:s0 + c].flatten(0, 1)                           # (C*BH, b, D_v)
            q3 = qb[s0:s0 + c].flatten(0, 1)                             # (C*BH, b, D_k)
            dlt3 = deltab[s0:s0 + c].flatten(0, 1)                       # (C*BH, b, 1)
            dq3 = dqb[s0:s0 + c].flatten(0, 1)
            for g in range(G):
                ks = band.key_slice(s0, c, g)
                p3 = p[g].flatten(0, 1)                                  # (C*BH, b, b)
                dp = torch.bmm(do3, vb[ks].flatten(0, 1).transpose(1, 2))
                if z is not None:
                    z3 = z[g].flatten(0, 1)
                    dvb[ks].flatten(0, 1).baddbmm_((p3 * z3).transpose(1, 2), do3)
                    dp.mul_(z3)
                else:
                    dvb[ks].flatten(0, 1).baddbmm_(p3.transpose(1, 2), do3)
                ds = dp.sub_(dlt3).mul_(p3)
                dq3.baddbmm_(ds, kb[ks].flatten(0, 1))
                dkb[ks].flatten(0, 1).baddbmm_(ds.transpose(1, 2), q3)
        dq = band.unblock(dqb * c_, spec.n_q)
        dk = band.unblock(dkb[band.pad_l:] * LN2, spec.n_k)     # q carried log2 e: take it off
        dv = band.unblock(dvb[band.pad_l:], spec.n_k)
        return dq, dk, dv, None, None, None
