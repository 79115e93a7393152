"""The statistics' passes on the eager tile loop: the reference the compiled passes
(:mod:`attnlab.core.engine.compiled.stats`) are tested against, and the path of every request
those do not take. What the statistics are, their dense specification and the choice between
the passes are in :mod:`attnlab.core.stats`.

* where :func:`forward_applies` (the scores are q.k times a constant and every kept key lies at
  or before the query), pass 1 is the tiled forward itself with extra value columns
  (:func:`forward_pass`), and pass 2 (:func:`second_pass`) finds the largest weights,
  the band's masses, prefix matching and, where asked, columns, pooled maps and rows;
* :func:`online_pass`: every other request, pass 1 an online softmax over the tiles of
  :class:`attnlab.core.engine.tiles.Tiles` with one weighted sum per statistic, pass 2
  (:func:`_extras_pass`) the columns, pooled maps and rows.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from attnlab.core.engine.eager.loop import tile_forward
from attnlab.core.engine.tiles import Tiles, base2, cell_sizes, key_blocks, sizes, split_lse

LN2 = math.log(2.0)


def _causal_like(spec) -> bool:
    """Every kept key lies at or before the query's aligned position (causal, or a window
    with no right side), so that ``|p_i - j| = p_i - j``."""
    b = spec.band
    return b is not None and b[1] is not None and b[1] <= 0


def forward_applies(spec, sink) -> bool:
    """Whether the first pass can be the tiled forward itself (see :func:`forward_pass`):
    scores that are q.k times a constant (no float bias, softcap or score_mod), no sinks,
    causal-like."""
    return (sink is None and spec.float_bias() is None and spec.softcap is None
            and spec.score_mod is None and _causal_like(spec) and spec.dropout_p == 0)


def forward_pass(q, k, v, spec, sink: tuple[int, int]):
    """The first pass as the tiled forward with extra value columns: attention averages
    whatever rows V holds, so with ``V' = [V | K | j | 1{j < sink_keys}]`` one forward gives,
    besides the output, ``E_p[k]`` (whence ``E_p[s] = scale q . E_p[k]`` and the entropy
    ``H = lse - E_p[s]``), the mean key position (the distance ``p_i - E_p[j]`` when every kept
    key is at or before the query) and the sink mass. Returns ``(out or None, lse, entropy,
    distance, sink_mass, m, r)``: natural units but for ``lse = m + r`` in the tiles' units
    (0 on rows with no key). The compiled loop's forward keeps these per row instead
    (:func:`attnlab.core.engine.compiled.stats.first_pass`, no extra columns)."""
    n_kv, n_k, d = k.shape
    j = torch.arange(n_k, dtype=k.dtype, device=k.device)
    start, count = sink
    feats = torch.stack([j, ((j >= start) & (j < start + count)).to(k.dtype)], -1).expand(
        n_kv, n_k, 2)
    parts = ([v] if v is not None else []) + [k, feats]
    v_ext = torch.cat(parts, -1)
    spec_ext = dataclasses.replace(spec, d_v=v_ext.shape[-1])
    out, m, r = tile_forward(q, k, v_ext, spec_ext, None)
    unit = LN2 if base2(spec) else 1.0
    lse = split_lse(m, r, base2(spec))
    empty = torch.isneginf(lse)
    d_v = 0 if v is None else v.shape[-1]
    mean_k = out[..., d_v:d_v + d]                                     # E_p[k] (BH, N_q, D)
    # H = lse - E_p[s] = r + (m - E_p[s]) in the tiles' units: m is near the row's largest
    # score, so neither difference loses the digits a large lse would
    mean_s = (q.double() * mean_k.double()).sum(-1) * (spec.score_scale / unit)   # tile units
    zero = torch.zeros_like(lse)
    safe_m = torch.where(empty, zero, m)
    entropy = ((r.double() + (safe_m.double() - mean_s)) * unit).to(lse.dtype)
    entropy = torch.where(empty, zero, entropy).clamp_min(0)
    pos = torch.arange(spec.n_q, dtype=q.dtype, device=q.device) + spec.offset
    distance = torch.where(empty, zero, pos - out[..., d_v + d])
    sink_mass = torch.where(empty, zero, out[..., d_v + d + 1])
    return ((out[..., :d_v] if v is not None else None), lse, entropy, distance, sink_mass,
            safe_m, torch.where(empty, zero, r))


def second_pass(q_s, k, spec, tiles, m_u, r_u, band: int, ids, before, columns,
                      pooled, rows, keep=None, maxima_only: bool = False) -> dict:
    """The rest once every row's ``lse = m + r`` is known (the tiles' units), in one pass over
    the tiles: the largest weight and its key (a max of the scores), the previous-token and
    local mass on the tiles the band reaches, prefix matching (with ids), and what
    :func:`_extras_pass` adds (column sums, pooled maps, rows) where asked. The eager loop's
    (where the compiled loop runs, its forward keeps all of this); ``maxima_only``: the caller
    reads only the maxima."""
    n_bh, n_q, n_k = q_s.shape[0], spec.n_q, spec.n_k
    dev, dt = q_s.device, m_u.dtype
    block_q, block_k = sizes()
    best = torch.full((n_bh, n_q), float("-inf"), dtype=dt, device=dev)
    argmax = torch.full((n_bh, n_q), -1, dtype=torch.long, device=dev)
    tied = torch.zeros((n_bh, n_q), dtype=torch.bool, device=dev)
    prev = torch.zeros((n_bh, n_q), dtype=dt, device=dev)
    own = torch.zeros_like(prev)
    local = torch.zeros_like(prev)
    match = torch.zeros_like(prev) if ids is not None else None
    dup = torch.zeros_like(prev) if ids is not None else None
    extra = _Extra(n_bh, n_q, n_k, dev, dt, columns, pooled, rows, keep)
    off = spec.offset
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        mi, ri = m_u[:, i0:i1, None], r_u[:, i0:i1, None]
        pos = torch.arange(i0, i1, device=dev, dtype=dt)[:, None] + off        # (bq, 1)
        near_lo, near_hi = i0 + off - band, i1 - 1 + off                       # keys in a band
        extra.start(i0, i1)
        for j0, j1, kind in key_blocks(spec, i0, i1, block_k):
            s = tiles.scores(q_s, k, i0, i1, j0, j1, kind)
            if s is None:
                continue
            _running_max(s, best, argmax, tied, i0, i1, j0)
            near = j1 > near_lo and j0 <= near_hi
            if not near and ids is None and not extra.wanted:
                continue
            p = tiles.exp_(s.sub_(mi).sub_(ri))         # s is the tile's scratch: reuse it
            if near:
                keys = torch.arange(j0, j1, device=dev, dtype=dt)[None, :]
                prev[:, i0:i1] += (p * (keys == pos - 1)).sum(-1)
                own[:, i0:i1] += (p * (keys == pos)).sum(-1)
                local[:, i0:i1] += (p * ((pos - keys).abs() <= band)).sum(-1)
            if ids is not None:
                same = _prefix_match(before, ids, pos, i0, i1, j0, j1)           # (bq, bk)
                if bool(same.any()):
                    match[:, i0:i1] += (p * same).sum(-1)
                copy = _prefix_match(ids, ids, pos, i0, i1, j0, j1)
                if bool(copy.any()):
                    dup[:, i0:i1] += (p * copy).sum(-1)
            extra.add(p, i0, i1, j0, j1)
    # the fast path is causal-like: no key after the query is ever kept, so next_mass is 0
    return {"best": best, "argmax": argmax, "tied": tied, "prev_mass": prev, "self_mass": own,
            "next_mass": torch.zeros_like(prev), "local_mass": local, "match_mass": match,
            "dup_mass": dup,
            **extra.result()}


def _prefix_match(before, ids, pos, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """``(bq, bk)``: key j lies before the query's position and ``before[j] = ids[i]``: with
    ``before[j] = ids[j - 1]``, key j follows an earlier occurrence of query i's token (prefix
    matching); with ``before = ids``, key j is an earlier copy of it (duplicate token)."""
    keys = torch.arange(j0, j1, device=pos.device, dtype=pos.dtype)[None, :]
    return (before[j0:j1][None, :] == ids[i0:i1][:, None]) & (keys < pos)


def _running_max(s, best, argmax, tied, i0: int, i1: int, j0: int) -> torch.Tensor:
    """Fold tile ``s (BH, bq, bk)`` into the rows' running largest score, its first key and
    whether another key ties with it; returns the tile's row maxima."""
    top, idx = s.max(-1)
    many = (s == top[..., None]).sum(-1) > 1                  # a tie inside the tile
    old = best[:, i0:i1]
    better, same = top > old, (top == old) & torch.isfinite(top)
    tied[:, i0:i1] = torch.where(better, many, tied[:, i0:i1] | same)
    best[:, i0:i1] = torch.where(better, top, old)
    argmax[:, i0:i1] = torch.where(better, idx + j0, argmax[:, i0:i1])
    return top


class _Extra:
    """Column sums, pooled maps and exact rows, added tile by tile from the weights ``p``."""

    def __init__(self, n_bh, n_q, n_k, dev, dt, columns, pooled, rows, keep=None):
        self.n_q, self.n_k, self.pooled, self.rows = n_q, n_k, pooled, rows
        # rows that count (queries=): the others' weights are zeroed before they are added
        self.keep = None if keep is None else keep.to(dt)[..., None]      # (BH, N_q, 1)
        self.wanted = columns or pooled is not None or rows is not None
        self.received = torch.zeros((n_bh, n_k), dtype=dt, device=dev) if columns else None
        if pooled is not None:
            self.cq, self.ck = -(-n_q // pooled), -(-n_k // pooled)            # cell sides
            self.gq, self.gk = -(-n_q // self.cq), -(-n_k // self.ck)          # grid sides
            self.p_sum = torch.zeros((n_bh, self.gq * self.gk), dtype=dt, device=dev)
            self.p_max = torch.zeros((n_bh, self.gq * self.gk), dtype=dt, device=dev)
        if rows is not None:
            self.rows = rows.to(dev)
            self.row_w = torch.zeros((n_bh, rows.numel(), n_k), dtype=dt, device=dev)
        self.dev, self.dt = dev, dt

    def start(self, i0, i1) -> None:
        if self.rows is not None:
            self.here = ((self.rows >= i0) & (self.rows < i1)).nonzero().flatten()

    def add(self, p, i0, i1, j0, j1) -> None:
        if not self.wanted:
            return
        if self.keep is not None:
            p = p * self.keep[:, i0:i1]
        if self.received is not None:
            self.received[:, j0:j1] += p.sum(1)
        if self.pooled is not None:
            _pool_tile(p, i0, i1, j0, j1, self.cq, self.ck, self.gk, self.p_sum, self.p_max)
        if self.rows is not None and self.here.numel():
            self.row_w[:, self.here, j0:j1] = p[:, self.rows[self.here] - i0]

    def result(self) -> dict:
        out = {"received": self.received, "pooled_mean": None, "pooled_max": None,
               "row_weights": None}
        if self.pooled is not None:
            area = (cell_sizes(self.n_q, self.cq, self.gq, self.dev, self.dt)[:, None]
                    * cell_sizes(self.n_k, self.ck, self.gk, self.dev, self.dt)[None, :])
            n_bh = self.p_sum.shape[0]
            out["pooled_mean"] = (self.p_sum / area.reshape(-1)).reshape(n_bh, self.gq, self.gk)
            out["pooled_max"] = self.p_max.reshape(n_bh, self.gq, self.gk)
        if self.rows is not None:
            out["row_weights"] = self.row_w
        return out


def online_pass(q, k, spec, sink, sink_range: tuple[int, int], band: int, columns: bool, ids,
                pooled=None, rows=None, pick=None, keep=None,
                health: bool = False) -> dict:
    """Every statistic of :func:`attnlab.core.stats.attention_stats` for a request the forward
    pass cannot serve (a float bias, softcap, score_mod, sinks, a band reaching after the query,
    or ``health``): pass 1 an online softmax with one weighted sum per statistic, pass 2
    (:func:`_extras_pass`) the columns, pooled maps and rows once every row's shift is known."""
    n_bh, n_q, n_k = q.shape[0], spec.n_q, spec.n_k
    dev, dt = q.device, q.dtype
    tiles = Tiles(spec, n_bh, spec.float_bias())
    q_s = tiles.q_scaled(q)
    unit = LN2 if tiles.base2 else 1.0          # scores in log2 units when base2
    block_q, block_k = sizes()
    # Pass 1, online over the key blocks of each row block (call units): the row max m, the
    # sum l = sum_j e^(s_ij - m) and, for each statistic f, A_f = sum_j e^(s_ij - m) f_ij, all
    # rescaled by e^(m_old - m_new) when a block raises the max, as the forward rescales its
    # output. Entropy uses A_z = sum_j e^(s_ij - m)(s_ij - m), which moves with m as
    # A_z <- e^(m_old - m_new) (A_z + (m_old - m_new) l). m and l stay apart (not lse = m +
    # log l): under the dtype's minimum on every key (a padded row) m + log l rounds to m.
    sink_lo, sink_hi = sink_range[0], sink_range[0] + sink_range[1]
    names = ["z", "sink_mass", "prev_mass", "self_mass", "next_mass", "local_mass", "distance"]
    if ids is not None:
        names += ["match_mass", "dup_mass"]
        before = torch.cat([ids.new_full((1,), -1), ids[:-1]])        # the token before key j
    if health:          # the kept scores' count, sum and sum of squares; sums of e^2 and e^3
        plain = {name: torch.zeros((n_bh, n_q), dtype=dt, device=dev)
                 for name in ("kept", "score_sum", "score_sq")}
        names += ["e2", "e3"]
    m_all = torch.full((n_bh, n_q), float("-inf"), dtype=dt, device=dev)
    l_all = torch.zeros((n_bh, n_q), dtype=dt, device=dev)
    acc = {name: torch.zeros((n_bh, n_q), dtype=dt, device=dev) for name in names}
    best = torch.full((n_bh, n_q), float("-inf"), dtype=dt, device=dev)
    argmax = torch.full((n_bh, n_q), -1, dtype=torch.long, device=dev)
    tied = torch.zeros((n_bh, n_q), dtype=torch.bool, device=dev)
    off = n_k - n_q
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        pos = torch.arange(i0, i1, device=dev, dtype=dt)[:, None] + off        # (bq, 1)
        m = torch.full((n_bh, i1 - i0), float("-inf"), dtype=dt, device=dev)
        l = torch.zeros((n_bh, i1 - i0), dtype=dt, device=dev)
        a = {name: torch.zeros((n_bh, i1 - i0), dtype=dt, device=dev) for name in names}
        for j0, j1, kind in key_blocks(spec, i0, i1, block_k):
            s = tiles.scores(q_s, k, i0, i1, j0, j1, kind)
            if s is None:
                continue
            top = _running_max(s, best, argmax, tied, i0, i1, j0)
            m_new = torch.maximum(m, top)
            safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            grow = torch.isfinite(m)
            step = torch.where(grow, m - safe, torch.zeros_like(m))          # m_old - m_new
            phi = torch.where(grow, tiles.exp(step), torch.zeros_like(m))
            z = s - safe[..., None]                                           # (BH, bq, bk)
            e = tiles.exp(z)
            ez = torch.where(e > 0, e * z, 0.0).sum(-1)
            # phi * (A_z + step * l), with phi * step (bounded by 1/e) formed first: a row whose
            # earlier tiles hold only finfo.min-masked keys has a huge |step| and a large l,
            # whose product overflows, and 0 * inf would be NaN
            a["z"] = phi * a["z"] + torch.where(phi > 0, phi * step, 0.0) * l + ez
            if health:
                live = torch.isfinite(s)
                sk = torch.where(live, s * unit, 0.0)                         # natural units
                plain["kept"][:, i0:i1] += live.sum(-1)
                plain["score_sum"][:, i0:i1] += sk.sum(-1)
                plain["score_sq"][:, i0:i1] += (sk * sk).sum(-1)
                e2 = e * e
                a["e2"] = a["e2"] * phi * phi + e2.sum(-1)
                a["e3"] = a["e3"] * phi * phi * phi + (e2 * e).sum(-1)
            l = l * phi + e.sum(-1)
            m = m_new
            keys = torch.arange(j0, j1, device=dev, dtype=dt)[None, :]        # (1, bk)
            dist = (pos - keys).abs()                                         # (bq, bk)
            lo, hi = max(sink_lo, j0) - j0, min(sink_hi, j1) - j0
            sink_e = e[..., lo:hi].sum(-1) if hi > lo else 0.0
            a["sink_mass"] = a["sink_mass"] * phi + sink_e
            a["prev_mass"] = a["prev_mass"] * phi + (e * (keys == pos - 1)).sum(-1)
            a["self_mass"] = a["self_mass"] * phi + (e * (keys == pos)).sum(-1)
            a["next_mass"] = a["next_mass"] * phi + (e * (keys == pos + 1)).sum(-1)
            a["local_mass"] = a["local_mass"] * phi + (e * (dist <= band)).sum(-1)
            a["distance"] = a["distance"] * phi + (e * dist).sum(-1)
            if ids is not None:
                copy = _prefix_match(ids, ids, pos, i0, i1, j0, j1)
                a["dup_mass"] = a["dup_mass"] * phi + (e * copy).sum(-1)
                same = _prefix_match(before, ids, pos, i0, i1, j0, j1)        # (bq, bk)
                a["match_mass"] = a["match_mass"] * phi + (e * same).sum(-1)
        m_all[:, i0:i1], l_all[:, i0:i1] = m, l
        for name in names:
            acc[name][:, i0:i1] = a[name]
    keyless = l_all == 0                     # no key kept
    m_all = torch.where(keyless, torch.zeros_like(m_all), m_all)
    empty = keyless
    if sink is not None:                     # one more logit per row, with no value
        su = sink.expand(n_bh, n_q) / unit
        top = torch.where(keyless, su, torch.maximum(m_all, su))
        step = m_all - top
        phi = torch.where(keyless, torch.zeros_like(step), tiles.exp(step))
        es = tiles.exp(su - top)
        acc["z"] = phi * acc["z"] + torch.where(phi > 0, phi * step, 0.0) * l_all \
            + es * (su - top)
        for name in names[1:]:
            if name == "e2":                  # sums of squares and cubes: phi^2, phi^3, and
                acc[name] = acc[name] * phi * phi + es * es           # the sink's own weight
            elif name == "e3":
                acc[name] = acc[name] * phi * phi * phi + es * es * es
            else:
                acc[name] = acc[name] * phi
        l_all = l_all * phi + es
        m_all, empty = top, torch.zeros_like(keyless)
    inv_l = torch.where(empty, torch.zeros_like(l_all), 1.0 / l_all.clamp_min(1e-300))
    log_l = tiles.log(l_all.clamp_min(1e-300))
    lse = torch.where(empty, torch.full_like(m_all, float("-inf")), m_all + log_l)
    stats = {"entropy": torch.where(empty, torch.zeros_like(l_all),
                                    (log_l - acc["z"] * inv_l) * unit)}
    for name in names[1:]:
        if name not in ("e2", "e3"):
            stats[name] = acc[name] * inv_l
    if health:
        stats.update(plain)
        stats["score_max"] = torch.where(keyless, torch.full_like(best, float("-inf")),
                                         best * unit)
        stats["p2"] = acc["e2"] * inv_l * inv_l
        stats["p3"] = acc["e3"] * inv_l * inv_l * inv_l
    top = tiles.exp(torch.where(keyless, m_all, best) - m_all) * inv_l
    stats["max_weight"] = torch.where(keyless, torch.zeros_like(top), top)
    argmax = torch.where(keyless, torch.full_like(argmax, -1), argmax)
    if pick is not None:
        rows = pick(stats["max_weight"] if keep is None else torch.where(
            keep, stats["max_weight"], torch.zeros_like(stats["max_weight"])))
    # pass 2, for the column sums, pooled maps and rows: every row's m and l are known now
    extra = _extras_pass(q_s, k, spec, tiles, m_all, inv_l, columns, pooled, rows, keep)
    stats["tied"] = tied & ~keyless
    return {"lse": torch.where(torch.isneginf(lse), lse, lse * unit), **stats, "argmax": argmax,
            **extra, "row_index": rows}


def _extras_pass(q_s, k, spec, tiles, m_all, inv_l, columns, pooled, rows, keep=None) -> dict:
    """The online path's second pass: ``p = e^(s - m) / l`` tile by tile into :class:`_Extra`."""
    extra = _Extra(q_s.shape[0], spec.n_q, spec.n_k, q_s.device, m_all.dtype, columns, pooled,
                   rows, keep)
    if not extra.wanted:
        return extra.result()
    block_q, block_k = sizes()
    for i0 in range(0, spec.n_q, block_q):
        i1 = min(i0 + block_q, spec.n_q)
        mi, li = m_all[:, i0:i1, None], inv_l[:, i0:i1, None]
        extra.start(i0, i1)
        for j0, j1, kind in key_blocks(spec, i0, i1, block_k):
            s = tiles.scores(q_s, k, i0, i1, j0, j1, kind)
            if s is not None:
                extra.add(tiles.exp(s - mi) * li, i0, i1, j0, j1)      # (BH, bq, bk)
    return extra.result()


def _pool_tile(p, i0, i1, j0, j1, cq, ck, gk, p_sum, p_max) -> None:
    """Add tile ``p (BH, i1 - i0, j1 - j0)`` to the pooled sums and maxima (flat cells
    ``(BH, G_q * G_k)``). A tile that starts on cell boundaries is padded to whole cells and
    reduced by reshaping (zeros change neither a sum nor a max of weights); others scatter."""
    n_bh = p.shape[0]
    if i0 % cq == 0 and j0 % ck == 0:
        pq, pk = (-(i1 - i0)) % cq, (-(j1 - j0)) % ck
        t = torch.nn.functional.pad(p, (0, pk, 0, pq)) if pq or pk else p
        a, b = t.shape[1] // cq, t.shape[2] // ck
        t = t.reshape(n_bh, a, cq, b, ck)
        c0, d0 = i0 // cq, j0 // ck
        grid = p_sum.view(n_bh, -1, gk)
        grid[:, c0:c0 + a, d0:d0 + b] += t.sum((2, 4))
        top = p_max.view(n_bh, -1, gk)[:, c0:c0 + a, d0:d0 + b]
        top.copy_(torch.maximum(top, t.amax((2, 4))))
        return
    dev = p.device
    cell = ((torch.arange(i0, i1, device=dev) // cq)[:, None] * gk
            + (torch.arange(j0, j1, device=dev) // ck)[None, :]).reshape(-1)
    flat = p.reshape(n_bh, -1)
    index = cell.expand(n_bh, -1)
    p_sum.scatter_add_(1, index, flat)
    p_max.scatter_reduce_(1, index, flat, "amax")


