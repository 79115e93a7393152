"""The census's passes on the compiled tile loop (``forward_stats`` and ``stats_pass`` of
:mod:`attnlab.core.loop`'s library): what :mod:`attnlab.core._stats_passes` computes with the
eager tile loop, called from there where the loop is built and the call is one it takes."""

from __future__ import annotations

import torch

from attnlab.core import loop
from attnlab.core.tiles import LN2, sizes


def first_pass(q, k, v, spec, sink: tuple[int, int], row_stats):
    """:func:`attnlab.core._stats_passes._forward_stats` on the compiled loop, whose forward
    (``forward_stats``) keeps the entropy, the mean key position and the sink mass per row as
    it goes (no extra value columns: the entropy comes from ``sum p (s - m)``, not from
    ``E_p[k]``). Returns the same ``(out or None, lse, entropy, distance, sink_mass, m, r,
    rest)``; ``row_stats``: ``(band, ids, before)`` to have the same pass give the row
    statistics (``rest``, as the second pass's dict without columns, pooled maps or rows), else
    None (``rest`` None)."""
    dev = q.device
    none_i = torch.empty(0, dtype=torch.long, device=dev)
    band, ids, before = row_stats if row_stats is not None else (0, None, None)
    v_in = v if v is not None else q.new_empty(k.shape[0], k.shape[1], 0)
    out, lse, best, argmax, tied, mass = torch.ops.attnlab_loop.forward_stats(
        loop.scaled_q(q, spec).contiguous(), k.contiguous(), v_in.contiguous(),
        none_i if ids is None else ids.to(dev, torch.long),
        none_i if before is None else before.to(dev, torch.long), spec.kv_groups,
        *loop.band_args(spec), int(band), int(sink[0]), int(sink[1]), row_stats is not None,
        *sizes())
    rest = None
    if row_stats is not None:
        rest = {"best": best, "argmax": argmax, "tied": tied, "prev_mass": mass[0],
                "self_mass": mass[1], "next_mass": torch.zeros_like(mass[0]),
                "local_mass": mass[2], "match_mass": mass[3] if ids is not None else None,
                "dup_mass": mass[4] if ids is not None else None, "received": None,
                "pooled_mean": None, "pooled_max": None, "row_weights": None}
    empty = torch.isneginf(lse)
    zero = torch.zeros_like(lse)
    pos = torch.arange(spec.n_q, dtype=q.dtype, device=dev) + spec.offset
    distance = torch.where(empty, zero, pos - mass[6])
    m = torch.where(empty, zero, lse * (1.0 / LN2))     # one part, log2 units: m = lse, r = 0
    return (out if v is not None else None, lse, mass[5], distance, mass[7], m, zero, rest)


def second_pass(q_s, k, spec, m_u, r_u, band, ids, before, columns, pooled, rows, keep,
                maxima_only, extras_only: bool = False) -> dict:
    """:func:`_second_pass_rows` on the compiled loop (``stats_pass`` of ``_loop.cpp``): the
    same quantities, one C++ task per head; ``extras_only``: only the columns, pooled maps and
    rows (the compiled forward gave the rest; the dict's other entries are then not filled)."""
    n_bh, n_q, n_k = q_s.shape[0], spec.n_q, spec.n_k
    dev, dt = q_s.device, q_s.dtype
    none_f = torch.empty(0, dtype=dt, device=dev)
    none_i = torch.empty(0, dtype=torch.long, device=dev)
    cq = ck = gq = gk = 0
    if pooled is not None:
        cq, ck = -(-n_q // pooled), -(-n_k // pooled)
        gq, gk = -(-n_q // cq), -(-n_k // ck)
    slot, inverse, n_rows = none_i, None, 0
    if rows is not None:
        unique, inverse = rows.to(dev).unique(return_inverse=True)     # a row asked twice
        slot = torch.full((n_q,), -1, dtype=torch.long, device=dev)
        slot[unique] = torch.arange(unique.numel(), device=dev)
        n_rows = unique.numel()
    keep_f = none_f if keep is None else keep.to(dt).expand(n_bh, n_q).contiguous()
    block_q, block_k = sizes()
    (best, argmax, tied, prev, own, local, match, dup, received, p_sum, p_max,
     row_w) = torch.ops.attnlab_loop.stats_pass(
        q_s.contiguous(), k.contiguous(), (m_u + r_u).to(dt).contiguous(),
        none_i if ids is None else ids.to(dev, torch.long),
        none_i if before is None else before.to(dev, torch.long), keep_f, slot, n_rows,
        spec.kv_groups, *loop.band_args(spec), int(band), bool(columns), cq, ck, gq, gk,
        block_q, block_k, 1 if maxima_only else 2 if extras_only else 0)
    out = {"best": best, "argmax": argmax, "tied": tied, "prev_mass": prev, "self_mass": own,
           "next_mass": torch.zeros_like(prev), "local_mass": local,
           "match_mass": match if ids is not None else None,
           "dup_mass": dup if ids is not None else None,
           "received": received if columns else None, "pooled_mean": None, "pooled_max": None,
           "row_weights": row_w[:, inverse] if rows is not None else None}
    if pooled is not None:
        area = (cell_sizes(n_q, cq, gq, dev, dt)[:, None]
                * cell_sizes(n_k, ck, gk, dev, dt)[None, :])
        out["pooled_mean"] = (p_sum / area.reshape(-1)).reshape(n_bh, gq, gk)
        out["pooled_max"] = p_max.reshape(n_bh, gq, gk)
    return out


def cell_sizes(n: int, cell: int, grid: int, dev, dt) -> torch.Tensor:
    """How many of the n positions fall in each of the grid's cells (the last may be short)."""
    sizes_ = torch.full((grid,), cell, dtype=dt, device=dev)
    sizes_[-1] = n - cell * (grid - 1)
    return sizes_
