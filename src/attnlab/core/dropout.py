"""Counter-based attention dropout: the same keep-mask for any tiling, from one seed.

Flash-style backends never hold the N_q x N_k weight matrix, so they cannot draw a dropout mask
for it up front; FlashAttention uses a counter-based generator (Philox) keyed on the element's
coordinates instead. We do the same with a 64-bit integer hash (the finalizer of SplitMix64,
Steele et al. 2014) of ``(seed, batch-head, row, col)``. Any backend can evaluate any tile of the
mask, in the forward pass and again in the backward pass, and get the same bits: the reference
and the tiled backend give identical outputs for the same ``torch.Generator``.
"""

from __future__ import annotations

import torch

# Constants of SplitMix64 as signed int64 (torch has no uint64 arithmetic; int64 wraps mod 2^64).
_GOLDEN = -7046029254386353131        # 0x9E3779B97F4A7C15
_MIX1 = -4658895280553007687          # 0xBF58476D1CE4E5B9
_MIX2 = -7723592293110705685          # 0x94D049BB133111EB
_LOW_MASKS = {s: (1 << (64 - s)) - 1 for s in (27, 30, 31, 40)}


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift on int64 (>> is arithmetic in torch)."""
    return (x >> s) & _LOW_MASKS[s]


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    return x ^ _shr(x, 31)


def draw_seed(generator: torch.Generator | None) -> int:
    """One 62-bit seed from the caller's generator (or the global one)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator).item())


def keep_mask(seed: int, p: float, bh: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
              n_q: int, n_k: int) -> torch.Tensor:
    """Dropout keep-mask for a tile: True where the weight survives (probability 1 - p).

    Args:
        seed: from :func:`draw_seed`.
        p: dropout probability.
        bh: flat batch-head indices, broadcastable, e.g. ``(BH, 1, 1)``.
        rows, cols: query and key indices of the tile, e.g. ``(1, bq, 1)`` and ``(1, 1, bk)``.
        n_q, n_k: full sequence lengths (so the counter of an element never depends on the tile).

    Returns:
        bool tensor of the broadcast shape of ``bh``, ``rows``, ``cols``.
    """
    counter = (bh * n_q + rows) * n_k + cols                       # unique per element
    h = _mix(counter * _GOLDEN + _mix(torch.tensor(seed, dtype=torch.long, device=counter.device)))
    u = _shr(h, 40).to(torch.float32) * (1.0 / (1 << 24))         # 24 random bits -> [0, 1)
    return u >= p
