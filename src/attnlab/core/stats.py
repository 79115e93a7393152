"""Statistics of every attention row and column without the N_q x N_k matrix.

:func:`attention_stats` answers the questions asked of attention at long context (where the
sinks are, which heads stay local, how much attention each token receives) in memory linear
in the sequence length. It walks the tiles of the ``tiled`` backend (the same scores, masks,
bias, softcap and score_mod, :class:`attnlab.core.engine.tiles.Tiles`) twice:

1. online, as the forward's softmax: ``m <- max(m, max_j s_ij)``,
   ``l <- l e^(m_old - m) + sum_j e^(s_ij - m)`` and, for each row statistic, the weighted sum
   ``A_f <- A_f e^(m_old - m) + sum_j e^(s_ij - m) f_ij``; the statistic is ``A_f / l`` (the
   entropy from ``A_z``, the sum of ``e^(s - m)(s - m)``, as ``log l - A_z / l``); sinks enter
   as one more logit;
2. only for the column sums, which need every row's ``m`` and ``l`` first: each tile's weights
   ``p_ij = e^(s_ij - m_i) / l_i`` again, summed over the rows.

Where the scores are ``q.k`` times a constant and every kept key lies at or before the query
(causal, a left window, padding; no float bias, softcap, score_mod or sinks), pass 1 is the
tiled forward itself: attention averages whatever rows V holds, so the forward of
``V' = [V | K | j | 1{sink}]`` gives the output, ``E_p[k]`` (so ``E_p[s]`` and the
entropy ``H = lse - E_p[s]``), the mean key position (the distance) and the sink mass in one
sweep, and a model run by the census (:mod:`attnlab.inspect.census`) takes its attention output
from that same pass. The second pass then finds the largest weights (a max of the scores), the
band's masses (only on the tiles the band reaches), prefix matching and, where asked, the
column sums, pooled maps and rows. On the compiled tile loop
(:mod:`attnlab.core.engine.compiled.stats`) the forward keeps all of these itself, the entropy from
``sum p (s - m)``, and only rows picked by a function of the largest weights take a second pass.

Per query row i (aligned position ``p_i = i + N_k - N_q``, attnlab's bottom-right alignment):

* ``lse``; ``entropy`` ``H_i = -sum_j p_ij log p_ij`` (the sink's own share included);
* ``max_weight`` and ``argmax`` (the first key with the largest weight); ``tied``: whether
  another key holds the same largest weight (a 50/50 split has no single argmax);
* ``sink_mass``: the mass on the ``sink_keys`` keys from ``sink_start`` (the first real token:
  after left padding, ``sink_start`` is the number of padding keys);
* ``prev_mass``, ``self_mass``, ``next_mass``: the mass on key ``p_i - 1``, ``p_i``, ``p_i + 1``;
* ``local_mass``: the mass on keys with ``|j - p_i| <= band``;
* ``distance``: the mean attention distance ``sum_j p_ij |p_i - j|``;
* ``match_mass`` (with token ``ids``): the mass on keys whose previous token is the query's
  token, ``sum_{1 <= j < p_i, ids[j-1] = ids[i]} p_ij`` (Olsson et al. 2022's prefix matching:
  an induction head attends to the token after an *earlier* occurrence of the current one; keys
  at or after the query are not counted, so an encoder's next-token head, whose key ``i + 1``
  follows the query's own token, is not taken for one); ``dup_mass``: the mass on earlier
  copies of the query's token, ``sum_{j < p_i, ids[j] = ids[i]} p_ij`` (Olsson et al.'s
  duplicate-token detector);

and per key j, ``received``: ``sum_i p_ij``, the attention it receives.

With ``health=True`` (the general pass), also per row what the training diagnostics
(:mod:`attnlab.diagnose`) reduce: ``kept`` (the number of kept keys), ``score_sum`` and
``score_sq`` (the sum and the sum of squares of the kept scores, natural units, masks added),
``score_max``, and the softmax Jacobian's terms ``p2 = sum_j p_ij^2`` and ``p3 = sum_j p_ij^3``
(``||diag(p) - p p^T||_F^2 = p2 - 2 p3 + p2^2``).

Pass 2 can also keep pictures and exact rows, still without the matrix: ``pooled=G`` pools the
weights onto a ``G x G`` grid of cells of ``ceil(N_q / G) x ceil(N_k / G)`` weights
(``pooled_mean``: the cell's mean weight, masked weights counting as 0; ``pooled_max``: its
largest), and ``rows=`` keeps the whole weight rows of the queries named (``row_weights``;
``row_index`` says which rows came back, in order). ``rows`` may also be a function of the
rows' largest weights ``(BH, N_q)`` that returns the indices, called once those are known
(a report picks its rows by what the heads do: :mod:`attnlab.inspect.census` takes each
layer's sharpest late rows that way).

A row that keeps no key (fully masked) has lse ``-inf`` and every statistic 0 (argmax -1),
never NaN. ``queries=`` names the rows that count (a padded sequence's real tokens): the others
are reported as rows with no key and add nothing to ``received``, the pooled maps or the rows.
Weights are those of the softmax before dropout. :func:`reference_stats` computes
the same from dense weights: the specification the tests hold the tiled pass to. The two passes
themselves are in :mod:`attnlab.core.engine.eager.stats`.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from attnlab.core.engine.compiled import loop
from attnlab.core.engine.compiled import stats as compiled_stats
from attnlab.core.engine.eager import stats as eager_stats
from attnlab.core.engine.tiles import Tiles, tile_sizes
from attnlab.core.spec import build_spec, compute_dtype

FIELDS = ("lse", "entropy", "max_weight", "argmax", "tied", "sink_mass", "prev_mass",
          "self_mass", "next_mass", "local_mass", "distance", "received")
ROW_FIELDS = ("lse", "entropy", "max_weight", "argmax", "tied", "sink_mass", "prev_mass",
              "self_mass", "next_mass", "local_mass", "distance", "match_mass", "dup_mass")


@dataclass
class AttentionStats:
    """Row statistics ``(..., N_q)`` and column sums ``(..., N_k)`` (None when not asked);
    see the module docstring for their definitions."""

    lse: torch.Tensor
    entropy: torch.Tensor
    max_weight: torch.Tensor
    argmax: torch.Tensor
    tied: torch.Tensor
    sink_mass: torch.Tensor
    prev_mass: torch.Tensor
    self_mass: torch.Tensor
    next_mass: torch.Tensor
    local_mass: torch.Tensor
    distance: torch.Tensor
    received: torch.Tensor | None
    match_mass: torch.Tensor | None = None
    dup_mass: torch.Tensor | None = None
    pooled_mean: torch.Tensor | None = None
    pooled_max: torch.Tensor | None = None
    row_weights: torch.Tensor | None = None
    row_index: torch.Tensor | None = None
    out: torch.Tensor | None = None
    kept: torch.Tensor | None = None            # health=True
    score_sum: torch.Tensor | None = None
    score_sq: torch.Tensor | None = None
    score_max: torch.Tensor | None = None
    p2: torch.Tensor | None = None
    p3: torch.Tensor | None = None


def _check_options(sink_keys, band, sink_start=0) -> None:
    if not isinstance(sink_keys, int) or isinstance(sink_keys, bool) or sink_keys < 0:
        raise ValueError(f"sink_keys must be an int >= 0 (how many first keys count as the "
                         f"sink), got {sink_keys!r}")
    if not isinstance(sink_start, int) or isinstance(sink_start, bool) or sink_start < 0:
        raise ValueError(f"sink_start must be an int >= 0 (the index of the first real key, "
                         f"the number of left-padding keys), got {sink_start!r}")
    if not isinstance(band, int) or isinstance(band, bool) or band < 0:
        raise ValueError(f"band must be an int >= 0 (keys within this distance of the "
                         f"query's position count as local), got {band!r}")


def attention_stats(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None = None, *,
                    mask=None, causal: bool = False,
                    window=None, scale: float | None = None, temperature: float = 1.0,
                    softcap: float | None = None, score_mod=None,
                    sinks: torch.Tensor | None = None, enable_gqa: bool = False,
                    sink_keys: int = 1, sink_start: int = 0, band: int = 16,
                    columns: bool = True, ids: torch.Tensor | None = None,
                    queries: torch.Tensor | None = None, pooled: int | None = None,
                    rows=None, health: bool = False, slow: bool = False,
                    block: tuple[int, int] | None = None) -> AttentionStats:
    """Statistics of the attention weights of ``softmax(q k^T * scale / T + mask)``, in memory
    linear in the sequence length (see the module docstring).

    Args:
        q: ``(..., N_q, D)``; k: ``(..., N_k, D)`` (``H_kv`` heads under ``enable_gqa``).
        v: the values ``(..., N_k, D_v)``, optional: where the first pass is the tiled forward
            (causal-like masks, scores without bias, softcap, score_mod or sinks), the
            attention output comes with the statistics (``out``, q's dtype), as
            ``attnlab.attention(q, k, v, ...)`` on ``tiled`` computes it; else ``out`` is None.
        mask, causal, window, scale, temperature, softcap, score_mod, sinks, enable_gqa: as
            :func:`attnlab.attention` (values are not needed).
        sink_keys: how many keys from ``sink_start`` make the sink (default 1: one token).
        sink_start: the first of them (default 0; after left padding, the first real key).
        band: keys within this distance of the query's aligned position are local.
        columns: also the attention each key receives (a second pass over the tiles).
        ids: the token ids ``(N,)`` of a self-attention (N_q = N_k), for ``match_mass``.
        queries: bool ``(N_q,)`` or broadcastable to ``(..., N_q)``: the rows that count (a
            padded sequence's real tokens). The others get lse -inf and zero statistics and
            add nothing to ``received``, pooled maps or rows (default: every row).
        pooled: the side G of the pooled maps ``pooled_mean`` / ``pooled_max``
            ``(..., G_q, G_k)`` with ``G_q = ceil(N_q / ceil(N_q / G))`` (at most G; N_q
            itself when N_q <= G). Implies the second pass.
        rows: query indices whose exact weights are returned, ``row_weights (..., R, N_k)``
            in the order given, or a function ``pick(max_weight (BH, N_q)) -> indices`` called
            once the largest weights are known. Implies the second pass.
        health: also the scores' sums, maxima and kept counts and the softmax Jacobian's terms
            per row (see the module docstring; takes the general pass).
        slow: always take the general online pass (the fast path's specification in tests).
        block: the tiles ``(block_q, block_k)`` (default: the tiled backend's).

    Returns:
        :class:`AttentionStats`, float32 for half-precision inputs, else q's dtype.
    """
    _check_options(sink_keys, band, sink_start)
    if pooled is not None and (not isinstance(pooled, int) or isinstance(pooled, bool)
                               or pooled < 1):
        raise ValueError(f"pooled must be an int >= 1 (the side of the pooled maps), got "
                         f"{pooled!r}")
    spec = build_spec(q, k, k, mask=mask, causal=causal, window=window, scale=scale,
                      temperature=temperature, softcap=softcap, score_mod=score_mod,
                      enable_gqa=enable_gqa)
    if spec.mask is not None and spec.mask.requires_grad:
        raise ValueError("attention_stats does not differentiate: pass mask.detach()")
    compute = compute_dtype(q.dtype)
    n_bh, n_kv = math.prod(spec.batch_shape), math.prod(spec.kv_batch_shape)
    with torch.no_grad():
        qf = q.expand(*spec.batch_shape, *q.shape[-2:]).reshape(n_bh, spec.n_q, spec.d_k)
        kf = k.expand(*spec.kv_batch_shape, *k.shape[-2:]).reshape(n_kv, spec.n_k, spec.d_k)
        qf, kf = qf.to(compute), kf.to(compute)
        sink = None
        if sinks is not None:
            sink = sinks.to(compute).expand(spec.batch_shape).reshape(n_bh, 1)
        if ids is not None:
            ids = torch.as_tensor(ids).reshape(-1).to(q.device)
            if ids.numel() != spec.n_k or spec.n_q != spec.n_k:
                raise ValueError(f"ids must be one token id per position of a self-attention, "
                                 f"({spec.n_k},) for N_q = N_k = {spec.n_k}; got "
                                 f"{tuple(ids.shape)} for N_q = {spec.n_q}")
        keep_rows = None
        if queries is not None:
            queries = torch.as_tensor(queries, device=q.device)
            if queries.dtype != torch.bool or queries.shape[-1] != spec.n_q:
                raise ValueError(f"queries must be a bool tensor (True: the row counts) of shape "
                                 f"(N_q,) = ({spec.n_q},) or broadcastable to "
                                 f"{(*spec.batch_shape, spec.n_q)}; got {queries.dtype} of shape "
                                 f"{tuple(queries.shape)}")
            try:
                keep_rows = queries.expand(*spec.batch_shape, spec.n_q).reshape(n_bh, spec.n_q)
            except RuntimeError:
                raise ValueError(f"queries of shape {tuple(queries.shape)} does not broadcast "
                                 f"to {(*spec.batch_shape, spec.n_q)}") from None
        pick = rows if callable(rows) else None
        rows = None if pick is not None else _checked_rows(rows, spec.n_q)
        if pick is not None:
            def pick(top, _user=pick, _n=spec.n_q):         # the indices the function gives
                return _checked_rows(_user(top), _n).to(top.device)
        with (tile_sizes(*block) if block is not None else contextlib.nullcontext()):
            if eager_stats.forward_applies(spec, sink) and not slow and not health:
                vf = None
                if v is not None:
                    vf = v.expand(*spec.kv_batch_shape, *v.shape[-2:]).reshape(
                        n_kv, spec.n_k, v.shape[-1]).to(compute)
                out = _forward_based(qf, kf, vf, spec, (sink_start, sink_keys), band,
                                       columns, ids, pooled, rows, pick, keep_rows)
                if out["out"] is not None:
                    out["out"] = out["out"].to(q.dtype)
            else:
                out = eager_stats.online_pass(qf, kf, spec, sink, (sink_start, sink_keys), band,
                                             columns, ids, pooled, rows, pick, keep_rows, health)
        if keep_rows is not None:
            _drop_rows(out, keep_rows)
    shape = spec.batch_shape
    index = out.pop("row_index")
    out.pop("keep", None)
    return AttentionStats(**{name: (None if t is None else
                                    t.reshape(*shape, *t.shape[1:]))
                             for name, t in out.items()}, row_index=index)


def _checked_rows(rows, n_q: int) -> torch.Tensor | None:
    if rows is None:
        return None
    rows = torch.as_tensor(rows, dtype=torch.long).reshape(-1)
    bad = (rows < 0) | (rows >= n_q)
    if bad.any():
        raise ValueError(f"rows must be query indices in [0, {n_q}), got "
                         f"{rows[bad].tolist()[:5]}")
    return rows


def _drop_rows(out: dict, keep: torch.Tensor) -> None:
    """Rows that do not count (``queries=``) read as rows with no key: lse -inf, statistics 0,
    argmax -1 (their columns, pooled cells and exact rows were left out in the pass)."""
    for name in ROW_FIELDS:
        t = out.get(name)
        if t is None:
            continue
        fill = float("-inf") if name == "lse" else (-1 if name == "argmax" else 0)
        fill = False if t.dtype == torch.bool else fill
        out[name] = torch.where(keep, t, torch.full_like(t, fill))


def reference_stats(weights: torch.Tensor, *, lse: torch.Tensor | None = None,
                    sink_weight: torch.Tensor | None = None, sink_keys: int = 1,
                    sink_start: int = 0, band: int = 16, ids: torch.Tensor | None = None,
                    queries: torch.Tensor | None = None) -> AttentionStats:
    """The same statistics from dense weights ``(..., N_q, N_k)`` (the specification):
    ``lse`` is passed through; ``sink_weight`` ``(..., N_q)``, the sinks' share of each row,
    enters the entropy; ``queries`` as :func:`attention_stats`'s (rows that do not count are
    zeroed first, and their lse is -inf)."""
    _check_options(sink_keys, band, sink_start)
    w = weights
    if queries is not None:
        keep = torch.as_tensor(queries, device=w.device)[..., None]
        w = torch.where(keep, w, torch.zeros_like(w))
        if lse is not None:
            lse = torch.where(keep[..., 0], lse, torch.full_like(lse, float("-inf")))
        if sink_weight is not None:
            sink_weight = torch.where(keep[..., 0], sink_weight, torch.zeros_like(sink_weight))
    n_q, n_k = w.shape[-2:]
    pos = torch.arange(n_q, dtype=w.dtype, device=w.device)[:, None] + (n_k - n_q)
    keys = torch.arange(n_k, dtype=w.dtype, device=w.device)[None, :]
    dist = (pos - keys).abs()
    plogp = torch.where(w > 0, w * torch.log(w.clamp_min(1e-300)), torch.zeros_like(w))
    entropy = -plogp.sum(-1)
    if sink_weight is not None:
        entropy = entropy - torch.where(sink_weight > 0, sink_weight
                                        * torch.log(sink_weight.clamp_min(1e-300)),
                                        torch.zeros_like(sink_weight))
    top, arg = w.max(-1)
    empty = w.sum(-1) == 0
    if sink_weight is not None:
        empty = empty & (sink_weight == 0)
    return AttentionStats(
        lse=lse if lse is not None else torch.full_like(entropy, float("nan")),
        entropy=entropy, max_weight=torch.where(empty, torch.zeros_like(top), top),
        argmax=torch.where(w.sum(-1) == 0, torch.full_like(arg, -1), arg),
        tied=((w == top[..., None]).sum(-1) > 1) & ~empty,
        sink_mass=w[..., sink_start:sink_start + sink_keys].sum(-1),
        prev_mass=(w * (keys == pos - 1)).sum(-1), self_mass=(w * (keys == pos)).sum(-1),
        next_mass=(w * (keys == pos + 1)).sum(-1),
        local_mass=(w * (dist <= band)).sum(-1), distance=(w * dist).sum(-1),
        received=w.sum(-2), match_mass=None if ids is None else (w * (
            (torch.cat([ids.new_full((1,), -1), ids[:-1]])[None, :] == ids[:, None])
            & (keys < pos))).sum(-1),
        dup_mass=None if ids is None else (w * ((ids[None, :] == ids[:, None])
                                                & (keys < pos))).sum(-1))


def _forward_based(q, k, v, spec, sink: tuple[int, int], band: int, columns: bool, ids,
                     pooled=None, rows=None, pick=None, keep=None) -> dict:
    """The statistics where :func:`~attnlab.core.engine.eager.stats.forward_applies` holds. Eager:
    the forward with extra value columns, then one pass over the tiles for the maxima, the band's
    masses, prefix matching and (where asked) the column sums, pooled maps and rows; rows picked by
    a function cost a pass of maxima before it. Compiled: the forward keeps all of the row
    statistics, maxima included, and the columns, pooled maps and named rows; rows picked from the
    maxima take a second pass over the query blocks that hold them."""
    before = None
    if ids is not None:
        before = torch.cat([ids.new_full((1,), -1), ids[:-1]])
    # the compiled forward gives the row statistics too (rest), and the columns, pooled maps
    # and rows named in advance; the eager one gives none of them
    wanted = columns or pooled is not None or (rows is not None and pick is None)
    if loop.wanted(spec):
        out, lse, entropy, distance, sink_mass, m_u, r_u, rest = compiled_stats.first_pass(
            q, k, v, spec, sink, (band, ids, before),
            (columns, pooled, rows if pick is None else None, keep) if wanted else None)
    else:
        out, lse, entropy, distance, sink_mass, m_u, r_u = eager_stats.forward_pass(
            q, k, v, spec, sink)
        rest = None
    tiles = Tiles(spec, q.shape[0], None)
    q_s = tiles.q_scaled(q)
    empty = torch.isneginf(lse)
    if pick is not None:    # rows picked by their largest weights (eager: a pass of maxima)
        best = rest["best"] if rest is not None else eager_stats.second_pass(
            q_s, k, spec, tiles, m_u, r_u, 0, None, None, False, None, None,
            maxima_only=True)["best"]
        top = torch.where(empty, torch.zeros_like(lse), tiles.exp(best - m_u - r_u))
        if keep is not None:
            top = torch.where(keep, top, torch.zeros_like(top))
        rows = pick(top)
    if rest is None:
        rest = eager_stats.second_pass(q_s, k, spec, tiles, m_u, r_u, band, ids, before, columns,
                                 pooled, rows, keep)
    elif pick is not None and rows is not None:     # rows known only now: their blocks again
        more = compiled_stats.rows_pass(q_s, k, spec, m_u, r_u, rows, keep)
        rest["row_weights"] = more["row_weights"]
    zero = torch.zeros_like(lse)
    max_weight = torch.where(empty, zero, tiles.exp(rest["best"] - m_u - r_u))
    argmax = torch.where(empty, torch.full_like(rest["argmax"], -1), rest["argmax"])
    stats = {"lse": lse, "entropy": entropy, "max_weight": max_weight, "argmax": argmax,
             "tied": rest["tied"] & ~empty,
             "sink_mass": sink_mass, "prev_mass": rest["prev_mass"],
             "self_mass": rest["self_mass"], "next_mass": rest["next_mass"],
             "local_mass": rest["local_mass"], "distance": distance}
    if ids is not None:
        stats["match_mass"], stats["dup_mass"] = rest["match_mass"], rest["dup_mass"]
    extra = {name: rest[name] for name in ("received", "pooled_mean", "pooled_max",
                                           "row_weights")}
    return {**stats, **extra, "row_index": rows, "out": out}
