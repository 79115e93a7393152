r"""All-to-all (DeepSpeed-Ulysses) sequence parallelism: trade the sequence split for a head split.

Each rank holds ``(B, H, N_local, D)``. One all-to-all gives every rank a group of heads over the
**whole** sequence ``(B, H_r, N, D)``; attention then runs in one process with any mask the core
takes (nothing about the sequence split leaks into it); a second all-to-all returns the output to
the sequence split. The all-to-all is linear, so its backward is the inverse all-to-all.

Heads need not divide the group (Ulysses' own limit): they are cut as ``torch.tensor_split``
does, so some ranks get one head more (and with H < P some get none and idle). With grouped-query
attention the K/V heads are cut and each rank takes the query heads of its K/V heads; when there
are fewer K/V heads than ranks, K/V are repeated to the query heads first (more traffic).
"""

from __future__ import annotations

import torch

from attnlab.core.api import attention, no_dispatch
from attnlab.core.geometry import validate_window
from attnlab.core.registry import select_backend
from attnlab.core.spec import build_spec
from attnlab.distributed import layout as L
from attnlab.distributed._checks import agree, checked_locally
from attnlab.distributed._comm import Comm, guarded


def head_split(n_heads: int, n_kv_heads: int, world: int) -> tuple[list[int], list[int], bool]:
    """Boundaries of the query heads and K/V heads each rank takes, and whether K/V must be
    repeated to the query heads first (GQA with fewer K/V heads than ranks)."""
    group = n_heads // n_kv_heads
    if n_kv_heads == n_heads or n_kv_heads >= world:
        kb = L.chunk_bounds(n_kv_heads, world)
        return [b * group for b in kb], kb, False
    qb = L.chunk_bounds(n_heads, world)
    return qb, qb, True


def split_heads(k, v, n_heads: int, world: int):
    """What each rank takes in the all-to-all: ``(k, v, query head bounds, query heads per
    rank, K/V heads per rank, repeated)``; K/V repeated to the query heads first when there
    are fewer K/V heads than ranks."""
    h_kv = k.shape[1]
    qb, kb, repeat = head_split(n_heads, h_kv, world)
    if repeat:
        k = k.repeat_interleave(n_heads // h_kv, dim=1)
        v = v.repeat_interleave(n_heads // h_kv, dim=1)
    return (k, v, qb, [b - a for a, b in zip(qb, qb[1:])],
            [b - a for a, b in zip(kb, kb[1:])], repeat)


class _AllToAll(torch.autograd.Function):
    """Split ``x`` along ``split_dim`` (sizes per destination rank), exchange, and concatenate
    what arrives along ``cat_dim`` (sizes per source rank). Backward: the same, inverted."""

    @staticmethod
    def forward(ctx, x, comm: Comm, split_dim: int, split_sizes, cat_dim: int, cat_sizes):
        ctx.args = (comm, split_dim, split_sizes, cat_dim, cat_sizes)
        return _exchange(x, comm, split_dim, split_sizes, cat_dim, cat_sizes)

    @staticmethod
    def backward(ctx, grad):
        comm, split_dim, split_sizes, cat_dim, cat_sizes = ctx.args
        back = guarded(comm, _exchange, grad.contiguous(), comm, cat_dim, cat_sizes, split_dim,
                       split_sizes)
        return back, None, None, None, None, None


def _exchange(x, comm: Comm, split_dim, split_sizes, cat_dim, cat_sizes):
    pieces = list(torch.split(x, split_sizes, dim=split_dim))
    shape = list(x.shape)
    outs = []
    for n in cat_sizes:
        shape[cat_dim] = n
        shape[split_dim] = split_sizes[comm.rank]
        outs.append(torch.empty(shape, dtype=x.dtype, device=x.device))
    comm.all_to_all(outs, pieces)
    return torch.cat(outs, dim=cat_dim)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, group=None,
                      causal: bool = False, window=None, mask=None,
                      key_mask: torch.Tensor | None = None, scale: float | None = None,
                      softcap: float | None = None, layout: str = "contiguous",
                      backend: str = "auto", timeout: float | None = None,
                      return_lse: bool = False, stats: dict | None = None):
    """Exact attention over the sharded sequence by two all-to-alls over heads.

    Same arguments, masks (in global positions and global head indices) and result as
    :func:`~attnlab.distributed.ring_attention`; ``backend`` runs the whole-sequence attention
    of this rank's heads. ``"auto"`` picks among the backends whose memory is linear in the
    sequence length for the request (tiled, SDPA without a dense mask, the banded block-sparse
    path), since each rank holds the whole sequence.
    """
    mask, key_mask = checked_locally(q, k, v, key_mask, mask, scale, softcap, group)
    comm = Comm(group, timeout, "ulysses_attention")
    return guarded(comm, _ulysses_call, comm, q, k, v, causal, window, mask, key_mask, scale,
                   softcap, layout, backend, return_lse, stats)


def _ulysses_call(comm, q, k, v, causal, window, mask, key_mask, scale, softcap, layout, backend,
                  return_lse, stats):
    L.check_layout(layout)
    band_given = validate_window(window)
    lengths = agree(comm, q, k, v, key_mask, mask, causal, band_given, layout, scale, softcap,
                    "ulysses_attention")
    n_qs, n_ks = [a for a, _ in lengths], [b for _, b in lengths]
    q_ranges = L.ranges_of(layout, n_qs, "the queries")
    k_ranges = L.ranges_of(layout, n_ks, "the keys")
    h, h_kv, world = q.shape[1], k.shape[1], comm.size
    k, v, qb, q_heads, kv_heads, repeat = split_heads(k, v, h, world)
    comm.step = "gathering the sequence"
    q_all = _AllToAll.apply(q, comm, 1, q_heads, 2, n_qs)         # (B, H_r, N_q, D), rank order
    k_all = _AllToAll.apply(k, comm, 1, kv_heads, 2, n_ks)
    v_all = _AllToAll.apply(v, comm, 1, kv_heads, 2, n_ks)
    q_order = _order(q_ranges, q.device)
    k_order = _order(k_ranges, q.device)
    if q_order is not None:
        q_all = q_all.index_select(2, q_order)
    if k_order is not None:
        k_all, v_all = k_all.index_select(2, k_order), v_all.index_select(2, k_order)
    keep = None
    if key_mask is not None:                    # every rank needs every key's padding flag
        outs = [torch.empty(key_mask.shape[0], n, dtype=torch.bool, device=key_mask.device)
                for n in n_ks]
        comm.all_to_all(outs, [key_mask] * world)
        keep = torch.cat(outs, dim=1)
        if k_order is not None:
            keep = keep.index_select(1, k_order)
    core_mask = _core_mask(_global_heads(mask, qb[comm.rank]), keep)
    gqa = not repeat and h != h_kv
    if backend == "auto":            # every rank holds the whole sequence: nothing N x N
        spec = build_spec(q_all, k_all, v_all, mask=core_mask, causal=causal, window=window,
                          scale=scale, softcap=softcap, enable_gqa=gqa, return_lse=True)
        backend = select_backend("auto", spec, linear_memory=True).name
    comm.step = "attention of this rank's heads"
    if q_all.shape[1] == 0:                     # fewer heads than ranks: nothing to compute
        out = q_all.new_zeros(*q_all.shape[:3], v.shape[-1]) + 0 * (q_all.sum() + k_all.sum()
                                                                     + v_all.sum())
        lse = out[..., 0]
    else:
        with no_dispatch():
            res = attention(q_all, k_all, v_all, mask=core_mask, causal=causal, window=window,
                            scale=scale, softcap=softcap, enable_gqa=gqa,
                            backend=backend, return_lse=True)
        out, lse = res.out, res.lse
    # every rank must send the same dtype: lse as the ring returns it
    lse = lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
    if q_order is not None:                     # back to rank order before splitting
        inv = torch.argsort(q_order)
        out, lse = out.index_select(2, inv), lse.index_select(2, inv)
    comm.step = "returning the output"
    out = _AllToAll.apply(out.contiguous(), comm, 2, n_qs, 1, q_heads)   # (B, H, N_q_local, D_v)
    if stats is not None:
        stats.update(steps=1, sent_bytes=comm.sent_bytes, world_size=world, backend=backend)
    if not return_lse:
        return out
    lse = _AllToAll.apply(lse.unsqueeze(-1).contiguous(), comm, 2, n_qs, 1, q_heads).squeeze(-1)
    if stats is not None:
        stats.update(sent_bytes=comm.sent_bytes)
    return out, lse


def _order(ranges: list, device) -> torch.Tensor | None:
    """Indices that put rows gathered in rank order into global order (None if they are)."""
    pos = torch.cat([L.positions(rr, device) for rr in ranges])
    if pos.numel() == 0 or torch.equal(pos, torch.arange(pos.numel(), device=device)):
        return None
    return torch.argsort(pos)


def _global_heads(mask_fn, first: int):
    """A mask function of this rank's heads called with the global head index: the rank's
    local head h is the group's head ``first + h``."""
    if mask_fn is None or first == 0:
        return mask_fn

    def shifted(b, h, qi, ki):
        return mask_fn(b, h + first, qi, ki)
    return shifted


def _core_mask(mask_fn, keep):
    if keep is None:
        return mask_fn
    if mask_fn is None:
        return keep[:, None, None, :]
    km = keep[:, None, None, :]

    def masked(b, h, qi, ki):
        return mask_fn(b, h, qi, ki) & km.index_select(-1, ki.reshape(-1))
    return masked
