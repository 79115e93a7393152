"""Which global positions each rank holds: the contiguous and the zig-zag layouts.

A shard is a list of contiguous global ranges ``[(start, stop), ...]`` whose rows are stored one
after the other along the sequence dim of the local tensor. Two layouts:

* ``"contiguous"``: rank r holds one range; shards may be uneven (any lengths, 0 included).
* ``"zigzag"``: the sequence is cut into 2P chunks (sizes as ``torch.tensor_split``) and rank r
  holds chunks r and 2P-1-r. Under a causal mask every rank then sees about the same number of
  (query, key) pairs: an early chunk with few keys is paired with a late chunk with many
  (Brandon et al. 2023, "Striped attention"; the zig-zag order of ring-flash-attn)::

      P = 2, N = 8:  chunks  c0 c1 c2 c3  ->  rank 0: c0 c3   rank 1: c1 c2

Everything here is pure bookkeeping on integers; nothing communicates except :func:`shard` /
:func:`gather`, which take a process group.
"""

from __future__ import annotations

from typing import Sequence

import torch

LAYOUTS = ("contiguous", "zigzag")
Ranges = list[tuple[int, int]]


def check_layout(layout: str) -> str:
    """``layout`` if it is one of the layouts ring attention knows, else a ValueError naming
    them."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}; 'zigzag' balances a "
                         "causal mask across ranks, 'contiguous' keeps each shard one range")
    return layout


def chunk_bounds(n: int, pieces: int) -> list[int]:
    """Boundaries of ``n`` rows cut into ``pieces`` nearly equal chunks (first ones one longer,
    as ``torch.tensor_split``): ``[0, b1, ..., n]``."""
    base, extra = divmod(n, pieces)
    bounds = [0]
    for i in range(pieces):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    return bounds


def zigzag_ranges(n: int, world: int) -> list[Ranges]:
    """Every rank's two chunks of a sequence of ``n`` rows in the zig-zag layout."""
    b = chunk_bounds(n, 2 * world)
    return [[(b[r], b[r + 1]), (b[2 * world - 1 - r], b[2 * world - r])] for r in range(world)]


def contiguous_ranges(lengths: Sequence[int]) -> list[Ranges]:
    """Every rank's one range when rank r holds ``lengths[r]`` rows in rank order."""
    out, start = [], 0
    for n in lengths:
        out.append([(start, start + int(n))])
        start += int(n)
    return out


def ranges_of(layout: str, lengths: Sequence[int], what: str = "the sequence") -> list[Ranges]:
    """Global ranges of every rank, given every rank's local length (gathered).

    Raises ValueError when a zig-zag shard does not have the length the layout gives it."""
    check_layout(layout)
    if layout == "contiguous":
        return contiguous_ranges(lengths)
    lengths = [int(x) for x in lengths]
    n, world = sum(lengths), len(lengths)
    ranges = zigzag_ranges(n, world)
    if [_length(rr) for rr in ranges] == lengths:
        return ranges
    # The total is off too, so the layout of the sum is not what the caller meant: take the
    # length for which the most ranks hold the right rows, and blame the others.
    meant, *alternatives = _meant_lengths(lengths)
    wants = [_length(rr) for rr in zigzag_ranges(meant, world)]
    wrong = [r for r in range(world) if lengths[r] != wants[r]]
    r = wrong[0]
    others = (f"; the other ranks hold the layout's rows for {meant}" if len(wrong) == 1
              else f"; ranks {wrong} differ from the layout of {meant} rows")
    for alt in alternatives:                # as likely, blaming another rank: say so
        alt_wants = [_length(rr) for rr in zigzag_ranges(alt, world)]
        alt_r = next(i for i in range(world) if lengths[i] != alt_wants[i])
        if alt_r != r:
            others += (f" (or, if the sequence has {alt} rows, rank {alt_r} holds "
                       f"{lengths[alt_r]} where the layout gives it {alt_wants[alt_r]})")
            break
    raise ValueError(
        f"layout='zigzag': rank {r} holds {lengths[r]} rows of {what} but the zig-zag layout "
        f"of {meant} rows over {world} ranks gives it {wants[r]}{others}; every rank's rows: "
        f"{lengths}; cut the sequence with attnlab.distributed.shard(x, layout='zigzag'), or "
        "use layout='contiguous'")


def _length(ranges: Ranges) -> int:
    return sum(b - a for a, b in ranges)


def _meant_lengths(lengths: list[int]) -> list[int]:
    """The sequence lengths whose zig-zag layout the most ranks' lengths agree with, best
    first (ties: the one where a rank holds rows too many rather than too few, then the one
    nearest the sum)."""
    world = len(lengths)
    candidates = {n for x in lengths for n in range(max(0, x * world - 2 * world),
                                                    x * world + 2 * world + 1)}

    def score(n):
        wants = [_length(rr) for rr in zigzag_ranges(n, world)]
        agree = sum(a == b for a, b in zip(lengths, wants))
        extra = sum(a > b for a, b in zip(lengths, wants))
        return (agree, extra, -abs(n - sum(lengths)), -n)
    ranked = sorted(candidates, key=score, reverse=True)
    best = score(ranked[0])[0]
    return [n for n in ranked if score(n)[0] == best]


def positions(ranges: Ranges, device=None) -> torch.Tensor:
    """The global positions of a shard's rows, in storage order: ``(n_local,)`` int64."""
    if not ranges:
        return torch.zeros(0, dtype=torch.long, device=device)
    return torch.cat([torch.arange(a, b, device=device) for a, b in ranges])


def take(x: torch.Tensor, ranges: Ranges, dim: int = -2) -> torch.Tensor:
    """The rows of ``x`` (the whole sequence along ``dim``) that a shard with ``ranges`` holds."""
    return torch.cat([x.narrow(dim, a, b - a) for a, b in ranges], dim=dim)


def local_slices(ranges: Ranges) -> list[tuple[int, int, int, int]]:
    """``(local_start, local_stop, global_start, global_stop)`` of each piece of a shard."""
    out, at = [], 0
    for a, b in ranges:
        out.append((at, at + b - a, a, b))
        at += b - a
    return out


def causal_work(ranges: list[Ranges], offset: int = 0) -> list[int]:
    """(query, key) pairs each rank computes under a causal mask when queries and keys share
    the layout: query i sees keys ``0 .. i + offset``. The load a layout gives every rank."""
    return [sum(max(0, min(i + offset + 1, _total(ranges))) for a, b in rr for i in range(a, b))
            for rr in ranges]


def _total(ranges: list[Ranges]) -> int:
    return sum(b - a for rr in ranges for a, b in rr)


def shard(x: torch.Tensor, *, group=None, layout: str = "zigzag", dim: int = -2,
          rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    """This rank's shard of a tensor that every rank holds whole (a batch, its masks).

    ``rank`` / ``world_size`` default to the process group's; give both to cut without one.
    The contiguous layout cuts as ``torch.tensor_split`` (uneven by at most one row).
    """
    check_layout(layout)
    if rank is None or world_size is None:
        import torch.distributed as dist
        rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    n = x.shape[dim]
    if layout == "zigzag":
        rr = zigzag_ranges(n, world_size)[rank]
    else:
        b = chunk_bounds(n, world_size)
        rr = [(b[rank], b[rank + 1])]
    return take(x, rr, dim=dim).contiguous()


def shard_ranges(n: int, world_size: int, layout: str = "zigzag") -> list[Ranges]:
    """The ranges :func:`shard` gives every rank for a sequence of ``n`` rows."""
    check_layout(layout)
    if layout == "zigzag":
        return zigzag_ranges(n, world_size)
    return contiguous_ranges(torch.tensor(chunk_bounds(n, world_size)).diff().tolist())
