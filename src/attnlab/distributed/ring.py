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

from attnlab.core.api import attention, no_dispatch
from attnlab.core.backends.tiled import block_backward
from attnlab.core.softmax import NEG_INF, merge_partials
from attnlab.core.spec import _validate_window, build_spec
from attnlab.distributed import layout as L
from attnlab.distributed._comm import Comm, guarded

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TAG_K, _TAG_V, _TAG_M, _TAG_DK, _TAG_DV, _TAG_HOME_K, _TAG_HOME_V = range(7)


@dataclass(frozen=True)
class Options:
    """What every block call gets: the global band, the user's mask function, the rest."""

    band: tuple[int | None, int | None] | None     # causal folded in (right = 0)
    offset: int                                    # N_k - N_q of the whole sequences
    mask_fn: object
    scale: float | None
    softcap: float | None
    gqa: bool
    backend: str
    block_dtype: torch.dtype | None = None          # the dtype blocks are computed in


@dataclass(frozen=True)
class Plan:
    """Every rank's global ranges and the number of ring rotations the masks need."""

    q_ranges: list
    k_ranges: list
    n_q_total: int
    n_k_total: int
    steps: int


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def band_of(causal: bool, window) -> tuple[int | None, int | None] | None:
    """Causal and window folded into one (left, right) band, None when unbounded."""
    band = _validate_window(window)
    if causal:
        band = (band[0] if band is not None else None, 0)
    return band


def _visible(band, offset: int, q: tuple[int, int], k: tuple[int, int]) -> bool:
    """Whether any query in global range q sees any key in global range k under the band."""
    (q0, q1), (k0, k1) = q, k
    if q1 <= q0 or k1 <= k0:
        return False
    if band is None:
        return True
    left, right = band
    lo = k0 if left is None else max(k0, q0 + offset - left)
    hi = k1 - 1 if right is None else min(k1 - 1, q1 - 1 + offset + right)
    return lo <= hi


def plan_steps(q_ranges, k_ranges, band, offset: int, mask_fn) -> int:
    """Rotations needed: the largest t at which some rank's queries see the shard of rank r-t
    (all P-1 when a mask function may keep anything)."""
    world = len(q_ranges)
    if mask_fn is not None or band is None:
        return world - 1
    need = 0
    for t in range(1, world):
        for r in range(world):
            src = (r - t) % world
            if any(_visible(band, offset, qr, kr) for qr in q_ranges[r] for kr in k_ranges[src]):
                need = t
    return need


def _piece_options(key_mask, gq: tuple[int, int], gk: tuple[int, int], opts: Options) -> dict:
    """The core's keyword arguments for one (query piece, key piece) block at global ranges
    ``gq``, ``gk``: the global band as the block's own window, the mask function shifted to
    global indices, the key mask."""
    (q0, q1), (k0, k1) = gq, gk
    n_q, n_k = q1 - q0, k1 - k0
    fns: list = []
    window = None
    if opts.band is not None:
        left, right = opts.band
        e = q0 - k0 + opts.offset - (n_k - n_q)         # the piece's shift of the alignment
        lo_l = None if left is None else left - e
        lo_r = None if right is None else right + e
        covers = ((left is None or q1 - 1 + opts.offset - left <= k0)
                  and (right is None or q0 + opts.offset + right >= k1 - 1))
        if covers:
            window = None
        elif (lo_l is None or lo_l >= 0) and (lo_r is None or lo_r >= 0):
            window = (lo_l, lo_r)
        else:                                           # an alignment the core cannot express
            d = q0 - k0 + opts.offset

            def band_fn(b, h, qi, ki, d=d, left=left, right=right):
                keep = torch.ones_like(qi + ki, dtype=torch.bool)
                if left is not None:
                    keep = keep & (ki >= qi + d - left)
                if right is not None:
                    keep = keep & (ki <= qi + d + right)
                return keep
            fns.append(band_fn)
    if opts.mask_fn is not None:
        fn = opts.mask_fn
        fns.append(lambda b, h, qi, ki, fn=fn: fn(b, h, qi + q0, ki + k0))
    mask = None
    if key_mask is not None:
        if fns:
            km = key_mask[:, None, None, :]               # (B, 1, 1, n_k), indexed per tile
            fns.append(lambda b, h, qi, ki, km=km: km.index_select(-1, ki.reshape(-1)))
        else:
            mask = key_mask[:, None, None, :]             # (B, 1, 1, n_k)
    if fns:
        mask = fns[0] if len(fns) == 1 else _and(fns)
    return dict(mask=mask, window=window, scale=opts.scale, softcap=opts.softcap,
                enable_gqa=opts.gqa)


def _in_block_dtype(opts: Options, *ts):
    if opts.block_dtype is None or ts[0].dtype == opts.block_dtype:
        return ts
    return tuple(t.to(opts.block_dtype) for t in ts)


def _piece_call(q, k, v, key_mask, gq, gk, opts: Options):
    """One block through the single-process core: ``(out, lse)``."""
    q, k, v = _in_block_dtype(opts, q, k, v)
    with no_dispatch():
        res = attention(q, k, v, backend=opts.backend, return_lse=True,
                        **_piece_options(key_mask, gq, gk, opts))
    return res.out, res.lse


def _and(fns):
    def and_fn(b, h, qi, ki):
        keep = fns[0](b, h, qi, ki)
        for fn in fns[1:]:
            keep = keep & fn(b, h, qi, ki)
        return keep
    return and_fn


def _trim(band, offset: int, q: tuple[int, int], k: tuple[int, int]):
    """Shrink a block to the keys some query sees and the queries that see some key (rows and
    columns outside hold nothing under the band); None when nothing is left."""
    (q0, q1), (k0, k1) = q, k
    if band is None:
        return q, k
    left, right = band
    if left is not None:
        k0 = max(k0, q0 + offset - left)
        q1 = min(q1, k1 - 1 - offset + left + 1)
    if right is not None:
        k1 = min(k1, q1 - 1 + offset + right + 1)
        q0 = max(q0, k0 - offset - right)
    if left is not None:                    # the key range may have shrunk with the rows
        k0 = max(k0, q0 + offset - left)
    if right is not None:
        k1 = min(k1, q1 - 1 + offset + right + 1)
    if q1 <= q0 or k1 <= k0:
        return None
    return (q0, q1), (k0, k1)


def _pieces(q_ranges, k_ranges, opts: Options):
    """The visible (local q slice, global q range, local k slice, global k range) blocks, each
    trimmed to the rows and keys the band leaves in it (so that the block's own window can
    express the band and the backends skip what it excludes)."""
    for lq0, lq1, gq0, gq1 in L.local_slices(q_ranges):
        for lk0, lk1, gk0, gk1 in L.local_slices(k_ranges):
            if not _visible(opts.band, opts.offset, (gq0, gq1), (gk0, gk1)):
                continue
            trimmed = _trim(opts.band, opts.offset, (gq0, gq1), (gk0, gk1))
            if trimmed is None:
                continue
            (a0, a1), (b0, b1) = trimmed
            yield ((lq0 + a0 - gq0, lq0 + a1 - gq0), (a0, a1),
                   (lk0 + b0 - gk0, lk0 + b1 - gk0), (b0, b1))


def accumulate(acc_o, acc_l, q, q_ranges, k, v, key_mask, k_ranges, opts: Options) -> int:
    """Merge the partials of local queries against one K/V shard into ``(acc_o, acc_l)``
    (in place). Returns the number of (query, key) pairs computed, the block's work."""
    work = 0
    for (lq0, lq1), gq, (lk0, lk1), gk in _pieces(q_ranges, k_ranges, opts):
        km = None if key_mask is None else key_mask[:, lk0:lk1]
        o, lse = _piece_call(q[..., lq0:lq1, :], k[..., lk0:lk1, :], v[..., lk0:lk1, :], km,
                             gq, gk, opts)
        merged = merge_partials(acc_o[..., lq0:lq1, :], acc_l[..., lq0:lq1],
                                o.to(acc_o.dtype), lse.to(acc_l.dtype))
        acc_o[..., lq0:lq1, :], acc_l[..., lq0:lq1] = merged
        work += (lq1 - lq0) * (lk1 - lk0)
    return work


def block_grads(q, q_ranges, k, v, key_mask, k_ranges, opts: Options, out, lse, d_out, d_lse,
                dq: torch.Tensor | None = None):
    """``(dq, dk, dv)`` of one K/V shard: each block's tile backward against the merged
    ``(out, lse)`` (:func:`attnlab.core.backends.tiled.block_backward`), which recomputes the
    block's probabilities from the global lse, so the blocks' gradients sum to the whole's.
    ``dq``: a buffer to add this shard's dq into (else a new one)."""
    acc = out.dtype
    if dq is None:
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    dk = torch.zeros(k.shape, dtype=acc, device=k.device)
    dv = torch.zeros(v.shape, dtype=acc, device=v.device)
    for (lq0, lq1), gq, (lk0, lk1), gk in _pieces(q_ranges, k_ranges, opts):
        qp, kp, vp = _in_block_dtype(opts, q[..., lq0:lq1, :], k[..., lk0:lk1, :],
                                     v[..., lk0:lk1, :])
        km = None if key_mask is None else key_mask[:, lk0:lk1]
        spec = build_spec(qp, kp, vp, return_lse=True, **_piece_options(km, gq, gk, opts))
        gq_, gk_, gv_ = block_backward(qp, kp, vp, out[..., lq0:lq1, :], lse[..., lq0:lq1],
                                       d_out[..., lq0:lq1, :],
                                       None if d_lse is None else d_lse[..., lq0:lq1], spec)
        dq[..., lq0:lq1, :] += gq_.to(acc)
        dk[..., lk0:lk1, :] += gk_.to(acc)
        dv[..., lk0:lk1, :] += gv_.to(acc)
    return dq, dk, dv


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
        acc = _acc_dtype(q.dtype)
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


# ------------------------------------------------------------------------------ the public call

def _check_local(q, k, v, key_mask, mask, scale, softcap):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (B, H, N_local, D), got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N_local, D): this rank's shard of the "
                             f"sequence, got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}; expected q (B, H, N_q, D), k (B, H_kv, N_k, D), "
                         "v (B, H_kv, N_k, D_v)")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"q has {q.shape[1]} heads, not a multiple of k's {k.shape[1]} "
                         "(grouped-query attention needs H_q = G * H_kv)")
    if key_mask is not None:
        if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool \
                or tuple(key_mask.shape) != (k.shape[0], k.shape[2]):
            raise ValueError(
                f"key_mask must be a bool tensor (B, N_k_local) = {(k.shape[0], k.shape[2])} "
                "with True for real keys, got "
                f"{type(key_mask).__name__ if not isinstance(key_mask, torch.Tensor) else (key_mask.dtype, tuple(key_mask.shape))}")
    if mask is not None and not isinstance(mask, torch.Tensor) and not callable(mask):
        raise TypeError(
            "mask must be a mask function fn(b, h, q_idx, kv_idx) of global positions "
            "(attnlab.masks) or a key padding tensor (B, 1, 1, N_k_local), got a "
            + type(mask).__name__)
    for name, val in (("scale", scale), ("softcap", softcap)):
        if val is not None and not (isinstance(val, (int, float)) and val > 0):
            raise ValueError(f"{name} must be a number > 0 or None, got {val!r}")


def _block_dtype(dtype: torch.dtype, given: torch.dtype | None) -> torch.dtype | None:
    if given is not None:
        if given not in _DTYPES:
            raise TypeError(f"block_dtype must be one of {_DTYPES} or None, got {given!r}")
        return given
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else None


def key_mask_from(mask: torch.Tensor, batch: int, n_k: int) -> torch.Tensor:
    """A tensor ``mask`` that masks keys only (query dim 1: ``(B | 1, 1, 1, N_k_local)``,
    ``(1, N_k_local)`` or ``(N_k_local,)``; bool True = may attend, or float 0 / -inf) as the
    ``(B, N_k_local)`` bool key mask that travels with its keys. Anything that varies with the
    query cannot be split across ranks and is refused."""
    t = mask
    while t.dim() < 4:
        t = t.unsqueeze(0)
    if (t.dim() > 4 or t.shape[-1] != n_k or t.shape[-2] != 1 or t.shape[-3] != 1
            or t.shape[0] not in (1, batch)):
        raise ValueError(
            f"a tensor mask across ranks may only mask keys: shape (B or 1, 1, 1, N_k_local = "
            f"{n_k}), got {tuple(mask.shape)}; for causal, windows or documents pass causal=, "
            "window= or a mask function of global positions (attnlab.masks)")
    t = t[:, 0, 0, :]
    if t.dtype != torch.bool:
        if bool((torch.isfinite(t) & (t != 0)).any()):
            raise ValueError("a float mask across ranks may only hold 0 and -inf (key padding); "
                             "a learned bias cannot travel with the keys")
        t = t == 0
    return t.expand(batch, n_k).contiguous()


def checked_locally(q, k, v, key_mask, mask, scale, softcap):
    """This rank's own checks, before any communication; a failure is posted for the other
    ranks (when a process group exists) so that they end naming this rank. Returns the
    (mask function, key mask) split of ``mask``."""
    try:
        _check_local(q, k, v, key_mask, mask, scale, softcap)
        return _masks_of(mask, key_mask, k)
    except (TypeError, ValueError) as error:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            from attnlab.distributed._comm import post_fault
            post_fault(dist.get_rank(), error)
        raise


def _masks_of(mask, key_mask, k):
    """Split ``mask`` into (mask function or None, key mask or None)."""
    if isinstance(mask, torch.Tensor):
        km = key_mask_from(mask, k.shape[0], k.shape[2])
        return None, km if key_mask is None else (km & key_mask)
    return mask, key_mask


_FIELDS = ("batch", "query heads", "K/V heads", "head dim", "value dim", "dtype", "causal",
           "window left", "window right", "layout", "key_mask given", "mask given", "scale",
           "softcap")


def agree(comm: Comm, q, k, v, key_mask, mask, causal, band_given, layout, scale, softcap,
          what: str):
    """Gather every rank's shapes and options; raise the same clear error on every rank when
    they differ. Returns every rank's (n_q, n_k)."""
    def code(x):
        return -1 if x is None else int(round(float(x) * 1e6)) if not isinstance(x, int) else x
    left, right = band_given if band_given is not None else (None, None)
    mine = [q.shape[0], q.shape[1], k.shape[1], q.shape[-1], v.shape[-1],
            _DTYPES.index(q.dtype), int(bool(causal)), code(left), code(right),
            L.LAYOUTS.index(layout), int(key_mask is not None), int(mask is not None),
            code(scale), code(softcap)]
    comm.step = "checking that every rank passed the same shapes"
    rows = comm.all_gather_ints(mine + [q.shape[2], k.shape[2]])
    for r, row in enumerate(rows):
        for name, a, b in zip(_FIELDS, row, rows[0]):
            if a != b:
                raise ValueError(f"{what}: rank {r} has {name} = {_show(name, a)} where rank 0 "
                                 f"has {_show(name, b)}; every rank must call with the same "
                                 "batch, heads, head dims, dtype and options (only the sequence "
                                 "length may differ)")
    return [(row[-2], row[-1]) for row in rows]


def _show(name, x):
    if name == "dtype":
        return str(_DTYPES[x])
    if name == "layout":
        return repr(L.LAYOUTS[x])
    return "None" if x == -1 and name.startswith(("window", "scale", "softcap")) else str(x)


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
    band_given = _validate_window(window)
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
                   _block_dtype(q.dtype, block_dtype))
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
    _check_local(q, k, v, key_mask, mask, scale, softcap)
    mask, key_mask = _masks_of(mask, key_mask, k)
    band = band_of(causal, window)
    q_ranges = L.shard_ranges(q.shape[2], world_size, layout)
    k_ranges = L.shard_ranges(k.shape[2], world_size, layout)
    offset = k.shape[2] - q.shape[2]
    opts = Options(band, offset, mask, scale, softcap, q.shape[1] != k.shape[1], backend,
                   _block_dtype(q.dtype, block_dtype))
    steps = plan_steps(q_ranges, k_ranges, band, offset, mask)
    acc = _acc_dtype(q.dtype)
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
