"""Two-dimensional sequence parallelism: all-to-all inside groups of U ranks, the ring across
R such groups (P = R x U; the arrangement of USP's "LongContextAttention", Fang & Zhao 2024).

The ranks form an R x U mesh (``torch.distributed.device_mesh``): rank ``r * U + u`` is member
``u`` of all-to-all group ``r`` and member ``r`` of ring ``u``. The sequence is cut in the zig-zag
layout over the R groups, and each group's shard contiguously over its U members
(:func:`hybrid_ranges`). One attention call then:

1. all-to-all inside the group: each member trades its rows of every head for all the group's
   rows of its share of the heads (heads cut as ``torch.tensor_split``; K/V repeated to the
   query heads first when there are fewer K/V heads than members), and gathers the group's key
   padding flags;
2. ring attention across the R groups on those heads, in the zig-zag layout (exact, K/V round
   the ring, log-sum-exp merge; :func:`~attnlab.distributed.ring_attention`);
3. the inverse all-to-all back to the sequence split.

The all-to-all carries the whole shard of each of its heads once per call; the ring sends K/V
R - 1 times but only between groups. :func:`choose_split` picks U: the largest divisor of P that
divides the K/V heads, so that every member takes as many heads (none waits on a busier one)
and no K/V head is repeated to reach its query heads (which multiplies the all-to-all's K/V
traffic); U = P is pure all-to-all, U = 1 the pure ring. Any U works (uneven heads are cut as
``torch.tensor_split``; lengths need not divide); the rule only picks the balanced one.
"""

from __future__ import annotations

import torch

from attnlab.distributed import layout as L
from attnlab.distributed._comm import Comm, guarded
from attnlab.distributed.ring import ring_attention
from attnlab.distributed.ulysses import _AllToAll, split_heads


def choose_split(n_heads: int, n_kv_heads: int, world_size: int) -> tuple[int, int]:
    """``(ring, ulysses)`` sizes for ``world_size`` ranks: ``ulysses`` the largest divisor of
    the world that divides the K/V heads (every member then takes as many heads, and no K/V
    head is repeated to reach the query heads), the ring the rest."""
    for u in sorted((d for d in range(1, world_size + 1) if world_size % d == 0), reverse=True):
        if n_kv_heads % u == 0:
            return world_size // u, u
    return world_size, 1


def hybrid_ranges(n: int, ring: int, ulysses: int) -> list[L.Ranges]:
    """Every rank's global ranges (rank ``r * ulysses + u``): zig-zag over the ``ring``
    groups, each group's shard cut contiguously over its ``ulysses`` members."""
    out = []
    for group in L.zigzag_ranges(n, ring):
        rows = L.positions(group).tolist()
        bounds = L.chunk_bounds(len(rows), ulysses)
        for u in range(ulysses):
            part = rows[bounds[u]:bounds[u + 1]]
            out.append(_as_ranges(part))
    return out


def _as_ranges(rows: list[int]) -> L.Ranges:
    ranges: L.Ranges = []
    for i in rows:
        if ranges and ranges[-1][1] == i:
            ranges[-1] = (ranges[-1][0], i + 1)
        else:
            ranges.append((i, i + 1))
    return ranges


def hybrid_shard(x: torch.Tensor, mesh, dim: int = -2) -> torch.Tensor:
    """This rank's rows of ``x`` (every rank holds it whole) in the layout of
    :func:`hybrid_ranges`, for the ``(ring, ulysses)`` mesh of :func:`make_mesh`."""
    ring, ulysses = mesh.shape
    r, u = mesh.get_local_rank(0), mesh.get_local_rank(1)
    rr = hybrid_ranges(x.shape[dim], ring, ulysses)[r * ulysses + u]
    return L.take(x, rr, dim=dim).contiguous()


def make_mesh(ring: int, ulysses: int):
    """The ``(ring, ulysses)`` device mesh over the world (every rank must call it)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (ring, ulysses), mesh_dim_names=("ring", "ulysses"))


def hybrid_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mesh,
                     causal: bool = False, window=None, key_mask: torch.Tensor | None = None,
                     scale: float | None = None, softcap: float | None = None,
                     timeout: float | None = None, return_lse: bool = False):
    """Exact attention of this rank's rows over the whole sequence on a ``(ring, ulysses)``
    mesh (see the module docstring).

    Args:
        q, k, v: this rank's rows ``(B, H, N_local, D)`` / ``(B, H_kv, N_local, D[_v])`` in the
            layout of :func:`hybrid_ranges` (shard them with :func:`hybrid_shard`).
        mesh: from :func:`make_mesh` (``choose_split`` gives its sizes).
        causal, window, scale, softcap: as :func:`attnlab.attention`, on the whole sequence.
        key_mask: ``(B, N_local)`` bool, True for this rank's real keys, or None.
        timeout: seconds any one wait may take before :class:`RankFailure`.
        return_lse: also return the log-sum-exp of every row ``(B, H, N_local)``.

    Returns:
        ``(B, H, N_local, D_v)``, or ``(out, lse)``.
    """
    ulysses_group, ring_group = mesh.get_group("ulysses"), mesh.get_group("ring")
    comm = Comm(ulysses_group, timeout, "hybrid_attention (all-to-all)")
    return guarded(comm, _hybrid_call, comm, ring_group, q, k, v, causal, window, key_mask,
                   scale, softcap, timeout, return_lse)


def _hybrid_call(comm, ring_group, q, k, v, causal, window, key_mask, scale, softcap, timeout,
                 return_lse=False):
    world = comm.size
    n_local = torch.tensor([q.shape[2], k.shape[2]])
    lengths = comm.all_gather_ints(n_local.tolist())
    n_qs, n_ks = [a for a, _ in lengths], [b for _, b in lengths]
    k, v, _, q_heads, kv_heads, _ = split_heads(k, v, q.shape[1], world)
    comm.step = "gathering the group's rows"
    # the group's members hold consecutive pieces of its ring shard: rank order is its order
    q_g = _AllToAll.apply(q, comm, 1, q_heads, 2, n_qs)
    k_g = _AllToAll.apply(k, comm, 1, kv_heads, 2, n_ks)
    v_g = _AllToAll.apply(v, comm, 1, kv_heads, 2, n_ks)
    keep = None
    if key_mask is not None:
        outs = [torch.empty(key_mask.shape[0], n, dtype=torch.bool, device=key_mask.device)
                for n in n_ks]
        comm.all_to_all(outs, [key_mask.contiguous()] * world)
        keep = torch.cat(outs, dim=1)
    comm.step = "the ring across groups"
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if q_g.shape[1] == 0:                       # fewer heads than members: nothing to do
        out = q_g.new_zeros(*q_g.shape[:3], v.shape[-1]) + 0 * (q_g.sum() + k_g.sum()
                                                                 + v_g.sum())
        lse = out[..., 0].to(lse_dtype)
    else:
        out, lse = ring_attention(q_g, k_g, v_g, group=ring_group, causal=causal,
                                  window=window, key_mask=keep, scale=scale, softcap=softcap,
                                  layout="zigzag", timeout=timeout, return_lse=True)
    comm.step = "returning the output"
    out = _AllToAll.apply(out.contiguous(), comm, 2, n_qs, 1, q_heads)
    if not return_lse:
        return out
    lse = _AllToAll.apply(lse.unsqueeze(-1).contiguous(), comm, 2, n_qs, 1, q_heads)
    return out, lse.squeeze(-1)
