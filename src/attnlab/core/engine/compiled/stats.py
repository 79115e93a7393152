"""The statistics' passes on the compiled tile loop (``forward_stats`` and ``rows_pass`` of
:mod:`attnlab.core.engine.compiled.loop`'s library): what :mod:`attnlab.core.engine.eager.stats`
computes on the eager loop, and is tested against. :mod:`attnlab.core.stats` calls them where
the loop is built and takes the call."""

from __future__ import annotations

import torch

from attnlab.core.engine.compiled import loop
from attnlab.core.engine.tiles import LN2, cell_sizes, sizes


def first_pass(q, k, v, spec, sink: tuple[int, int], row_stats, extras=None):
    """:func:`attnlab.core.engine.eager.stats.forward_pass` on the compiled loop, whose forward
    (``forward_stats``) keeps the entropy, the mean key position and the sink mass per row as
    it goes (no extra value columns: the entropy comes from ``sum p (s - m)``, not from
    ``E_p[k]``). Returns the same ``(out or None, lse, entropy, distance, sink_mass, m, r,
    rest)``; ``row_stats``: ``(band, ids, before)`` to have the same pass give the row
    statistics (``rest``, as the second pass's dict), else None (``rest`` None).
    ``extras``: ``(columns, pooled, rows, keep)`` to have it also give the column sums, pooled
    maps and rows (in ``rest``, with ``row_stats``): each query block's weights are kept for
    every key (``block_q x N_k`` floats per thread) until its rows are normalized."""
    dev, dt = q.device, torch.float32
    none_i = torch.empty(0, dtype=torch.long, device=dev)
    band, ids, before = row_stats if row_stats is not None else (0, None, None)
    columns, pooled, rows, keep = extras if extras is not None else (False, None, None, None)
    x = _extras_args(spec, q.shape[0], pooled, rows, keep, dev, dt)
    v_in = v if v is not None else q.new_empty(k.shape[0], k.shape[1], 0)
    (out, lse, best, argmax, tied, mass, received, p_sum, p_max,
     row_w) = torch.ops.attnlab_loop.forward_stats(
        loop.scaled_q(q, spec).contiguous(), k.contiguous(), v_in.contiguous(),
        *_tokens(ids, before, none_i), x["keep"], x["slot"],
        x["n_rows"], spec.kv_groups, *loop.band_args(spec), int(band), int(sink[0]),
        int(sink[1]), row_stats is not None, bool(columns), *x["cells"], *sizes())
    rest = None
    if row_stats is not None:
        rest = {"best": best, "argmax": argmax, "tied": tied, "prev_mass": mass[0],
                "self_mass": mass[1], "next_mass": torch.zeros_like(mass[0]),
                "local_mass": mass[2], "match_mass": mass[3] if ids is not None else None,
                "dup_mass": mass[4] if ids is not None else None,
                **_extras_out(received, p_sum, p_max, row_w, x, columns, pooled, rows, spec)}
    empty = torch.isneginf(lse)
    zero = torch.zeros_like(lse)
    pos = torch.arange(spec.n_q, dtype=q.dtype, device=dev) + spec.offset
    distance = torch.where(empty, zero, pos - mass[6])
    m = torch.where(empty, zero, lse * (1.0 / LN2))     # one part, log2 units: m = lse, r = 0
    return (out if v is not None else None, lse, mass[5], distance, mass[7], m, zero, rest)


def _tokens(ids, before, none_i) -> tuple[torch.Tensor, torch.Tensor]:
    """The token occurrences as the loop reads them: ``occ``, every position sorted by token
    (then position), and ``group (N, 3)``: for the token at each position, where its run in
    ``occ`` starts and ends, and whether ``before[0]`` equals it. ``before`` is ``ids`` one
    position later (``before[j] = ids[j - 1]``), as the census builds it."""
    if ids is None:
        return none_i, none_i
    ids, before = ids.to(none_i.device, torch.long), before.to(none_i.device, torch.long)
    order = torch.argsort(ids, stable=True)
    ranked = ids[order]
    group = torch.stack([torch.searchsorted(ranked, ids), torch.searchsorted(ranked, ids,
                                                                             right=True),
                         (ids == before[0]).long()], 1)
    return order.int(), group.int().contiguous()


def _extras_args(spec, n_bh: int, pooled, rows, keep, dev, dt) -> dict:
    """The loop's arguments for the columns, pooled maps and rows: the rows' keep as float
    ``(BH, N_q)``, each row's slot (-1: not asked) and their number, the cells and their grid
    ``(cq, ck, gq, gk)``, and how the asked rows map to the slots (a row asked twice)."""
    n_q, n_k = spec.n_q, spec.n_k
    cells = (0, 0, 0, 0)
    if pooled is not None:
        cq, ck = -(-n_q // pooled), -(-n_k // pooled)
        cells = (cq, ck, -(-n_q // cq), -(-n_k // ck))
    slot, inverse, n_rows = torch.empty(0, dtype=torch.long, device=dev), None, 0
    if rows is not None:
        unique, inverse = rows.to(dev).unique(return_inverse=True)     # a row asked twice
        slot = torch.full((n_q,), -1, dtype=torch.long, device=dev)
        slot[unique] = torch.arange(unique.numel(), device=dev)
        n_rows = unique.numel()
    keep_f = (torch.empty(0, dtype=dt, device=dev) if keep is None
              else keep.to(dt).expand(n_bh, n_q).contiguous())
    return {"keep": keep_f, "slot": slot, "n_rows": n_rows, "inverse": inverse,
            "cells": cells}


def _extras_out(received, p_sum, p_max, row_w, x: dict, columns, pooled, rows, spec) -> dict:
    """The loop's column sums, pooled sums and maxima and rows as the census's entries."""
    out = {"received": received if columns else None, "pooled_mean": None,
           "pooled_max": None,
           "row_weights": row_w[:, x["inverse"]] if rows is not None else None}
    if pooled is not None:
        cq, ck, gq, gk = x["cells"]
        dev, dt = p_sum.device, p_sum.dtype
        area = (cell_sizes(spec.n_q, cq, gq, dev, dt)[:, None]
                * cell_sizes(spec.n_k, ck, gk, dev, dt)[None, :])
        n_bh = p_sum.shape[0]
        out["pooled_mean"] = (p_sum / area.reshape(-1)).reshape(n_bh, gq, gk)
        out["pooled_max"] = p_max.reshape(n_bh, gq, gk)
    return out


def rows_pass(q_s, k, spec, m_u, r_u, rows, keep) -> dict:
    """The rows picked from the forward's maxima (``rows_pass`` of ``loop.cpp``: only the
    query blocks that hold one are computed), once every row's shift is known;
    ``{"row_weights": (BH, R, N_k)}``."""
    dev, dt = q_s.device, q_s.dtype
    x = _extras_args(spec, q_s.shape[0], None, rows, keep, dev, dt)
    block_q, block_k = sizes()
    row_w = torch.ops.attnlab_loop.rows_pass(
        q_s.contiguous(), k.contiguous(), (m_u + r_u).to(dt).contiguous(), x["keep"], x["slot"],
        x["n_rows"], spec.kv_groups, *loop.band_args(spec), block_q, block_k)
    return {"row_weights": row_w[:, x["inverse"]]}
