"""Block layouts: which (query block, key block) tiles a structured mask needs.

:func:`block_layout` maps a mask (mask functions from :mod:`attnlab.core.masks`, the core's
causal/window band, a dense bool mask, or any AND/OR of them) to the list of tiles that hold at
least one kept entry, once, together with the exact keep-mask inside those tiles. The
``blocksparse`` backend computes only those tiles. A :class:`BlockLayout` is itself a mask
function, so it can be passed as ``attention(q, k, v, mask=layout)`` and reused across calls,
like FlexAttention's ``BlockMask``.

Work items. The tiles of one query block are grouped into items of ``G`` key blocks (``G`` is
the typical number of tiles per query block; a query block that needs more, such as a global
token's, gets several items, merged with the shared log-sum-exp rule). Items are ordered by
round (their index within their query block) so that one round can be merged in one vectorized
step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core import masks as M
from attnlab.core.geometry import band_range, tile_of


@dataclass(frozen=True, eq=False)
class BlockLayout:
    """Tiles to compute for a structured mask. Build with :func:`block_layout`.

    Attributes:
        n_q, n_k, block_q, block_k: sizes; the grid has ``ceil(n/block)`` blocks per side.
        band: the causal/window band folded into the layout (see ``AttentionSpec.band``).
        items_q: ``(I,)`` query block of each work item.
        items_kv: ``(I, G)`` key blocks of each item, -1 for an unused slot.
        items_round: ``(I,)`` index of the item within its query block.
        keep: ``(Bm, Hm, I, block_q, G * block_k)`` exact keep-mask of every item's tiles
            (``Bm``, ``Hm`` are 1 unless the mask depends on batch or head).
        density: fraction of all tiles that are computed.
    """

    n_q: int
    n_k: int
    block_q: int
    block_k: int
    band: tuple[int | None, int | None] | None
    mask_fn: M.MaskFn | None
    items_q: torch.Tensor
    items_kv: torch.Tensor
    items_round: torch.Tensor
    keep: torch.Tensor
    density: float

    def __call__(self, b, h, q_idx, kv_idx):
        """The layout as a mask function: the exact mask it was built from."""
        keep = (q_idx >= 0) & (kv_idx >= 0)
        if self.band is not None:
            band = M.window(self.band[0], self.band[1], self.n_k - self.n_q)
            keep = keep & band(b, h, q_idx, kv_idx)
        if self.mask_fn is not None:
            keep = keep & self.mask_fn(b, h, q_idx, kv_idx)
        return keep

    @property
    def slots(self) -> int:
        """Key-block slots per work item (the most key blocks any query block needs)."""
        return int(self.items_kv.shape[1])

    def rounds(self) -> list[tuple[int, int]]:
        """(start, stop) item ranges of each round."""
        r = self.items_round
        out, start = [], 0
        for value in range(int(r.max()) + 1 if r.numel() else 0):
            stop = start + int((r == value).sum())
            out.append((start, stop))
            start = stop
        return out

    def to(self, device) -> "BlockLayout":
        """The same layout with its tensors on ``device``."""
        return BlockLayout(self.n_q, self.n_k, self.block_q, self.block_k, self.band,
                           self.mask_fn, self.items_q.to(device), self.items_kv.to(device),
                           self.items_round.to(device), self.keep.to(device), self.density)


def block_layout(mask_fn: M.MaskFn | None, n_q: int, n_k: int, *, causal: bool = False,
                 window: tuple[int | None, int | None] | int | None = None,
                 band: tuple[int | None, int | None] | None = None,
                 dense: torch.Tensor | None = None, batch: int = 1, heads: int = 1,
                 block: tuple[int, int] = (128, 128), slots: int | None = None,
                 device=None) -> BlockLayout:
    """Build the layout of a structured mask.

    Args:
        mask_fn: a mask function ``fn(b, h, q_idx, kv_idx)`` or None.
        n_q, n_k: sequence lengths.
        causal, window: the core's band (bottom-right aligned); or pass ``band`` directly.
        dense: an optional bool keep-mask broadcastable to ``(batch, heads, n_q, n_k)``.
        batch, heads: the (B, H) a batch- or head-dependent mask function is evaluated on.
        block: ``(block_q, block_k)``.
        slots: key blocks per work item (default: the median number a query block needs).

    Returns:
        a :class:`BlockLayout`. Evaluating the mask costs O(n_q * width of the band), or
        O(n_q * n_k) for masks without a band; build it once and pass it as ``mask=``.

    Example:
        >>> lay = block_layout(masks.dilated(2), 1024, 1024, window=(256, 256))  # doctest: +SKIP
        >>> attention(q, k, v, mask=lay, backend="blocksparse")                 # doctest: +SKIP
    """
    bq, bk = block
    if band is None and (causal or window is not None):
        left, right = (window, window) if isinstance(window, int) else (window or (None, None))
        if causal:
            right = 0 if right is None else min(right, 0)
        band = None if left is None and right is None else (left, right)
    offset = n_k - n_q
    nqb, nkb = -(-n_q // bq), -(-n_k // bk)
    band_fn = M.window(band[0], band[1], offset) if band is not None else None
    fns = [f for f in (band_fn, mask_fn) if f is not None]
    fn = M.and_masks(*fns) if fns else None
    # Masks that may depend on batch or head are evaluated on (batch, heads) and compressed to
    # (1, 1) afterwards if they turn out not to; the band alone never depends on them.
    bm, hm = (batch, heads) if (mask_fn is not None or dense is not None) else (1, 1)
    if dense is not None:
        dense = dense.to(device) if device is not None else dense
        if dense.dim() > 4:
            raise ValueError(f"dense must broadcast to (batch, heads, n_q, n_k), got shape "
                             f"{tuple(dense.shape)}; flatten leading dims into batch first")
        dense = dense.reshape(*([1] * (4 - dense.dim())), *dense.shape)   # (Bd, Hd, Nq?, Nk?)
    per_block: list[list[int]] = []
    tiles: list[list[torch.Tensor]] = []
    for qb in range(nqb):
        q0, q1 = qb * bq, min((qb + 1) * bq, n_q)
        lo, hi = band_range(band, offset, q0, q1, n_k)[:2]
        kb_lo, kb_hi = lo // bk, -(-hi // bk)
        if kb_hi <= kb_lo:
            per_block.append([])
            tiles.append([])
            continue
        k0, k1 = kb_lo * bk, min(kb_hi * bk, n_k)
        keep = (M.materialize(fn, n_q, n_k, batch=bm, heads=hm, device=device,
                              q_range=(q0, q1), kv_range=(k0, k1)) if fn is not None else
                torch.ones(bm, hm, q1 - q0, k1 - k0, dtype=torch.bool, device=device))
        if dense is not None:
            keep = (keep & tile_of(dense, (q0, q1), (k0, k1))).expand(bm, hm, q1 - q0,
                                                                           k1 - k0)
        # pad to whole tiles: rows past n_q and keys past n_k are never kept
        keep = torch.nn.functional.pad(keep, (0, (kb_hi - kb_lo) * bk - (k1 - k0),
                                              0, bq - (q1 - q0)))
        keep = keep.view(bm, hm, bq, kb_hi - kb_lo, bk)
        used = keep.any(dim=(0, 1, 2, 4)).nonzero().flatten().tolist()       # key blocks with work
        per_block.append([kb_lo + u for u in used])
        tiles.append([keep[:, :, :, u] for u in used])                       # (Bm, Hm, bq, bk) each
    if (bm, hm) != (1, 1) and all(bool((t == t[:1, :1]).all()) for ts in tiles for t in ts):
        tiles = [[t[:1, :1] for t in ts] for ts in tiles]
        bm = hm = 1
    counts = [len(x) for x in per_block]
    nonzero = sorted(c for c in counts if c > 0)
    g = slots or (nonzero[len(nonzero) // 2] if nonzero else 1)
    # (round, qb, kbs, tiles)
    items = []
    for qb, (kbs, ts) in enumerate(zip(per_block, tiles)):
        for r, start in enumerate(range(0, len(kbs), g)):
            items.append((r, qb, kbs[start:start + g], ts[start:start + g]))
    items.sort(key=lambda it: (it[0], it[1]))
    n_items = len(items)
    items_q = torch.tensor([it[1] for it in items], dtype=torch.long, device=device)
    items_round = torch.tensor([it[0] for it in items], dtype=torch.long, device=device)
    items_kv = torch.full((n_items, g), -1, dtype=torch.long, device=device)
    keep = torch.zeros(bm, hm, n_items, bq, g * bk, dtype=torch.bool, device=device)
    for i, (_, _, kbs, ts) in enumerate(items):
        items_kv[i, : len(kbs)] = torch.tensor(kbs, dtype=torch.long)
        for s, t in enumerate(ts):
            keep[:, :, i, :, s * bk:(s + 1) * bk] = t
    density = sum(counts) / max(nqb * nkb, 1)
    return BlockLayout(n_q, n_k, bq, bk, band, mask_fn, items_q, items_kv, items_round, keep,
                       density)


def keep_for_backward(ctx, spec, lay: BlockLayout, q, k, v, out, lse):
    """What the backward of an attention over a layout's tiles recomputes from (the inputs,
    ``(out, lse)``, the request and the layout), kept on ``ctx``; returns ``(out, lse)``."""
    ctx.spec, ctx.lay = spec, lay
    ctx.save_for_backward(q, k, v, out, lse)
    return out, lse


def kept_for_backward(ctx) -> tuple:
    """``(q, k, v, out, lse, spec, layout)`` as :func:`keep_for_backward` kept them."""
    q, k, v, out, lse = ctx.saved_tensors
    return q, k, v, out, lse, ctx.spec, ctx.lay
