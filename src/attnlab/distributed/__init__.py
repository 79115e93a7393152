"""Attention over a sequence sharded across processes (torch.distributed; docs/distributed.md).

* :func:`ring_attention`: K/V shards travel the ring, partials merge by log-sum-exp; exact,
  custom backward; contiguous or zig-zag layout; windows skip ring steps.
* :func:`ulysses_attention`: two all-to-alls trade the sequence split for a head split.
* :class:`SequenceParallel` / :func:`sequence_parallel`: attnlab's modules on a shard.
* :func:`shard`, :func:`gather`, :func:`local_positions`: cut and reassemble sequences.
* :func:`spawn`: P local processes with a process group and a deadline.
* :func:`simulate_ring`: the ring's arithmetic for any P in one process.

Every wait has a timeout; a rank that fails ends the others with :class:`RankFailure`.
"""

from __future__ import annotations

import torch

from attnlab.distributed._comm import RankFailure
from attnlab.distributed.launch import SpawnError, spawn
from attnlab.distributed.layout import LAYOUTS, shard, shard_ranges
from attnlab.distributed.modules import (
    STRATEGIES,
    SequenceParallel,
    choose_strategy,
    sequence_parallel,
)
from attnlab.distributed.ring import ring_attention, simulate_ring
from attnlab.distributed.ulysses import ulysses_attention


def local_positions(n_total: int, *, group=None, layout: str = "zigzag", device=None,
                    rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    """Global positions ``(N_local,)`` of the rows :func:`shard` gives this rank (for position
    encodings of a sharded sequence)."""
    from attnlab.distributed import layout as L
    if rank is None or world_size is None:
        import torch.distributed as dist
        rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    return L.positions(shard_ranges(n_total, world_size, layout)[rank], device)


def gather(x: torch.Tensor, *, group=None, layout: str = "zigzag", dim: int = -2,
           timeout: float | None = None) -> torch.Tensor:
    """The whole sequence from every rank's shard (the inverse of :func:`shard`; shards may be
    uneven in the contiguous layout). Not differentiable; for checking and for outputs."""
    from attnlab.distributed import layout as L
    from attnlab.distributed._comm import Comm, guarded

    comm = Comm(group, timeout, "gather")

    def run():
        dim_ = dim % x.dim()
        lengths = [row[0] for row in comm.all_gather_ints([x.shape[dim_]])]
        ranges = L.ranges_of(layout, lengths)
        shape = list(x.shape)
        outs = []
        for n in lengths:
            shape[dim_] = n
            outs.append(torch.empty(shape, dtype=x.dtype, device=x.device))
        comm.all_to_all(outs, [x.contiguous()] * comm.size)
        whole = torch.empty([*x.shape[:dim_], sum(lengths), *x.shape[dim_ + 1:]],
                            dtype=x.dtype, device=x.device)
        for part, rr in zip(outs, ranges):
            for l0, l1, g0, g1 in L.local_slices(rr):
                whole.narrow(dim_, g0, g1 - g0).copy_(part.narrow(dim_, l0, l1 - l0))
        return whole
    return guarded(comm, run)


__all__ = ["LAYOUTS", "STRATEGIES", "RankFailure", "SequenceParallel", "SpawnError",
           "choose_strategy", "gather", "local_positions", "ring_attention",
           "sequence_parallel", "shard", "shard_ranges", "simulate_ring", "spawn",
           "ulysses_attention"]
