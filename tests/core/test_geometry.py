"""The one band geometry (masks.band_range) against brute force, and pricing that leaves
nothing behind."""

import itertools

import pytest
import torch

from attnlab import masks, which_backend
from attnlab.core.backends import blocksparse
from attnlab.core.masks import band_range

BANDS = [(None, 0), (0, None), (2, 0), (0, 3), (5, 5), (1, None), (None, None), (0, 0), (7, 2)]


@pytest.mark.parametrize("band", BANDS)
@pytest.mark.parametrize("n_q, n_k", [(11, 11), (5, 13), (13, 5), (1, 7)])
def test_band_range_is_the_brute_force_key_set(band, n_q, n_k):
    offset = n_k - n_q
    keep = masks.materialize(masks.window(band[0], band[1], offset), n_q, n_k)[0, 0]   # (N_q, N_k)
    for q0, q1 in itertools.combinations(range(n_q + 1), 2):
        rows = keep[q0:q1]
        r = band_range(band, offset, q0, q1, n_k)
        some = rows.any(0).nonzero().flatten().tolist()
        # consecutive rows of a band see overlapping intervals: their union is one interval
        assert (r.lo, r.hi) == ((some[0], some[-1] + 1) if some else (r.lo, r.lo)), (q0, q1)
        every = rows.all(0).nonzero().flatten().tolist()
        full = list(range(r.full_lo, r.full_hi))
        assert full == every, (q0, q1, r, every)
        for j0, j1 in itertools.combinations(range(n_k + 1), 2):
            tile = rows[:, j0:j1]
            want = "skip" if not tile.any() else "full" if tile.all() else "partial"
            assert r.tile_kind(j0, j1) == want, (q0, q1, j0, j1)


def test_band_range_unclipped_keeps_block_geometry_translation_invariant():
    r = band_range((5, 2), 3, 0, 4, None)
    assert (r.lo, r.hi) == (3 - 5, 3 + 3 + 2 + 1)
    shifted = band_range((5, 2), 3, 8, 12, None)
    assert (shifted.lo - r.lo, shifted.hi - r.hi) == (8, 8)


def test_pricing_a_mask_function_builds_and_caches_nothing():
    q = torch.randn(1, 2, 512, 16)
    blocksparse._CACHE.clear()
    fn = masks.dilated(2)
    assert which_backend(q, q, q, mask=fn) in ("sdpa", "reference", "tiled")
    assert len(blocksparse._CACHE) == 0
    # Once a layout for it exists (it ran on blocksparse), auto sees its density.
    from attnlab import attention
    attention(q, q, q, mask=fn, backend="blocksparse")
    assert len(blocksparse._CACHE) == 1
    which_backend(q, q, q, mask=fn)
    assert len(blocksparse._CACHE) == 1
