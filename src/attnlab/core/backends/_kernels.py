"""Triton kernels of the ``triton`` and ``triton_blocksparse`` backends (FlashAttention-2 style).

Imported only when one of those backends runs (``import triton`` is optional). Each program
instance owns one block of rows and keeps its running state in registers / shared memory; the
N_q x N_k matrix never exists in global memory (docs/efficient.md draws the grids)::

    forward       grid (ceil(N_q / BLOCK_M), BH)    one query block, loop over its key blocks
    backward dK dV grid (ceil(N_k / BLOCK_N), BKV)  one key block, loop over the query blocks
                                                    (and, under GQA, the G query heads) that see it
    backward dQ   grid (ceil(N_q / BLOCK_M), BH)    one query block, loop over its key blocks

Notation as in ``docs/math.md`` and :mod:`attnlab.core.backends.tiled`, which computes the same
thing with PyTorch ops: ``S = c Q K^T`` (c = scale / temperature), optionally soft-capped
``S <- cap tanh(S / cap)``, masked to -inf; the forward keeps the row max ``m``, the row sum
``l`` and the unnormalized output ``acc`` and rescales them by ``exp(m_old - m_new)`` when a
new block raises the max; ``lse = m + log l``. The backward recomputes ``P = exp(S - lse)`` and
uses ``D_i = dO_i . O_i - dlse_i`` (computed by the caller)::

    dV += P^T dO      dP = dO V^T      dS = P * (dP - D) [* (1 - tanh^2) under a cap]
    dK += dS^T Q c    dQ += dS K c

Masks. The dense kernels take the causal / window band and per-sequence lengths as numbers:
query i of sequence b is real when ``i < q_len[b]``, key j when ``j < kv_len[b]``, and the band
keeps ``p - left <= j <= p + right`` with ``p = i + off[b]``. The block-sparse kernels walk the
tiles of a :class:`~attnlab.core.layout.BlockLayout` (compressed by row and by column) and read
each partial tile's exact keep-mask. Rows that keep nothing end with ``l = 0``: output 0,
lse -inf, and zero gradients, never NaN.

Precision. fp16 / bf16 tiles enter ``tl.dot`` in their own dtype with float32 accumulation (as
flash kernels do); float32 uses full-precision products (``input_precision="ieee"``), not TF32,
so that the same tolerance rule as every other backend applies.
"""

from __future__ import annotations

import triton
import triton.language as tl

INTERPRETED = bool(triton.knobs.runtime.interpret)


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    # UPCAST: Triton's interpreter multiplies bfloat16 tiles wrongly; their products are exact
    # in float32, so the test suite computes them there (a GPU multiplies them natively).
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _tanh(x):
    # tanh without libdevice (which the interpreter lacks): 1 - 2 / (exp(2|x|) + 1), signed
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _scores(q, kt, scale, cap, SOFTCAP: tl.constexpr, PRECISION: tl.constexpr,
            UPCAST: tl.constexpr):
    """``c q k^T`` of one tile (float32), capped; with a cap also ``tanh`` (for its gradient)."""
    s = _dot(q, kt, PRECISION, UPCAST) * scale
    t = s
    if SOFTCAP:
        t = _tanh(s / cap)
        s = cap * t
    return s, t


@triton.jit
def _band_keep(offs_m, offs_n, q_len, k_len, off, left, right,
               HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """Keep-mask ``(BLOCK_M, BLOCK_N)`` of real queries and keys inside the band."""
    keep = (offs_m[:, None] < q_len) & (offs_n[None, :] < k_len)
    p = offs_m[:, None] + off
    if HAS_LEFT:
        keep = keep & (offs_n[None, :] >= p - left)
    if HAS_RIGHT:
        keep = keep & (offs_n[None, :] <= p + right)
    return keep


@triton.jit
def _online_step(s, v, m_i, l_i, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """Fold one masked tile ``s (BLOCK_M, BLOCK_N)`` and its values into (m, l, acc)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)       # empty so far: exp(-inf) = 0
    p = tl.exp(s - m_use[:, None])
    alpha = tl.exp(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PRECISION, UPCAST)
    return m_new, l_i, acc


@triton.jit
def _finish(acc, m_i, l_i, O, LSE, bh, offs_m, offs_dv, so_bh, so_n, n_q, d_v):
    """Normalize and store one block of rows: out = acc / l, lse = m + log l (0 and -inf on
    rows that kept nothing)."""
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), m_i + tl.log(l_safe))
    rows = offs_m < n_q
    tl.store(O + bh * so_bh + offs_m[:, None] * so_n + offs_dv[None, :],
             out.to(O.dtype.element_ty), mask=rows[:, None] & (offs_dv[None, :] < d_v))
    tl.store(LSE + bh * n_q + offs_m, lse, mask=rows)


@triton.jit
def _ds(s, t, vt, do, lse, delta, keep,
        SOFTCAP: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """Recomputed probabilities P and the score gradient dS of one tile."""
    p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
    dp = _dot(do, vt, PRECISION, UPCAST)
    ds = p * (dp - delta[:, None])
    if SOFTCAP:
        ds = ds * (1.0 - t * t)
    return p, ds


# ----------------------------------------------------------------------------- dense kernels


@triton.jit
def _offsets(start, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_DK: tl.constexpr,
             BLOCK_DV: tl.constexpr):
    """A program's own block of positions (``start``-th of BLOCK_A), the other side's block
    offsets, and the head dims' offsets."""
    return (start * BLOCK_A + tl.arange(0, BLOCK_A), tl.arange(0, BLOCK_B),
            tl.arange(0, BLOCK_DK), tl.arange(0, BLOCK_DV))


@triton.jit
def _load_rows(P, bh, s_bh, s_n, offs, offs_d, n, d):
    """The ``[len(offs), len(offs_d)]`` block of rows ``offs`` of head ``bh`` (0 past n, d)."""
    return tl.load(P + bh * s_bh + offs[:, None] * s_n + offs_d[None, :],
                   mask=(offs[:, None] < n) & (offs_d[None, :] < d), other=0.0)


@triton.jit
def _load_cols(P, bh, s_bh, s_n, offs, offs_d, n, d):
    """The same block transposed, ``[len(offs_d), len(offs)]`` (K and V as the scores and
    dP = dO V^T read them)."""
    return tl.load(P + bh * s_bh + offs[None, :] * s_n + offs_d[:, None],
                   mask=(offs[None, :] < n) & (offs_d[:, None] < d), other=0.0)


@triton.jit
def _store_rows(P, bh, s_bh, s_n, offs, offs_d, n, d, x):
    """Writes ``x`` to rows ``offs`` of head ``bh`` in P's dtype (within n, d)."""
    tl.store(P + bh * s_bh + offs[:, None] * s_n + offs_d[None, :], x.to(P.dtype.element_ty),
             mask=(offs[:, None] < n) & (offs_d[None, :] < d))


@triton.jit
def _query_rows(Q, DO, LSE, DELTA, bh, sq_bh, sq_n, sdo_bh, sdo_n, offs_m, offs_dk, offs_dv,
                n_q, d_k, d_v):
    """What the backward reads of a block of queries: q, dO, lse (inf past n_q: P = 0 there)
    and D = dO . O - dlse."""
    rows = offs_m < n_q
    q = _load_rows(Q, bh, sq_bh, sq_n, offs_m, offs_dk, n_q, d_k)
    do = _load_rows(DO, bh, sdo_bh, sdo_n, offs_m, offs_dv, n_q, d_v)
    lse = tl.load(LSE + bh * n_q + offs_m, mask=rows, other=float("inf"))
    delta = tl.load(DELTA + bh * n_q + offs_m, mask=rows, other=0.0)
    return q, do, lse, delta


@triton.jit
def _key_range(start_m, q_len, k_len, off, left, right, HAS_LEFT: tl.constexpr,
               HAS_RIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The key blocks a block of queries visits: only those the band (and the sequence's
    length) reaches, ``range(lo, hi, BLOCK_N)``."""
    lo = 0
    hi = k_len
    if HAS_LEFT:
        lo = tl.maximum(0, start_m * BLOCK_M + off - left)
    if HAS_RIGHT:
        hi = tl.minimum(hi, tl.minimum((start_m + 1) * BLOCK_M, q_len) - 1 + off + right + 1)
    return (lo // BLOCK_N) * BLOCK_N, hi


@triton.jit
def flash_fwd(Q, K, V, O, LSE, QLEN, KLEN, OFF,
              sq_bh, sq_n, sk_bh, sk_n, sv_bh, sv_n, so_bh, so_n,
              n_q, n_k, d_k, d_v, H, G, scale, cap, left, right,
              HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr,
              BLOCK_DV: tl.constexpr,
              PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    kvh = bh // G                          # GQA: the G query heads of a K/V head are adjacent
    q_len, k_len, off = tl.load(QLEN + b), tl.load(KLEN + b), tl.load(OFF + b)
    offs_m, offs_n0, offs_dk, offs_dv = _offsets(start_m, BLOCK_M, BLOCK_N, BLOCK_DK,
                                                 BLOCK_DV)
    q = _load_rows(Q, bh, sq_bh, sq_n, offs_m, offs_dk, n_q, d_k)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    lo, hi = _key_range(start_m, q_len, k_len, off, left, right, HAS_LEFT, HAS_RIGHT,
                        BLOCK_M, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kt = _load_cols(K, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k)
        v = _load_rows(V, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v)
        s, _ = _scores(q, kt, scale, cap, SOFTCAP, PRECISION, UPCAST)
        keep = _band_keep(offs_m, offs_n, q_len, k_len, off, left, right, HAS_LEFT, HAS_RIGHT)
        s = tl.where(keep, s, float("-inf"))
        m_i, l_i, acc = _online_step(s, v, m_i, l_i, acc, PRECISION, UPCAST)
    _finish(acc, m_i, l_i, O, LSE, bh, offs_m, offs_dv, so_bh, so_n, n_q, d_v)


@triton.jit
def flash_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, QLEN, KLEN, OFF,
                   sq_bh, sq_n, sk_bh, sk_n, sv_bh, sv_n, sdo_bh, sdo_n,
                   n_q, n_k, d_k, d_v, H, G, scale, cap, left, right,
                   HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr,
                   BLOCK_DV: tl.constexpr,
              PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    start_n = tl.program_id(0)
    kvh = tl.program_id(1)
    offs_n, offs_m0, offs_dk, offs_dv = _offsets(start_n, BLOCK_N, BLOCK_M, BLOCK_DK,
                                                 BLOCK_DV)
    kt = _load_cols(K, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k)
    vt = _load_cols(V, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v)
    dk = tl.zeros([BLOCK_N, BLOCK_DK], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    for g in range(0, G):                  # the query heads sharing this K/V head: no atomics
        bh = kvh * G + g
        b = bh // H
        q_len, k_len, off = tl.load(QLEN + b), tl.load(KLEN + b), tl.load(OFF + b)
        # Queries whose band reaches these keys: j - off - right <= i <= j - off + left.
        lo = 0
        hi = q_len
        if HAS_RIGHT:
            lo = tl.maximum(0, start_n * BLOCK_N - off - right)
        if HAS_LEFT:
            hi = tl.minimum(hi, (start_n + 1) * BLOCK_N - 1 - off + left + 1)
        lo = (lo // BLOCK_M) * BLOCK_M
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + offs_m0
            q, do, lse, delta = _query_rows(Q, DO, LSE, DELTA, bh, sq_bh, sq_n, sdo_bh, sdo_n,
                                            offs_m, offs_dk, offs_dv, n_q, d_k, d_v)
            s, t = _scores(q, kt, scale, cap, SOFTCAP, PRECISION, UPCAST)
            keep = _band_keep(offs_m, offs_n, q_len, k_len, off, left, right,
                              HAS_LEFT, HAS_RIGHT)
            p, ds = _ds(s, t, vt, do, lse, delta, keep, SOFTCAP, PRECISION, UPCAST)
            dv += _dot(tl.trans(p).to(do.dtype), do, PRECISION, UPCAST)
            dk += _dot(tl.trans(ds).to(q.dtype), q, PRECISION, UPCAST)
    _store_rows(DK, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k, dk * scale)
    _store_rows(DV, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v, dv)


@triton.jit
def flash_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ, QLEN, KLEN, OFF,
                 sq_bh, sq_n, sk_bh, sk_n, sv_bh, sv_n, sdo_bh, sdo_n,
                 n_q, n_k, d_k, d_v, H, G, scale, cap, left, right,
                 HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr,
                 BLOCK_DV: tl.constexpr,
              PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    kvh = bh // G
    q_len, k_len, off = tl.load(QLEN + b), tl.load(KLEN + b), tl.load(OFF + b)
    offs_m, offs_n0, offs_dk, offs_dv = _offsets(start_m, BLOCK_M, BLOCK_N, BLOCK_DK,
                                                 BLOCK_DV)
    q, do, lse, delta = _query_rows(Q, DO, LSE, DELTA, bh, sq_bh, sq_n, sdo_bh, sdo_n, offs_m,
                                    offs_dk, offs_dv, n_q, d_k, d_v)
    dq = tl.zeros([BLOCK_M, BLOCK_DK], tl.float32)
    lo, hi = _key_range(start_m, q_len, k_len, off, left, right, HAS_LEFT, HAS_RIGHT,
                        BLOCK_M, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kt = _load_cols(K, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k)
        vt = _load_cols(V, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v)
        s, t = _scores(q, kt, scale, cap, SOFTCAP, PRECISION, UPCAST)
        keep = _band_keep(offs_m, offs_n, q_len, k_len, off, left, right, HAS_LEFT, HAS_RIGHT)
        _, ds = _ds(s, t, vt, do, lse, delta, keep, SOFTCAP, PRECISION, UPCAST)
        dq += _dot(ds.to(kt.dtype), tl.trans(kt), PRECISION, UPCAST)
    _store_rows(DQ, bh, sq_bh, sq_n, offs_m, offs_dk, n_q, d_k, dq * scale)


# ------------------------------------------------------------------------ block-sparse kernels
# The layout's tiles, compressed twice: by query block (ROW_PTR[qb] .. ROW_PTR[qb + 1] index
# ROW_TILES) and by key block (COL_PTR / COL_TILES). Tile t covers key block TILE_KB[t] of
# query block TILE_QB[t]; TILE_FULL[t] says it keeps every entry (no mask read), otherwise its
# exact keep-mask is KEEP[bm, hm, t] (uint8, BLOCK_M x BLOCK_N; bm, hm are 0 when the mask does
# not depend on batch or head: their strides are then 0).


@triton.jit
def _tile_keep(KEEP, t, full, bm, hm, skb, skh, skt, offs_m, offs_n, n_q, n_k,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    keep = (offs_m[:, None] < n_q) & (offs_n[None, :] < n_k)
    if full == 0:                            # a partial tile: read its exact mask
        lm = tl.arange(0, BLOCK_M)
        ln = tl.arange(0, BLOCK_N)
        tile = tl.load(KEEP + bm * skb + hm * skh + t * skt + lm[:, None] * BLOCK_N
                       + ln[None, :], mask=keep, other=0)
        keep = keep & (tile != 0)
    return keep


@triton.jit
def sparse_fwd(Q, K, V, O, LSE, ROW_PTR, ROW_TILES, TILE_KB, TILE_FULL, KEEP,
               sq_bh, sq_n, sk_bh, sk_n, sv_bh, sv_n, so_bh, so_n, skb, skh, skt,
               n_q, n_k, d_k, d_v, H, G, scale, cap,
               SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
              PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    qb = tl.program_id(0)
    bh = tl.program_id(1)
    bm, hm = bh // H, bh % H
    kvh = bh // G
    offs_m, offs_n0, offs_dk, offs_dv = _offsets(qb, BLOCK_M, BLOCK_N, BLOCK_DK,
                                                 BLOCK_DV)
    q = _load_rows(Q, bh, sq_bh, sq_n, offs_m, offs_dk, n_q, d_k)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for i in range(tl.load(ROW_PTR + qb), tl.load(ROW_PTR + qb + 1)):
        t = tl.load(ROW_TILES + i)
        offs_n = tl.load(TILE_KB + t) * BLOCK_N + offs_n0
        kt = _load_cols(K, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k)
        v = _load_rows(V, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v)
        s, _ = _scores(q, kt, scale, cap, SOFTCAP, PRECISION, UPCAST)
        keep = _tile_keep(KEEP, t, tl.load(TILE_FULL + t), bm, hm, skb, skh, skt, offs_m,
                          offs_n, n_q, n_k, BLOCK_M, BLOCK_N)
        s = tl.where(keep, s, float("-inf"))
        m_i, l_i, acc = _online_step(s, v, m_i, l_i, acc, PRECISION, UPCAST)
    _finish(acc, m_i, l_i, O, LSE, bh, offs_m, offs_dv, so_bh, so_n, n_q, d_v)


@triton.jit
def sparse_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, COL_PTR, COL_TILES, TILE_QB, TILE_FULL,
                    KEEP, sq_bh, sq_n, sk_bh, sk_n, sv_bh, sv_n, sdo_bh, sdo_n, skb, skh, skt,
                    n_q, n_k, d_k, d_v, H, G, scale, cap,
                    SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
              PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    kb = tl.program_id(0)
    kvh = tl.program_id(1)
    offs_n, offs_m0, offs_dk, offs_dv = _offsets(kb, BLOCK_N, BLOCK_M, BLOCK_DK,
                                                 BLOCK_DV)
    kt = _load_cols(K, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k)
    vt = _load_cols(V, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v)
    dk = tl.zeros([BLOCK_N, BLOCK_DK], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    for g in range(0, G):
        bh = kvh * G + g
        bm, hm = bh // H, bh % H
        for i in range(tl.load(COL_PTR + kb), tl.load(COL_PTR + kb + 1)):
            t = tl.load(COL_TILES + i)
            offs_m = tl.load(TILE_QB + t) * BLOCK_M + offs_m0
            q, do, lse, delta = _query_rows(Q, DO, LSE, DELTA, bh, sq_bh, sq_n, sdo_bh, sdo_n,
                                            offs_m, offs_dk, offs_dv, n_q, d_k, d_v)
            s, th = _scores(q, kt, scale, cap, SOFTCAP, PRECISION, UPCAST)
            keep = _tile_keep(KEEP, t, tl.load(TILE_FULL + t), bm, hm, skb, skh, skt, offs_m,
                              offs_n, n_q, n_k, BLOCK_M, BLOCK_N)
            p, ds = _ds(s, th, vt, do, lse, delta, keep, SOFTCAP, PRECISION, UPCAST)
            dv += _dot(tl.trans(p).to(do.dtype), do, PRECISION, UPCAST)
            dk += _dot(tl.trans(ds).to(q.dtype), q, PRECISION, UPCAST)
    _store_rows(DK, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k, dk * scale)
    _store_rows(DV, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v, dv)


@triton.jit
def sparse_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ, ROW_PTR, ROW_TILES, TILE_KB, TILE_FULL, KEEP,
                  sq_bh, sq_n, sk_bh, sk_n, sv_bh, sv_n, sdo_bh, sdo_n, skb, skh, skt,
                  n_q, n_k, d_k, d_v, H, G, scale, cap,
                  SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
              PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    qb = tl.program_id(0)
    bh = tl.program_id(1)
    bm, hm = bh // H, bh % H
    kvh = bh // G
    offs_m, offs_n0, offs_dk, offs_dv = _offsets(qb, BLOCK_M, BLOCK_N, BLOCK_DK,
                                                 BLOCK_DV)
    q, do, lse, delta = _query_rows(Q, DO, LSE, DELTA, bh, sq_bh, sq_n, sdo_bh, sdo_n, offs_m,
                                    offs_dk, offs_dv, n_q, d_k, d_v)
    dq = tl.zeros([BLOCK_M, BLOCK_DK], tl.float32)
    for i in range(tl.load(ROW_PTR + qb), tl.load(ROW_PTR + qb + 1)):
        t = tl.load(ROW_TILES + i)
        offs_n = tl.load(TILE_KB + t) * BLOCK_N + offs_n0
        kt = _load_cols(K, kvh, sk_bh, sk_n, offs_n, offs_dk, n_k, d_k)
        vt = _load_cols(V, kvh, sv_bh, sv_n, offs_n, offs_dv, n_k, d_v)
        s, th = _scores(q, kt, scale, cap, SOFTCAP, PRECISION, UPCAST)
        keep = _tile_keep(KEEP, t, tl.load(TILE_FULL + t), bm, hm, skb, skh, skt, offs_m,
                          offs_n, n_q, n_k, BLOCK_M, BLOCK_N)
        _, ds = _ds(s, th, vt, do, lse, delta, keep, SOFTCAP, PRECISION, UPCAST)
        dq += _dot(ds.to(kt.dtype), tl.trans(kt), PRECISION, UPCAST)
    _store_rows(DQ, bh, sq_bh, sq_n, offs_m, offs_dk, n_q, d_k, dq * scale)
