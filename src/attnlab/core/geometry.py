"""The one band geometry: which keys a block of queries needs, and a tile's keep-mask.

A *band* is causal and window folded into ``(left, right)`` (None: unbounded on that side).
Query i sits at key position ``p = i + offset`` with ``offset = N_k - N_q`` (bottom-right
alignment) and keeps key j when ``p - left <= j <= p + right``. Everything that tiles a band
asks this module: the tiled backend (which tiles to skip, which to mask), blocksparse and its
band path, block layouts, and :mod:`attnlab.distributed` (which ring steps and blocks a band
leaves, and each block's own window). Private: the public spelling of a band is
``attention(causal=, window=)`` and :func:`attnlab.masks.window`.

Shapes: a tile is query rows ``[q0, q1)`` against keys ``[k0, k1)``, its keep-mask
``(q1 - q0, k1 - k0)``.
"""

from __future__ import annotations

from typing import Any

import torch

Band = tuple[int | None, int | None]


def validate_window(window: Any) -> Band | None:
    """``window`` as given to :func:`attnlab.attention` -> ``(left, right)`` or None (unbounded
    on both sides); raises ``ValueError`` naming the argument and an example."""
    if window is None:
        return None
    pair = (window, window) if isinstance(window, int) and not isinstance(window, bool) else window
    ok = isinstance(pair, (tuple, list)) and len(pair) == 2 and all(
        w is None or (isinstance(w, int) and not isinstance(w, bool) and w >= 0) for w in pair)
    if not ok:
        raise ValueError(f"window must be an int >= 0 or a pair (left, right) of ints >= 0 (None "
                         f"for unbounded), got {window!r}; e.g. window=(128, 0) for causal local "
                         "attention")
    if pair[0] is None and pair[1] is None:
        return None                                   # unbounded on both sides: no window
    return (int(pair[0]) if pair[0] is not None else None,
            int(pair[1]) if pair[1] is not None else None)


def fold_band(causal: bool, window: Band | None) -> Band | None:
    """Causal and a validated window as one band (causal caps ``right`` at 0); None if
    unbounded."""
    left, right = window if window is not None else (None, None)
    if causal:
        right = 0 if right is None else min(right, 0)
    if left is None and right is None:
        return None
    return left, right


class BandRange(tuple):
    """Keys of a band for a block of query rows: ``(lo, hi, full_lo, full_hi)``.

    ``[lo, hi)`` holds every key that *some* row of the block may attend, ``[full_lo,
    full_hi)`` the keys that *every* row may attend (empty when ``full_lo >= full_hi``).
    """

    __slots__ = ()

    def __new__(cls, lo: int, hi: int, full_lo: int, full_hi: int):
        return super().__new__(cls, (lo, hi, full_lo, full_hi))

    lo = property(lambda self: self[0])
    hi = property(lambda self: self[1])
    full_lo = property(lambda self: self[2])
    full_hi = property(lambda self: self[3])

    def tile_kind(self, j0: int, j1: int) -> str:
        """``'skip'`` if keys ``[j0, j1)`` hold nothing of the band, ``'full'`` if every row
        keeps all of them, else ``'partial'``."""
        if j1 <= self.lo or j0 >= self.hi:
            return "skip"
        return "full" if self.full_lo <= j0 and j1 <= self.full_hi else "partial"


def band_range(band: Band | None, offset: int, q0: int, q1: int, n_k: int | None) -> BandRange:
    """Which keys query rows ``q0 .. q1-1`` need under ``band``.

    With ``n_k`` the ranges are clipped to ``[0, n_k]``; with ``n_k=None`` they are not (block
    geometry that must stay translation invariant).

    Example:
        >>> band_range((2, 0), 0, 4, 8, 16)     # causal window of 2 keys, rows 4..7
        (2, 8, 5, 5)
    """
    lo_cap, hi_cap = (0, n_k) if n_k is not None else (None, None)
    left, right = band if band is not None else (None, None)
    p_lo, p_hi = q0 + offset, q1 - 1 + offset                   # aligned positions of the rows

    def clip(x: int | None, default: int | None) -> int | None:
        if x is None:
            return default
        if lo_cap is not None:
            x = min(max(x, lo_cap), hi_cap)
        return x

    lo = clip(None if left is None else p_lo - left, lo_cap)
    hi = clip(None if right is None else p_hi + right + 1, hi_cap)
    full_lo = clip(None if left is None else p_hi - left, lo_cap)
    full_hi = clip(None if right is None else p_lo + right + 1, hi_cap)
    if lo is not None and hi is not None and hi < lo:
        hi = lo
    return BandRange(lo, hi, full_lo, full_hi)


def tile_keep(band: Band | None, offset: int, q_range: tuple[int, int],
              k_range: tuple[int, int], device=None) -> torch.Tensor:
    """The band's keep-mask of one tile, ``(q1 - q0, k1 - k0)`` bool, by arithmetic on the
    positions (no mask function is built)."""
    (q0, q1), (k0, k1) = q_range, k_range
    i = torch.arange(q0, q1, device=device).view(-1, 1)
    j = torch.arange(k0, k1, device=device).view(1, -1)
    d = j - i - offset                                  # key position - aligned query position
    left, right = band if band is not None else (None, None)
    keep = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool, device=device)
    if left is not None:
        keep &= d >= -left
    if right is not None:
        keep &= d <= right
    return keep


def visible(band: Band | None, offset: int, q_range: tuple[int, int],
            k_range: tuple[int, int]) -> bool:
    """Whether any query of ``q_range`` keeps any key of ``k_range`` (global positions)."""
    (q0, q1), (k0, k1) = q_range, k_range
    if q1 <= q0 or k1 <= k0:
        return False
    r = band_range(band, offset, q0, q1, None)
    lo = k0 if r.lo is None else max(k0, r.lo)
    hi = k1 if r.hi is None else min(k1, r.hi)
    return lo < hi


def trim(band: Band | None, offset: int, q_range: tuple[int, int],
         k_range: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """A block shrunk to the keys some of its queries keep and the queries that keep some of
    its keys (rows and columns outside hold nothing under the band); None if nothing is left."""
    (q0, q1), (k0, k1) = q_range, k_range
    if band is None:
        return (q0, q1), (k0, k1)
    left, right = band
    if left is not None:                # the last query that reaches key k1 - 1 from the right
        q1 = min(q1, k1 - offset + left)
    if right is not None:               # the first query that reaches key k0 from the left
        q0 = max(q0, k0 - offset - right)
    if q1 <= q0:
        return None
    r = band_range(band, offset, q0, q1, None)
    if r.lo is not None:
        k0 = max(k0, r.lo)
    if r.hi is not None:
        k1 = min(k1, r.hi)
    if k1 <= k0:
        return None
    return (q0, q1), (k0, k1)


def block_band(band: Band | None, offset: int, q_range: tuple[int, int],
               k_range: tuple[int, int]) -> tuple[str, Any]:
    """The global band seen from inside one block (its own queries and keys counted from 0,
    aligned bottom-right on the block as the core aligns any call). Returns one of

    * ``("none", None)``: the band keeps the whole block;
    * ``("window", (left, right))``: the block's own window expresses it;
    * ``("shift", d)``: it keeps ``q + d - left <= k <= q + d + right`` in block indices, an
      alignment no window of the block can express (a mask function is needed).
    """
    (q0, q1), (k0, k1) = q_range, k_range
    if band is None:
        return "none", None
    left, right = band
    r = band_range(band, offset, q0, q1, None)
    if ((r.full_lo is None or r.full_lo <= k0) and (r.full_hi is None or r.full_hi >= k1)):
        return "none", None
    n_q, n_k = q1 - q0, k1 - k0
    e = q0 - k0 + offset - (n_k - n_q)              # the block's shift of the alignment
    wl = None if left is None else left - e
    wr = None if right is None else right + e
    if (wl is None or wl >= 0) and (wr is None or wr >= 0):
        return "window", (wl, wr)
    return "shift", q0 - k0 + offset


def tile_of(mask: torch.Tensor, q_range: tuple[int, int],
            kv_range: tuple[int, int]) -> torch.Tensor:
    """The ``[q0:q1, k0:k1]`` tile of a mask that broadcasts to ``(..., N_q, N_k)``: a size-1
    query or key dim (a padding mask ``(B, 1, 1, N_k)``, a per-query mask ``(N_q, 1)``) is
    kept at size 1 and broadcasts over the tile, instead of being sliced to size 0."""
    (q0, q1), (k0, k1) = q_range, kv_range
    if mask.dim() == 1:                                    # (N_k,) broadcasts as (1, N_k)
        mask = mask.unsqueeze(0)
    rows = slice(None) if mask.shape[-2] == 1 else slice(q0, q1)
    cols = slice(None) if mask.shape[-1] == 1 else slice(k0, k1)
    return mask[..., rows, cols]


def sdpa_needs_dense_mask(spec) -> bool:
    """True unless the request is unmasked or plain causal with N_q == N_k, which torch's
    ``scaled_dot_product_attention`` serves with ``is_causal`` (its causal is top-left, so
    N_q != N_k needs the explicit bottom-right mask)."""
    if spec.mask is not None or spec.mask_fn is not None or spec.window is not None:
        return True
    return spec.causal and spec.n_q != spec.n_k
