"""A rank that raises, vanishes or passes another shape ends every rank with an error naming
it, within the timeout; the suite never hangs (spawn's own deadline bounds every test)."""

from __future__ import annotations

import time

import pytest

from attnlab.distributed import SpawnError, spawn
from tests.distributed import _workers as W

pytestmark = pytest.mark.xdist_group("distributed")


def _fail(mode: str, world: int = 3) -> tuple[SpawnError, float]:
    start = time.monotonic()
    with pytest.raises(SpawnError) as info:
        spawn(W.fault_case, world, args=(mode,), timeout=60)
    return info.value, time.monotonic() - start


def test_a_rank_that_raises_mid_forward_ends_every_rank_naming_it():
    err, took = _fail("raise")
    assert err.rank == 1 and took < 60
    assert "rank 1's model code failed" in err.reports[1]
    for r in (0, 2):                                   # ended by their own RankFailure
        assert "RankFailure" in err.reports[r] and "rank 1 raised ValueError" in err.reports[r]


def test_a_rank_that_raises_inside_the_ring_ends_every_rank_naming_it():
    err, _ = _fail("mask")
    assert err.rank == 1
    for r in (0, 2):
        assert "forward step" in err.reports[r]
        assert "rank 1 raised ValueError: mask function failed on rank 1" in err.reports[r]


def test_a_rank_that_vanishes_ends_the_others():
    err, took = _fail("vanish")
    assert err.rank == 1 and "exited with code 7" in err.reports[1] and took < 60
    for r in (0, 2):
        assert "RankFailure" in err.reports[r] and "closed its connection" in err.reports[r]


def test_mismatched_shapes_are_one_error_on_every_rank_before_any_kv_moves():
    err, _ = _fail("shape")
    for r in range(3):
        assert "rank 1 has head dim = 6 where rank 0 has 4" in err.reports[r]


def test_spawn_bounds_a_run_that_never_ends():
    start = time.monotonic()
    with pytest.raises(SpawnError, match="did not finish within 3 s"):
        spawn(W.sleeper, 2, timeout=3)
    assert time.monotonic() - start < 20
