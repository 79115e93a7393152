r"""Ring attention: exact attention over a sequence sharded across processes.

Each of P ranks holds its queries, keys and values ``(B, H, N_local, D)``. The K/V shards travel
round the ring (rank r sends to r+1 and receives from r-1); at step t rank r holds the shard of
rank ``r - t`` and computes the partial result of its queries against it, ``(o_t, lse_t)``, with
any single-process backend. Partials merge with the core's one rule
(:func:`attnlab.core.softmax.merge_partials`, ``docs/math.md``)::

    lse = log(exp(lse_a) + exp(lse_b))      o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b

The next shard's transfer is started before the current one is computed, so communication
overlaps compute. Merging is done in float32 (float64 for float64 inputs) whatever the input
dtype and cast once at the end, so the error does not grow with P.

Backward (a custom autograd function, nothing of the forward's graph is kept). With the final
``(O, lse)`` saved, each partial's share is ``w_t = exp(lse_t - lse)`` and

    dL/do_t = w_t dO           dL/dlse_t = w_t (dO . (o_t - O) + dlse)

which for a flash-style tile backward is simply its usual backward run against the merged
``(O, lse)``: ``P = exp(S - lse)`` are the full softmax's entries in the shard's columns and
``D = dO . O - dlse`` is per row (:func:`attnlab.core.backends.tiled.block_backward`). dQ
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

from attnlab.core._geometry import validate_window
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

def _exchange(comm: Comm, tensors, shapes_next, dtypes, tags):
    """Start sending ``tensors`` to the next rank and receiving the next shard from the
    previous one; returns (send handles, receive handles, receive buffers)."""
    nxt, prv = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    sends = [comm.isend(t, nxt, tag) for t, tag in zip(tensors, tags) if t is not None]
    bufs = [None if s is None else torch.empty(s, dtype=d, device=dev)
            for s, (d, dev) in zip(shapes_next, dtypes)]
    recvs = [comm.irecv(b, prv, tag) for b, tag in zip(bufs, tags) if b is not None]
    return sends, recvs, bufs


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
        ctx.comm, ctx.plan, ctx.opts = comm, plan, opts
        ctx.save_for_backward(q, k, v, key_mask, acc_o, acc_l)
        return acc_o.to(q.dtype), acc_l.to(q.dtype if q.dtype == torch.float64 else torch.float32)

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


def _ring_backward(comm: Comm, plan: Plan, opts: Options, q, k, v, key_mask, out, lse,
                   d_out, d_lse):
    r, world, steps = comm.rank, comm.size, plan.steps
    acc = out.dtype
    d_out = torch.zeros_like(out) if d_out is None else d_out.to(acc)
    d_lse = None if d_lse is None else torch.where(torch.isneginf(lse), 0.0, d_lse.to(acc))
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    held = (k.contiguous(), v.contiguous(), key_mask)
    pending_sends = []
    dk_acc = dv_acc = None
    for t in range(steps + 1):
        comm.step = f"backward step {t} of {steps}"
        src = (r - t) % world
        sends, recvs, bufs = [], [], None
        if t < steps:
            n_next = sum(e - s for s, e in plan.k_ranges[(r - t - 1) % world])
            sends, recvs, bufs = _exchange(comm, held, _kv_shapes(k, v, key_mask, n_next),
                                           _kv_dtypes(k, key_mask), (_TAG_K, _TAG_V, _TAG_M))
        incoming = []
        if t > 0:
            n_src = held[0].shape[-2]
            in_k = torch.empty((*k.shape[:2], n_src, k.shape[-1]), dtype=acc, device=k.device)
            in_v = torch.empty((*v.shape[:2], n_src, v.shape[-1]), dtype=acc, device=v.device)
            prv = (r - 1) % world
            incoming = [comm.irecv(in_k, prv, _TAG_DK), comm.irecv(in_v, prv, _TAG_DV)]
        comm.wait(pending_sends)         # the last step's accumulators have left: free them
        pending_sends = []
        _, gk, gv = block_grads(q, plan.q_ranges[r], held[0], held[1], held[2],
                                plan.k_ranges[src], opts, out, lse, d_out, d_lse, dq=dq)
        if incoming:
            comm.wait(incoming)
            gk, gv = in_k.add_(gk), in_v.add_(gv)   # in place: no third shard-sized buffer
        if t < steps:
            nxt = (r + 1) % world
            pending_sends = [comm.isend(gk, nxt, _TAG_DK), comm.isend(gv, nxt, _TAG_DV)]
        elif steps > 0:
            pending_sends = [comm.isend(gk, src, _TAG_HOME_K), comm.isend(gv, src, _TAG_HOME_V)]
        else:
            dk_acc, dv_acc = gk, gv
        comm.wait(recvs)
        comm.wait(sends)
        if bufs is not None:
            held = tuple(bufs)
    if steps > 0:
        # my accumulators come back from their last holder; posted only now, so that their
        # buffers do not exist while the blocks are computed (the holder's send waits for it)
        comm.step = "backward: dK/dV coming home"
        dk_acc = torch.empty(k.shape, dtype=acc, device=k.device)
        dv_acc = torch.empty(v.shape, dtype=acc, device=v.device)
        holder = (r + steps) % world
        comm.wait([comm.irecv(dk_acc, holder, _TAG_HOME_K),
                   comm.irecv(dv_acc, holder, _TAG_HOME_V)])
    comm.wait(pending_sends)
    stats = getattr(comm, "stats", None)
    if stats is not None:               # the backward's share, after the forward's
        stats.update(backward_sent_bytes=comm.sent_bytes - stats.get("sent_bytes", 0),
                     backward_wait_s=comm.wait_s - stats.get("wait_s", 0.0))
    return dq.to(q.dtype), dk_acc.to(k.dtype), dv_acc.to(v.dtype)

def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, group=None,
                   causal: bool = False, window=None, mask=None,
                   key_mask: torch.Tensor | None = None, scale: float | None = None,
                   softcap: float | None = None, layout: str = "contiguous",
                   backend: str = "tiled", block_dtype: torch.dtype | None = None,
                   timeout: float | None = None, return_lse: bool = False,
                   stats: dict | None = None):
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

    Returns:
        ``out (B, H, N_q_local, D_v)``, or ``(out, lse)``.
    """
    mask, key_mask = checked_locally(q, k, v, key_mask, mask, scale, softcap)
    comm = Comm(group, timeout, "ring_attention")
    return guarded(comm, _ring_call, comm, q, k, v, causal, window, mask, key_mask, scale,
                   softcap, layout, backend, block_dtype, return_lse, stats)


def _ring_call(comm, q, k, v, causal, window, mask, key_mask, scale, softcap, layout, backend,
               block_dtype, return_lse, stats):
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
    plan = Plan(q_ranges, k_ranges, n_q_total, n_k_total, steps)
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
    """The ring's forward arithmetic for ``world_size`` ranks in one process, on whole
    sequences ``(B, H, N, D)``: each rank's shard is cut as :func:`~attnlab.distributed.shard`
    does, its blocks are computed and merged in the ring's order and dtype. Returns the
    reassembled ``(out, lse)`` and every rank's work (pairs computed). For measuring how the
    error behaves with more ranks than a machine can run."""
    check_local(q, k, v, key_mask, mask, scale, softcap)
    mask, key_mask = masks_of(mask, key_mask, k)
    band = band_of(causal, window)
    q_ranges = L.shard_ranges(q.shape[2], world_size, layout)
    k_ranges = L.shard_ranges(k.shape[2], world_size, layout)
    offset = k.shape[2] - q.shape[2]
    opts = Options(band, offset, mask, scale, softcap, q.shape[1] != k.shape[1], backend,
                   block_dtype_for(q.dtype, block_dtype))
    steps = plan_steps(q_ranges, k_ranges, band, offset, mask)
    acc = acc_dtype(q.dtype)
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=acc)
    lse = torch.full(q.shape[:3], NEG_INF, dtype=acc)
    work = []
    for r in range(world_size):
        q_r = L.take(q, q_ranges[r])
        acc_o = torch.zeros(*q_r.shape[:3], v.shape[-1], dtype=acc)
        acc_l = torch.full(q_r.shape[:3], NEG_INF, dtype=acc)
        w = 0
        for t in range(steps + 1):
            src = (r - t) % world_size
            kr = k_ranges[src]
            km = None if key_mask is None else L.take(key_mask, kr, dim=-1)
            w += accumulate(acc_o, acc_l, q_r, q_ranges[r], L.take(k, kr), L.take(v, kr), km,
                            kr, opts)
        for (lq0, lq1, g0, g1) in L.local_slices(q_ranges[r]):
            out[..., g0:g1, :], lse[..., g0:g1] = acc_o[..., lq0:lq1, :], acc_l[..., lq0:lq1]
        work.append(w)
    return out.to(q.dtype), lse.to(q.dtype if q.dtype == torch.float64 else torch.float32), work
