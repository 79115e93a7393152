r"""Ring attention: exact attention over a sequence sharded across processes.

Each of P ranks holds its queries, keys and values ``(B, H, N_local, D)``. The K/V shards travel
round the ring (rank r sends to r+1 and receives from r-1); at step t rank r holds the shard of
rank ``r - t`` and computes the partial result of its queries against it, ``(o_t, lse_t)``, with
any single-process backend. Partials merge with the core's one rule
(:func:`attnlab.core.softmax.merge_partials`, ``docs/math.md``)::

    lse = log(exp(lse_a) + exp(lse_b))      o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b

The next shard's transfer is started before the current one is computed, so communication
overlaps compute. Merging is done in float64 for float32 and float64 inputs (float32 for half
precision) and the output cast once at the end, so the error does not grow with P.

Backward (a custom autograd function, nothing of the forward's graph is kept). With the final
``(O, lse)`` saved, each partial's share is ``w_t = exp(lse_t - lse)`` and

    dL/do_t = w_t dO           dL/dlse_t = w_t (dO . (o_t - O) + dlse)

which for a flash-style tile backward is simply its usual backward run against the merged
``(O, lse)``: ``P = exp(S - lse)`` are the full softmax's entries in the shard's columns and
``D = dO . O - dlse`` is per row (:func:`attnlab.core.engine.eager.loop.block_backward`). dQ
stays home; dK and dV accumulate on accumulators that travel round the ring with their K/V shard
and are sent back to the owner at the end.

Masks are in **global** positions: ``causal`` and ``window`` are bottom-right aligned on the
whole sequences (query i sits at key ``i + N_k - N_q``), a mask function ``fn(b, h, q_idx,
kv_idx)`` is called with global indices, and ``key_mask (B, N_k_local)`` (True = a real key)
travels with its keys. Ring steps in which no rank sees a visible key (a window narrower than a
shard) are not taken at all.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.geometry import validate_window
from attnlab.core.softmax import NEG_INF
from attnlab.distributed import layout as L
from attnlab.distributed._checks import agree, check_local, checked_locally, masks_of
from attnlab.distributed._comm import Comm, guarded
from attnlab.distributed.blocks import (
    Options,
    acc_dtype,
    accumulate,
    band_of,
    block_dtype_for,
    block_grads,
    plan_steps,
)

_TAG_K, _TAG_V, _TAG_M, _TAG_DK, _TAG_DV, _TAG_HOME_K, _TAG_HOME_V = range(7)


@dataclass(frozen=True)
class Plan:
    """Every rank's global ranges and the number of ring rotations the masks need."""

    q_ranges: list
    k_ranges: list
    n_q_total: int
    n_k_total: int
    steps: int
    overlap: bool = True            # the backward's K/V travel while its blocks compute

def _exchange(comm: Comm, tensors, shapes_next, dtypes, tags):
    """Start sending ``tensors`` to the next rank and receiving the next shard from the
    previous one; returns (send handles, receive handles, receive buffers)."""
    nxt, prv = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    sends = [comm.isend(t, nxt, tag) for t, tag in zip(tensors, tags) if t is not None]
    bufs = [None if s is None else torch.empty(s, dtype=d, device=dev)
            for s, (d, dev) in zip(shapes_next, dtypes)]
    recvs = [comm.irecv(b, prv, tag) for b, tag in zip(bufs, tags) if b is not None]
    return sends, recvs, bufs


def _saved_out(acc_o: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(returned output, output kept for the backward)``: float32 / float64 inputs keep the
    returned tensor itself (no second copy); half precision keeps the float32 merge."""
    out = acc_o.to(dtype)
    return out, (acc_o if dtype in (torch.float16, torch.bfloat16) else out)


def _lse_out(acc_l: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return acc_l.to(torch.float64 if dtype == torch.float64 else torch.float32)


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_mask, comm: Comm, plan: Plan, opts: Options):
        r, world = comm.rank, comm.size
        acc = acc_dtype(q.dtype)
        b, h, n_q = q.shape[0], q.shape[1], q.shape[2]
        acc_o = torch.zeros(b, h, n_q, v.shape[-1], dtype=acc, device=q.device)
        acc_l = torch.full((b, h, n_q), NEG_INF, dtype=acc, device=q.device)
        held = (k.contiguous(), v.contiguous(), key_mask)
        for t in range(plan.steps + 1):
            comm.step = f"forward step {t} of {plan.steps}"
            src = (r - t) % world
            sends, recvs, bufs = [], [], None
            if t < plan.steps:
                n_next = sum(e - s for s, e in plan.k_ranges[(r - t - 1) % world])
                sends, recvs, bufs = _exchange(
                    comm, held, _kv_shapes(k, v, key_mask, n_next), _kv_dtypes(k, key_mask),
                    (_TAG_K, _TAG_V, _TAG_M))
            comm.work += accumulate(acc_o, acc_l, q, plan.q_ranges[r], held[0], held[1], held[2],
                                   plan.k_ranges[src], opts)
            comm.wait(recvs)
            comm.wait(sends)
            if bufs is not None:
                held = tuple(bufs)
        del held
        out, kept = _saved_out(acc_o, q.dtype)
        del acc_o
        ctx.comm, ctx.plan, ctx.opts = comm, plan, opts
        ctx.save_for_backward(q, k, v, key_mask, kept, acc_l)
        return out, _lse_out(acc_l, q.dtype)

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, key_mask, out, lse = ctx.saved_tensors
        comm, plan, opts = ctx.comm, ctx.plan, ctx.opts
        return guarded(comm, _ring_backward, comm, plan, opts, q, k, v, key_mask, out, lse,
                       d_out, d_lse) + (None, None, None, None)


def _kv_shapes(k, v, key_mask, n):
    return ((*k.shape[:2], n, k.shape[-1]), (*v.shape[:2], n, v.shape[-1]),
            None if key_mask is None else (key_mask.shape[0], n))


def _kv_dtypes(k, key_mask):
    return ((k.dtype, k.device), (k.dtype, k.device),
            (torch.bool, k.device) if key_mask is not None else (None, None))


def _cotangents(out, lse, d_out, d_lse):
    """dO (zeros when only the lse was used) and dlse (0 on rows that see nothing)."""
    d_out = torch.zeros_like(out) if d_out is None else d_out
    d_lse = None if d_lse is None else torch.where(torch.isneginf(lse), 0.0, d_lse.to(lse.dtype))
    return d_out, d_lse


def _ring_backward(comm: Comm, plan: Plan, opts: Options, q, k, v, key_mask, out, lse,
                   d_out, d_lse):
    """The ring again, backwards: K/V travel as in the forward; the dK/dV accumulators of each
    shard (float64 for float32 inputs) travel with it, every rank adding its blocks into the
    one it receives (no fresh buffer per step), and go home after the last step. Between two
    steps the accumulators are handed on one at a time (dK, then dV), so a rank never holds
    more than one and a half accumulator pairs; while it computes it holds dq, one pair, the
    shard it holds and the shard arriving."""
    r, world, steps = comm.rank, comm.size, plan.steps
    acc = lse.dtype
    d_out, d_lse = _cotangents(out, lse, d_out, d_lse)
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    held = (k.contiguous(), v.contiguous(), key_mask)
    prv, nxt = (r - 1) % world, (r + 1) % world
    grads = [torch.zeros(k.shape, dtype=acc, device=k.device),
             torch.zeros(v.shape, dtype=acc, device=v.device)]    # of the shard I hold
    for t in range(steps + 1):
        comm.step = f"backward step {t} of {steps}"
        src = (r - t) % world
        sends, recvs, bufs = [], [], None
        n_next = sum(e - s for s, e in plan.k_ranges[(r - t - 1) % world])
        shapes, dtypes = _kv_shapes(k, v, key_mask, n_next), _kv_dtypes(k, key_mask)
        tags = (_TAG_K, _TAG_V, _TAG_M)
        if t < steps and plan.overlap:
            sends, recvs, bufs = _exchange(comm, held, shapes, dtypes, tags)
        block_grads(q, plan.q_ranges[r], held[0], held[1], held[2], plan.k_ranges[src], opts,
                    out, lse, d_out, d_lse, dq, grads[0], grads[1])
        comm.wait(recvs)
        comm.wait(sends)
        held = tuple(bufs) if bufs is not None else held   # the shard I held is sent: freed
        if t < steps and not plan.overlap:
            # after the blocks, one tensor at a time: never a whole second shard in memory
            held = list(held)
            for i in range(3):
                one = [None] * 3
                one[i] = held[i]
                sends, recvs, bufs = _exchange(comm, one, [shapes[j] if j == i else None
                                                           for j in range(3)], dtypes, tags)
                comm.wait(recvs)
                comm.wait(sends)
                held[i] = bufs[i]
            held = tuple(held)
        if t < steps:
            # hand my accumulators on and take the ones of the shard now held, one at a time
            n_in = held[0].shape[-2]
            for i, (tag, like) in enumerate(((_TAG_DK, k), (_TAG_DV, v))):
                incoming = torch.empty((*like.shape[:2], n_in, like.shape[-1]), dtype=acc,
                                       device=like.device)
                comm.wait([comm.irecv(incoming, prv, tag), comm.isend(grads[i], nxt, tag)])
                grads[i] = incoming
    del held
    if steps > 0:
        # the accumulators go to their owner (rank src); mine come from their last holder
        comm.step = "backward: dK/dV coming home"
        holder, owner = (r + steps) % world, (r - steps) % world
        for i, (tag, like) in enumerate(((_TAG_HOME_K, k), (_TAG_HOME_V, v))):
            mine = torch.empty(like.shape, dtype=acc, device=like.device)
            comm.wait([comm.irecv(mine, holder, tag), comm.isend(grads[i], owner, tag)])
            grads[i] = mine
    stats = getattr(comm, "stats", None)
    if stats is not None:               # the backward's share, after the forward's
        stats.update(backward_sent_bytes=comm.sent_bytes - stats.get("sent_bytes", 0),
                     backward_wait_s=comm.wait_s - stats.get("wait_s", 0.0))
    dk, dv = grads
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, group=None,
                   causal: bool = False, window=None, mask=None,
                   key_mask: torch.Tensor | None = None, scale: float | None = None,
                   softcap: float | None = None, layout: str = "contiguous",
                   backend: str = "tiled", block_dtype: torch.dtype | None = None,
                   timeout: float | None = None, return_lse: bool = False,
                   stats: dict | None = None, overlap: bool = True):
    """Exact attention of this rank's queries over the keys of every rank in ``group``.

    Args:
        q: this rank's queries ``(B, H, N_q_local, D)``.
        k, v: this rank's keys and values ``(B, H_kv, N_k_local, D)`` / ``(..., D_v)``; ``H``
            a multiple of ``H_kv`` is grouped-query attention.
        group: the process group (default: the world).
        causal, window: as :func:`attnlab.attention`, on the whole sequences.
        mask: a mask function ``fn(b, h, q_idx, kv_idx)`` of global positions, or a tensor
            that masks this rank's keys only (``(B, 1, 1, N_k_local)``, bool or 0 / -inf; it
            becomes ``key_mask``), or None.
        key_mask: ``(B, N_k_local)`` bool, True for real keys (padding), or None.
        scale, softcap: as :func:`attnlab.attention`.
        layout: ``"contiguous"`` (rank order, any lengths) or ``"zigzag"`` (see
            :mod:`attnlab.distributed.layout`): which global rows each local shard holds.
        backend: the single-process backend of each block's forward (it must return lse;
            default ``"tiled"``, whose memory is one tile: ``"auto"`` may pick the reference
            for mid-sized blocks, which builds the block's score matrix). The backward always
            runs the tiled kernels' block backward.
        block_dtype: the dtype each block is computed in; default float32 for float16 /
            bfloat16 inputs (the shards travel in their own dtype). A block's output rounded to
            half precision before the merge has an error that grows with P (its values are
            averages over fewer keys); pass ``block_dtype=q.dtype`` to trade that for speed
            (docs/distributed.md has the measurement).
        timeout: seconds any one wait may take (default 300) before :class:`RankFailure`.
        return_lse: also return this rank's lse ``(B, H, N_q_local)``.
        stats: a dict that receives ``steps`` (ring rotations), ``work`` (pairs computed),
            ``sent_bytes`` and ``wait_s`` (time blocked on communication) of the forward, and
            after the backward ``backward_sent_bytes`` / ``backward_wait_s``.
        overlap: the backward receives the next K/V shard while it computes (default). False
            passes K, V and the key mask on one at a time after the blocks: the transfer no
            longer hides behind the compute, and a rank never holds a second whole shard
            (docs/distributed.md §6 has the memory both ways).

    Returns:
        ``out (B, H, N_q_local, D_v)``, or ``(out, lse)``.
    """
    mask, key_mask = checked_locally(q, k, v, key_mask, mask, scale, softcap, group)
    comm = Comm(group, timeout, "ring_attention")
    return guarded(comm, _ring_call, comm, q, k, v, causal, window, mask, key_mask, scale,
                   softcap, layout, backend, block_dtype, return_lse, stats, overlap)


def _ring_call(comm, q, k, v, causal, window, mask, key_mask, scale, softcap, layout, backend,
               block_dtype, return_lse, stats, overlap=True):
    L.check_layout(layout)
    band_given = validate_window(window)
    band = band_of(causal, window)
    lengths = agree(comm, q, k, v, key_mask, mask, causal, band_given, layout, scale, softcap,
                    "ring_attention")
    q_ranges = L.ranges_of(layout, [a for a, _ in lengths], "the queries")
    k_ranges = L.ranges_of(layout, [b for _, b in lengths], "the keys")
    n_q_total, n_k_total = sum(a for a, _ in lengths), sum(b for _, b in lengths)
    offset = n_k_total - n_q_total
    steps = plan_steps(q_ranges, k_ranges, band, offset, mask)
    plan = Plan(q_ranges, k_ranges, n_q_total, n_k_total, steps, bool(overlap))
    opts = Options(band, offset, mask, scale, softcap, q.shape[1] != k.shape[1], backend,
                   block_dtype_for(q.dtype, block_dtype))
    comm.stats = stats
    out, lse = _Ring.apply(q, k, v, key_mask, comm, plan, opts)
    if stats is not None:
        stats.update(steps=steps, work=comm.work, sent_bytes=comm.sent_bytes,
                     wait_s=comm.wait_s, world_size=comm.size)
    return (out, lse) if return_lse else out


def simulate_ring(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world_size: int, *,
                  causal: bool = False, window=None, mask=None,
                  key_mask: torch.Tensor | None = None, scale: float | None = None,
                  softcap: float | None = None, layout: str = "contiguous",
                  backend: str = "tiled", block_dtype: torch.dtype | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The ring's arithmetic for ``world_size`` ranks in one process, on whole sequences
    ``(B, H, N, D)``: each rank's shard is cut as :func:`~attnlab.distributed.shard` does, its
    blocks are computed and merged in the ring's order and dtypes. Returns the reassembled
    ``(out, lse)`` and every rank's work (pairs computed). ``out`` and ``lse`` are
    differentiable: their backward is the ring's, step by step (dq accumulated per rank, each
    shard's dK/dV accumulator visiting its ranks in ring order). For measuring how the error
    behaves with more ranks than a machine can run."""
    check_local(q, k, v, key_mask, mask, scale, softcap)
    L.check_layout(layout)
    mask, key_mask = masks_of(mask, key_mask, k)
    band = band_of(causal, window)
    q_ranges = L.shard_ranges(q.shape[2], world_size, layout)
    k_ranges = L.shard_ranges(k.shape[2], world_size, layout)
    offset = k.shape[2] - q.shape[2]
    opts = Options(band, offset, mask, scale, softcap, q.shape[1] != k.shape[1], backend,
                   block_dtype_for(q.dtype, block_dtype))
    steps = plan_steps(q_ranges, k_ranges, band, offset, mask)
    plan = Plan(q_ranges, k_ranges, q.shape[2], k.shape[2], steps)
    work: list[int] = []
    out, lse = _SimRing.apply(q, k, v, key_mask, world_size, plan, opts, work)
    return out, lse, work


class _SimRing(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_mask, world, plan: Plan, opts: Options, work: list):
        acc = acc_dtype(q.dtype)
        outs, kept, lses = [], [], []
        for r in range(world):
            q_r = L.take(q, plan.q_ranges[r])
            acc_o = torch.zeros(*q_r.shape[:3], v.shape[-1], dtype=acc, device=q.device)
            acc_l = torch.full(q_r.shape[:3], NEG_INF, dtype=acc, device=q.device)
            w = 0
            for t in range(plan.steps + 1):
                kr = plan.k_ranges[(r - t) % world]
                w += accumulate(acc_o, acc_l, q_r, plan.q_ranges[r], L.take(k, kr),
                                L.take(v, kr), _keys(key_mask, kr), kr, opts)
            o, o_kept = _saved_out(acc_o, q.dtype)
            outs.append(o)
            kept.append(o_kept)
            lses.append(acc_l)
            work.append(w)
        ctx.world, ctx.plan, ctx.opts = world, plan, opts
        ctx.kept, ctx.lses = kept, lses
        ctx.save_for_backward(q, k, v, key_mask)
        out = _whole(outs, plan.q_ranges, q.shape[2], -2)
        lse = _whole([_lse_out(x, q.dtype) for x in lses], plan.q_ranges, q.shape[2], -1)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, key_mask = ctx.saved_tensors
        world, plan, opts = ctx.world, ctx.plan, ctx.opts
        acc = ctx.lses[0].dtype
        dks = [torch.zeros((*k.shape[:2], _n(kr), k.shape[-1]), dtype=acc, device=k.device)
               for kr in plan.k_ranges]
        dvs = [torch.zeros((*v.shape[:2], _n(kr), v.shape[-1]), dtype=acc, device=v.device)
               for kr in plan.k_ranges]
        dq_r = [torch.zeros((*q.shape[:2], _n(qr), q.shape[-1]), dtype=acc, device=q.device)
                for qr in plan.q_ranges]
        cots = []
        for r in range(world):
            qr = plan.q_ranges[r]
            do = None if d_out is None else L.take(d_out, qr)
            dl = None if d_lse is None else L.take(d_lse, qr, dim=-1)
            cots.append(_cotangents(ctx.kept[r], ctx.lses[r], do, dl))
        for t in range(plan.steps + 1):          # ring order: each accumulator visits its
            for r in range(world):               # holders one after the other
                src = (r - t) % world
                kr = plan.k_ranges[src]
                block_grads(L.take(q, plan.q_ranges[r]), plan.q_ranges[r], L.take(k, kr),
                            L.take(v, kr), _keys(key_mask, kr), kr, opts, ctx.kept[r],
                            ctx.lses[r], cots[r][0], cots[r][1], dq_r[r], dks[src], dvs[src])
        dq = _whole(dq_r, plan.q_ranges, q.shape[2], -2)
        dk = _whole(dks, plan.k_ranges, k.shape[2], -2)
        dv = _whole(dvs, plan.k_ranges, v.shape[2], -2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def _n(ranges) -> int:
    return sum(b - a for a, b in ranges)


def _keys(key_mask, ranges):
    return None if key_mask is None else L.take(key_mask, ranges, dim=-1)


def _whole(parts: list, ranges: list, n: int, dim: int) -> torch.Tensor:
    """Every rank's rows put back in global order along ``dim``."""
    shape = list(parts[0].shape)
    shape[dim] = n
    whole = parts[0].new_empty(shape)
    for part, rr in zip(parts, ranges):
        for l0, l1, g0, g1 in L.local_slices(rr):
            whole.narrow(dim, g0, g1 - g0).copy_(part.narrow(dim, l0, l1 - l0))
    return whole
