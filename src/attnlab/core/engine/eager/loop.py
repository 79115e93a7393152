"""The eager tile loop: the reference the compiled loop is tested against, and the path of every
call it does not take (a tensor mask, dropout, float64, modifiers of more than ``q_idx - kv_idx``).

Forward. For each block of queries, walk the key blocks; each tile gives a partial result
``(o_b, m_b, r_b)`` (its normalized output, its row shift and ``r_b = log sum exp(s - m_b)``)
and :func:`~attnlab.core.softmax.merge_split` folds it into the running one. No N_q x N_k
tensor exists beyond one ``(BH, block_q, block_k)`` tile. Tiles that the causal or window band
excludes are never computed, tiles the band covers entirely are not masked, and a partial
tile's band mask comes from the positions (:func:`~attnlab.core.geometry.tile_keep`).

Backward. Only q, k, v, the output and the two parts of lse ``(m, r)`` are saved. Each tile's
probabilities are recomputed exactly, and with ``D_i = sum_d dO_id O_id``::

    dV += P^T dO        dP = dO V^T        dS = P * (dP - D + dlse)
    dQ += dS K * c      dK += dS^T Q * c   d(float mask) += dS   (c = scale / temperature)

``dlse`` is the gradient flowing into the returned lse, so lse can itself be used in a loss or
in a later merge. ``P = exp(S - m - r)`` subtracts the two parts one after the other: on a row
whose every score carries a huge additive mask (``finfo.min``, -1e9: left padding) ``m`` is
huge, and ``m + r`` would lose ``r`` and make P too large by the row's length. There
``P = exp(S - m) * exp(-r)``, with ``exp(-r)`` folded into ``dO`` and ``D`` (no extra pass over
the tile). Fully masked rows have ``lse = -inf`` and P = 0. The gradient of a float mask is
each tile's dS summed over the mask's broadcast dims (T5's learned position bias trains here).

:func:`block_backward` is the backward of one block of keys that is part of a larger softmax
(ring attention in :mod:`attnlab.distributed` adds every block's gradients this way).
"""

from __future__ import annotations

import contextlib
import math

import torch

from attnlab.core.engine.tiles import LOG2E, RELEVANCE, Tiles, base2, key_blocks, sizes
from attnlab.core.geometry import tile_of
from attnlab.core.score_mod import TileGrad
from attnlab.core.softmax import finite_or_zero, merge_split
from attnlab.core.spec import AttentionSpec, compute_dtype

__all__ = ["tile_forward", "tile_backward", "block_backward", "collect_relevance"]


@contextlib.contextmanager
def collect_relevance():
    """Inside the block, every tile backward of attention (on the eager loop: the compiled one
    stands aside) appends to the yielded list each key's relevance per head, ``(BH, N_k)``
    float64: ``sum_i (P_ij dP_ij)+`` over the queries, with ``dP = dO V^T`` the gradient of
    the weights (Chefer et al. 2021's gradient-weighted attention, summed over the rows), formed
    tile by tile where the backward forms ``P`` and ``dP``: no N x N map. Calls come in the
    backward's order (the last layer first). Dropout is refused."""
    found: list = []
    token = RELEVANCE.set(found)
    try:
        yield found
    finally:
        RELEVANCE.reset(token)

# Rows whose shift is above this (in log2 units) keep m and r apart in the backward.
_HUGE = 2.0 ** 20


def tile_forward(q, k, v, spec: AttentionSpec, bias):
    """``(out (BH, N_q, D_v), m, r (BH, N_q))``: lse = m + r in the call's units (log2 units
    when ``base2(spec)``).
    q (BH, N_q, D_k), k (BKV, N_k, D_k), v (BKV, N_k, D_v), all in the compute dtype."""
    n_bh = q.shape[0]
    block_q, block_k = sizes()
    tiles = Tiles(spec, n_bh, bias)
    q_s = tiles.q_scaled(q)
    out = torch.zeros(n_bh, spec.n_q, spec.d_v, dtype=q.dtype, device=q.device)
    m_all = torch.full((n_bh, spec.n_q), float("-inf"), dtype=q.dtype, device=q.device)
    r_all = torch.full((n_bh, spec.n_q), float("-inf"), dtype=q.dtype, device=q.device)
    # Softmax shift without a max pass (as in the band path of blocksparse): without an
    # additive bias, |q_i| * max_j |k_j| bounds every score of row i, so exp cannot overflow;
    # a tile whose row sums fall below 1e-30 is redone with the exact row max. Only tiles
    # that mask nothing use it: in a masked tile, rows with no kept key sum to 0 anyway, and
    # telling them apart costs more than the max pass it saves (measured).
    # With a softcap c the capped scores lie in (-c, c): c itself is the shift, and for
    # c <= 34 every exp(s - c) >= e^-68 keeps a row sum above the 1e-30 fallback threshold.
    bound = (bias is None and spec.mask is None and spec.mask_fn is None
             and spec.score_mod is None and (spec.softcap is None or spec.softcap <= 34.0))
    qnorm = kmax = None
    if tiles.plain:                     # scores are q.k only: |q_i| max_j |k_j| bounds row i
        qnorm = q_s.norm(dim=-1, keepdim=True)                       # (BH, N_q, 1)
        kmax = k.norm(dim=-1).amax(dim=-1).repeat_interleave(spec.kv_groups).view(
            n_bh, 1, 1)                                               # (BH, 1, 1)
    elif bound:                         # capped scores lie in (-c, c), in log2 units c log2 e
        cap = torch.full((n_bh, 1, 1), spec.softcap * LOG2E, dtype=q.dtype, device=q.device)
    for i0 in range(0, spec.n_q, block_q):
        i1 = min(i0 + block_q, spec.n_q)
        bound_rows = (qnorm[:, i0:i1] * kmax if qnorm is not None
                      else cap.expand(n_bh, i1 - i0, 1) if bound else None)   # (BH, bq, 1)
        # Where every |score| of the block is at most 64 (log2 units), no shift is needed at
        # all: exp2 stays in [2^-64, 2^64], and a row's sum is 0 only if it keeps no key. The
        # block then sums P V and P 1 straight into its accumulators and divides once at the
        # end: no max pass, no shift, no merges (unit-scale q and k at D = 64 bound near 15).
        if bound_rows is not None and tiles.base2 and float(bound_rows.max()) <= 64.0:
            _block_unshifted(tiles, q_s, k, v, i0, i1, block_k, out, m_all, r_all)
            continue
        shift = bound_rows if bound else None
        o_acc, m_acc, r_acc = out[:, i0:i1], m_all[:, i0:i1], r_all[:, i0:i1]
        for j0, j1, kind in key_blocks(spec, i0, i1, block_k):
            use_shift = bound and kind == "full"
            s = tiles.scores(q_s, k, i0, i1, j0, j1, kind, shift if use_shift else None)
            if s is None:
                continue
            if use_shift:
                m = shift
                p = tiles.exp_(s)
                l = p.sum(dim=-1)
                if bool((l < 1e-30).any()):                         # bound far too loose
                    s = tiles.scores(q_s, k, i0, i1, j0, j1, kind)
                    use_shift = False
            if not use_shift:
                m = finite_or_zero(s.amax(dim=-1, keepdim=True))   # (BH, bq, 1)
                p = tiles.exp_(s.sub_(m))                           # (BH, bq, bk), in place
                l = p.sum(dim=-1)                                   # (BH, bq)
            if spec.dropout_p > 0:
                p.mul_(tiles.dropout_scale(i0, i1, j0, j1, p.dtype))
            empty = l == 0
            l_safe = torch.where(empty, torch.ones_like(l), l)
            o_blk = tiles.mm(p, v[:, j0:j1]) / l_safe.unsqueeze(-1)    # (BH, bq, D_v)
            r_blk = torch.where(empty, float("-inf"), tiles.log(l_safe))
            o_acc, m_acc, r_acc = merge_split(o_acc, m_acc, r_acc, o_blk, m.squeeze(-1), r_blk,
                                              base2=tiles.base2)
        out[:, i0:i1], m_all[:, i0:i1], r_all[:, i0:i1] = o_acc, m_acc, r_acc
    return out, m_all, r_all


def _block_unshifted(tiles: Tiles, q_s, k, v, i0: int, i1: int, block_k: int, out, m_all,
                     r_all) -> None:
    """Query rows ``i0 .. i1-1`` with shift 0 (every score bounded by 64 in log2 units):
    ``out = (sum_j P_j V_j) / (sum_j P_j 1)``, ``m = 0``, ``r = log2 sum``; written in place."""
    spec = tiles.spec
    acc = torch.zeros(out.shape[0], i1 - i0, out.shape[2], dtype=out.dtype,
                      device=out.device)                                # (BH, bq, D_v)
    total = torch.zeros(acc.shape[:2], dtype=acc.dtype, device=acc.device)   # (BH, bq)
    for j0, j1, kind in key_blocks(spec, i0, i1, block_k):
        s = tiles.scores(q_s, k, i0, i1, j0, j1, kind)
        if s is None:
            continue
        p = tiles.exp_(s)                                             # (BH, bq, bk)
        total += p.sum(dim=-1)                     # before dropout: it drops weights, not mass
        if spec.dropout_p > 0:
            p.mul_(tiles.dropout_scale(i0, i1, j0, j1, p.dtype))
        if tiles.g == 1:
            acc.baddbmm_(p, v[:, j0:j1])
        else:
            acc += tiles.mm(p, v[:, j0:j1])
    empty = total == 0
    torch.div(acc, torch.where(empty, torch.ones_like(total), total).unsqueeze(-1),
              out=out[:, i0:i1])
    m_all[:, i0:i1] = torch.where(empty, float("-inf"), 0.0)
    r_all[:, i0:i1] = torch.where(empty, float("-inf"), tiles.log(total))


def tile_backward(q, k, v, out, m, r, d_out, d_lse, spec: AttentionSpec, bias=None,
                  need_bias_grad: bool = False, into=None):
    """The tile backward of one call: ``(dq, dk, dv, d_bias, captured_grads)``.

    ``into``: ``(dq, dk, dv)`` buffers shaped like q, k, v (any float dtype, e.g. float64
    accumulators) that this call's gradients are **added** to, tile by tile; they are returned.
    No gradient-sized temporary is made then (ring attention's backward adds every block into
    the accumulators that travel with their shard).

    Shapes as in the forward (``(BH, N, D)``, k and v ``(BKV, N_k, D)``, compute dtype);
    ``(m, r)`` the row's lse in two parts, as :func:`_forward` returns them (log2 units when
    ``base2(spec)``). ``out`` and
    ``(m, r)`` may be those of a **larger** softmax of which these keys are a part (ring
    attention, :func:`block_backward`): ``P = exp(S - lse)`` for these keys are exactly the
    whole softmax's entries in these columns, and ``D = dO . O - dlse`` is a per-row constant,
    so the gradients of blocks computed apart sum to the gradients of the whole.
    """
    block_q, block_k = sizes()
    tiles = Tiles(spec, q.shape[0], bias)
    captured_grads: list = [None] * len(spec.captured)
    if spec.score_mod is not None:
        tiles.mod_grad = TileGrad(spec.score_mod, list(spec.captured), captured_grads)
    c = spec.score_scale
    q_s = tiles.q_scaled(q)
    d_out = d_out.contiguous()
    # D_i = dO_i . O_i equals sum_j P_ij dP_ij (with dropout folded in), the softmax Jacobian term.
    delta = torch.einsum("bnd,bnd->bn", d_out, out)        # (BH, N_q), no (BH, N, D) product
    if d_lse is not None:
        delta = delta - d_lse
    empty = torch.isneginf(r)
    # Rows with a moderate shift subtract m + r in one pass, as the plain formula; rows whose
    # shift is huge subtract m only and carry exp(-r) in w (folded into dO and D).
    split = (m.abs() > _HUGE) & ~empty
    if bool(split.any()):
        shift = torch.where(split, m, m + r)
        w = torch.where(split, tiles.exp(-r), torch.ones_like(r))
        d_out = d_out * w.unsqueeze(-1)
        delta = delta * w
    else:
        shift = m + r
    shift = torch.where(empty, float("inf"), shift)                       # P = 0 on empty rows
    if into is None:
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    else:
        dq, dk, dv = into
    d_bias = torch.zeros(bias.shape, dtype=q.dtype, device=q.device) if need_bias_grad else None
    relevance = RELEVANCE.get()
    if relevance is not None:
        if spec.dropout_p > 0:
            raise ValueError("collect_relevance() takes attention without dropout (the "
                             "relevance is of the weights the model uses): evaluate with "
                             "model.eval()")
        relevance.append(torch.zeros(q.shape[0], spec.n_k, dtype=torch.float64,
                                     device=q.device))
    for i0 in range(0, spec.n_q, block_q):
        i1 = min(i0 + block_q, spec.n_q)
        do_blk = d_out[:, i0:i1]                                          # (BH, bq, D_v)
        for j0, j1, kind in key_blocks(spec, i0, i1, block_k):
            s, (dcap, mod) = tiles.scores(q_s, k, i0, i1, j0, j1, kind,
                                          shift=shift[:, i0:i1, None], cap_grad=True)
            if s is None:
                continue
            p = tiles.exp_(s)                                             # (BH, bq, bk)
            dp = tiles.qk(do_blk, v[:, j0:j1], out=tiles.buffer("dp", p.shape, p))
            if relevance is not None:                                     # (P dP)+ per key
                relevance[-1][:, j0:j1] += (p * dp).clamp_min(0).sum(1).double()
            if spec.dropout_p > 0:
                z = tiles.dropout_scale(i0, i1, j0, j1, p.dtype)
                dv[:, j0:j1] += tiles.tmm(p * z, do_blk)
                dp.mul_(z)
            else:
                dv[:, j0:j1] += tiles.tmm(p, do_blk)                      # (BKV, bk, D_v)
            ds = dp.sub_(delta[:, i0:i1, None]).mul_(p)                   # (BH, bq, bk)
            if d_bias is not None:                                        # d(bias) = dS
                tile = tile_of(d_bias, (i0, i1), (j0, j1))
                tile += ds.view(*spec.batch_shape, i1 - i0, j1 - j0).sum_to_size(tile.shape)
            if mod is not None:                                           # through score_mod
                ds = tiles.mod_grad.backward(mod, ds)
            if dcap is not None:
                ds.mul_(dcap)                                             # through c tanh(s / c)
            if into is not None:
                ds.mul_(c)                               # the scale per tile: no scaled copy
            dq[:, i0:i1] += tiles.mm(ds, k[:, j0:j1])
            dk[:, j0:j1] += tiles.tmm(ds, q[:, i0:i1])
    if into is not None:
        return dq, dk, dv, d_bias, captured_grads
    return dq * c, dk * c, dv, d_bias, captured_grads


def block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, d_out: torch.Tensor, d_lse: torch.Tensor | None,
                   spec: AttentionSpec, into=None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of one block of keys that is part of a larger softmax.

    ``out`` and ``lse`` are the **whole** row's result (over every key, not only this block's),
    ``d_out`` / ``d_lse`` their cotangents; see :func:`tile_backward`. ``spec`` describes the
    block (``build_spec`` of its q, k, v and masks); q ``(..., N_q, D_k)``, k, v
    ``(..., N_k, ·)``, out ``(..., N_q, D_v)``, lse ``(..., N_q)``. ``into``: ``(dq, dk, dv)``
    shaped like q, k, v (views of larger accumulators, any float dtype) to add the gradients
    to in place instead of returning new ones.
    """
    compute = compute_dtype(q.dtype)
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
    m = lf * LOG2E if base2(spec) else lf                          # one part: r = 0
    r = torch.where(torch.isneginf(lf), lf, torch.zeros_like(lf))
    flat_into = None
    if into is not None:
        flat_into = tuple(t.view(n, *t.shape[-2:])
                          for t, n in zip(into, (n_bh, n_kv, n_kv)))
    dq, dk, dv = tile_backward(qf, kf, vf, of, m, r, dof, dlf, spec, spec.float_bias(),
                               into=flat_into)[:3]
    if into is not None:
        return tuple(into)
    return (dq.view(*spec.batch_shape, spec.n_q, spec.d_k),
            dk.view(*spec.kv_batch_shape, spec.n_k, spec.d_k),
            dv.view(*spec.kv_batch_shape, spec.n_k, spec.d_v))
