"""The tile walker shared by the tiled backend and the statistics (:mod:`attnlab.core.stats`).

What a pass over the ``(block_q, block_k)`` tiles of ``S = Q K^T`` needs, whatever it computes
from them: the tile sizes (:func:`tile_sizes`, :func:`sizes`), which key blocks a block of
query rows visits and whether the band keeps all of a tile, part of it or none
(:func:`tile_kinds`, :func:`key_blocks`), and :class:`Tiles`, which makes a tile's capped,
modified, biased and masked scores, in log2 units where no float mask is added
(:func:`base2`: every exponential is then ``exp2``), with the products of grouped-query
heads. :func:`split_lse` puts the log-sum-exp back together from its two parts ``(m, r)``.

The forward and backward passes of the ``tiled`` backend (:mod:`attnlab.core.backends.tiled`)
and :func:`attnlab.core.stats.attention_stats` walk the same tiles with these, so the three see
the same scores.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import torch

from attnlab.core.dropout import keep_mask
from attnlab.core.engine.modifiers import fused
from attnlab.core.geometry import band_range, tile_keep, tile_of
from attnlab.core.masks import materialize
from attnlab.core.score_mod import apply as apply_score_mod
from attnlab.core.spec import AttentionSpec

# Tile sizes. Large tiles keep the Python loop short and the matmuls efficient on CPU; a
# (8, 256, 512) float32 tile is 4 MiB and stays in cache: measured fastest on 2 cores (N = 4096,
# D = 64: 1.23x SDPA forward against 1.40x with 512 x 1024 tiles). tile_sizes() shrinks them (tests
# cross many tiles).
BLOCK_Q = 256
BLOCK_K = 512
_SIZES: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "attnlab_tiled_sizes", default=None)
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)


# the token relevance the eager backward collects where asked (eager.loop.collect_relevance)
RELEVANCE: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "attnlab_relevance", default=None)


def relevance_wanted() -> bool:
    """Whether a backward inside :func:`attnlab.core.engine.eager.loop.collect_relevance` is
    under way (the compiled loop, which does not form ``P dP``, then stands aside)."""
    return RELEVANCE.get() is not None


@contextlib.contextmanager
def tile_sizes(block_q: int, block_k: int):
    """Within the block, the tiled backend uses ``(block_q, block_k)`` tiles (in this thread or
    task; restored on exit). For tests that must cross many tiles, and for tuning."""
    for name, v in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    token = _SIZES.set((block_q, block_k))
    try:
        yield
    finally:
        _SIZES.reset(token)


def sizes() -> tuple[int, int]:
    """The tile sizes ``(block_q, block_k)`` in force (the defaults, or an enclosing
    :func:`tile_sizes`'s)."""
    return _SIZES.get() or (BLOCK_Q, BLOCK_K)


def tiles_overridden() -> bool:
    """Whether an enclosing :func:`tile_sizes` sets the sizes."""
    return _SIZES.get() is not None


def tile_kinds(spec: AttentionSpec, i0: int, i1: int, block_k: int):
    """``(j0, j1, kind)`` for every key block of query rows ``i0 .. i1-1``; kind is 'skip' if
    the band excludes the whole tile, 'full' if it keeps all of it, else 'partial'."""
    r = band_range(spec.band, spec.offset, i0, i1, spec.n_k) if spec.band is not None else None
    for j0 in range(0, spec.n_k, block_k):
        j1 = min(j0 + block_k, spec.n_k)
        yield j0, j1, "full" if r is None else r.tile_kind(j0, j1)


def key_blocks(spec: AttentionSpec, i0: int, i1: int, block_k: int):
    """The ``(j0, j1, kind)`` of :func:`tile_kinds` that the band does not skip."""
    for j0, j1, kind in tile_kinds(spec, i0, i1, block_k):
        if kind != "skip":
            yield j0, j1, kind


def base2(spec: AttentionSpec) -> bool:
    """Whether the call computes its scores in log2 units (see the module docstring)."""
    return spec.float_bias() is None


def plain(spec: AttentionSpec) -> bool:
    """Whether q and k alone make the scores (no float mask, softcap or score_mod)."""
    return spec.softcap is None and spec.score_mod is None and spec.float_bias() is None


class Tiles:
    """Per-tile pieces shared by forward and backward (the same scores, masks and dropout).

    Scores are in log2 units when ``base2`` (``q_s = q * scale / temperature * log2 e`` when
    ``plain``, else the capped / modified natural scores times log2 e), else natural; ``exp`` /
    ``log`` are the matching functions."""

    def __init__(self, spec: AttentionSpec, n_bh: int, bias: torch.Tensor | None):
        self.spec = spec
        self.n_bh = n_bh
        self.g = spec.kv_groups                 # query heads per K/V head (GQA), 1 otherwise
        self.bias = bias
        self.base2 = base2(spec)
        self.plain = plain(spec)
        self.exp_ = torch.Tensor.exp2_ if self.base2 else torch.Tensor.exp_
        self.exp = torch.exp2 if self.base2 else torch.exp
        self.log = torch.log2 if self.base2 else torch.log
        self.bh = torch.arange(n_bh, device=spec.device).view(n_bh, 1, 1)
        self.b_idx, self.h_idx = spec.head_index(self.bh)      # (BH, 1, 1) for score_mod
        self._bufs: dict[tuple, torch.Tensor] = {}
        self.mod_grad = None                    # a score_mod.TileGrad in the backward pass
        # softcap, score_mod and the change to log2 units fused into one compiled pass
        self.fused = self.failed = None
        if not self.plain and fused.wanted(spec.entries, spec.device):
            self.fused = fused.modifier(spec.score_mod, spec.softcap,
                                        LOG2E if bias is None else 1.0)

    def q_scaled(self, q: torch.Tensor) -> torch.Tensor:
        """q times the score scale (and log2 e where q and k alone make the scores)."""
        return q * (self.spec.score_scale * (LOG2E if self.plain else 1.0))

    # Grouped-query attention without repeating K/V: the G query heads of one K/V head are
    # consecutive (h = kv * G + g), so (BH, m, X) is (BKV, G * m, X) and one bmm serves them.
    def _rows(self, a: torch.Tensor) -> torch.Tensor:
        return a.reshape(a.shape[0] // self.g, self.g * a.shape[1], a.shape[2])

    def qk(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``a (BH, m, X) @ b (BKV, n, X)^T -> (BH, m, n)``."""
        if self.g == 1:
            return torch.bmm(a, b.transpose(1, 2), out=out)
        res = torch.bmm(self._rows(a), b.transpose(1, 2),
                        out=None if out is None else self._rows(out))
        return res.view(a.shape[0], a.shape[1], b.shape[1])

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a (BH, m, n) @ b (BKV, n, X) -> (BH, m, X)``."""
        if self.g == 1:
            return torch.bmm(a, b)
        return torch.bmm(self._rows(a), b).view(a.shape[0], a.shape[1], b.shape[2])

    def tmm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a^T @ b`` summed over each K/V head's query heads: ``a (BH, m, n)``,
        ``b (BH, m, X) -> (BKV, n, X)``."""
        if self.g == 1:
            return torch.bmm(a.transpose(1, 2), b)
        return torch.bmm(self._rows(a).transpose(1, 2), self._rows(b))

    def buffer(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A scratch tensor reused across tiles: fresh multi-MiB allocations each tile cost
        page faults that show up as a large share of the run time on CPU."""
        key = (name, shape)
        if key not in self._bufs:
            self._bufs[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
        return self._bufs[key]

    def _flat(self, t: torch.Tensor, bq: int, bk: int) -> torch.Tensor:
        """A tile of shape broadcastable to ``batch_shape + (bq, bk)`` as ``(BH or 1, bq, bk)``."""
        if t.dim() <= 2 or all(d == 1 for d in t.shape[:-2]):
            return t.reshape(1, *t.shape[-2:]).expand(1, bq, bk)      # the same for every (b, h)
        return t.expand(*self.spec.batch_shape, bq, bk).reshape(self.n_bh, bq, bk)

    def keep(self, i0: int, i1: int, j0: int, j1: int, kind: str) -> torch.Tensor | None:
        """The tile's keep-mask ``(BH or 1, bq, bk)`` (band by arithmetic, the mask function
        materialized on the tile, a bool mask sliced), or None when it keeps everything."""
        spec = self.spec
        bq, bk = i1 - i0, j1 - j0
        keep = None
        if kind == "partial":
            keep = tile_keep(spec.band, spec.offset, (i0, i1), (j0, j1), spec.device)
        if spec.mask_fn is not None:
            b, h = spec.heads_view
            fn_keep = materialize(spec.mask_fn, spec.n_q, spec.n_k, batch=b, heads=h,
                                  device=spec.device, q_range=(i0, i1), kv_range=(j0, j1))
            fn_keep = fn_keep.reshape(*spec.batch_shape, bq, bk) if spec.batch_shape else \
                fn_keep[0, 0]
            keep = fn_keep if keep is None else keep & fn_keep
        if spec.mask is not None and spec.mask.dtype == torch.bool:
            m = tile_of(spec.mask, (i0, i1), (j0, j1))          # broadcast dims stay size 1
            keep = m if keep is None else keep & m
        return None if keep is None else self._flat(keep, bq, bk)

    def scores(self, q_s: torch.Tensor, k: torch.Tensor, i0: int, i1: int, j0: int, j1: int,
               kind: str, shift: torch.Tensor | None = None, cap_grad: bool = False):
        """Capped, modified, biased, masked scores of a tile ``(BH, bq, bk)`` (in log2 units
        when ``base2``), minus ``shift (BH, bq, 1)`` if given (after the bias: a huge bias and a
        huge shift cancel exactly); None if the tile keeps nothing. With ``cap_grad``,
        ``(scores, (d cap / d s or None, score_mod handle or None))``."""
        spec = self.spec
        bq, bk = i1 - i0, j1 - j0
        keep = self.keep(i0, i1, j0, j1, kind)
        if keep is not None and not keep.any():
            return (None, (None, None)) if cap_grad else None
        s = self.qk(q_s[:, i0:i1], k[:, j0:j1],
                    out=self.buffer("s", (self.n_bh, bq, bk), q_s))      # (BH, bq, bk)
        dcap = handle = None
        done = None
        if self.fused is not None and self.mod_grad is None and not cap_grad:
            done = self.fused(s, *self._idx(i0, i1, j0, j1))
            if done is not None and done.shape != s.shape:     # broadcast: the eager path,
                done, self.fused = None, None                  # which expands it, from now on
            elif done is None:                          # it did not compile
                self.failed, self.fused = self.fused, None
        if done is not None:
            s = done
        elif not self.plain:
            spec.cap(s)                                          # before the mask, as Gemma 2
            dcap = spec.cap_grad(s) if cap_grad else None
            if spec.score_mod is not None:
                idx = self._idx(i0, i1, j0, j1)
                if self.mod_grad is not None:
                    mod, handle = self.mod_grad.forward(s, *idx)
                else:
                    mod = apply_score_mod(spec.score_mod, s, *idx)
                if self.bias is None:                # to log2 units in the same pass
                    torch.mul(mod, LOG2E, out=s)
                else:
                    s.copy_(mod)
            if self.failed is not None:               # the eager path ran it: say why, once
                fused.fell_back(self.failed)
                self.failed = None
        if self.bias is not None:
            s += self._flat(tile_of(self.bias, (i0, i1), (j0, j1)), bq, bk).to(s.dtype)
        elif not self.plain and spec.score_mod is None and done is None:  # capped: to log2
            s.mul_(LOG2E)
        if shift is not None:
            # A separate pass: baddbmm with a broadcast input is slower here than bmm + sub_.
            s.sub_(shift)
        if keep is not None:
            s.masked_fill_(~keep, float("-inf"))
        return (s, (dcap, handle)) if cap_grad else s

    def _idx(self, i0: int, i1: int, j0: int, j1: int):
        """``(b, h, q_idx, kv_idx)`` of a tile, broadcasting against ``(BH, bq, bk)``."""
        dev = self.spec.device
        return (self.b_idx, self.h_idx, torch.arange(i0, i1, device=dev).view(1, -1, 1),
                torch.arange(j0, j1, device=dev).view(1, 1, -1))

    def dropout_scale(self, i0: int, i1: int, j0: int, j1: int, dtype: torch.dtype) -> torch.Tensor:
        """keep / (1 - p) for the tile, ``(BH, bq, bk)``."""
        spec = self.spec
        dev = spec.device
        keep = keep_mask(spec.dropout_seed, spec.dropout_p, self.bh,
                         torch.arange(i0, i1, device=dev).view(1, -1, 1),
                         torch.arange(j0, j1, device=dev).view(1, 1, -1), spec.n_q, spec.n_k)
        return keep.to(dtype) / (1.0 - spec.dropout_p)


def split_lse(m: torch.Tensor, r: torch.Tensor, base2: bool) -> torch.Tensor:
    """The natural log-sum-exp from its two parts; -inf on empty rows."""
    return torch.where(torch.isneginf(r), r, (m + r) * LN2 if base2 else m + r)


def cell_sizes(n: int, cell: int, grid: int, dev, dt) -> torch.Tensor:
    """How many of the n positions fall in each of the grid's cells (the last may be short)."""
    sizes_ = torch.full((grid,), cell, dtype=dt, device=dev)
    sizes_[-1] = n - cell * (grid - 1)
    return sizes_
