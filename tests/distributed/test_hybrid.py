"""Ring x all-to-all on an R x U mesh (attnlab.distributed.hybrid): output and the gradients
of q, k, v of every rank's rows equal one process's float64 attention, with head counts and
lengths that do not divide evenly; the automatic split follows its rule."""

from __future__ import annotations

import pytest
import torch

from attnlab import attention
from attnlab.distributed import layout as L
from attnlab.distributed import spawn
from attnlab.distributed.hybrid import choose_split, hybrid_ranges
from tests.distributed import _workers as W

pytestmark = pytest.mark.xdist_group("distributed")


@pytest.mark.parametrize("heads, kv, world, split", [
    (8, 8, 4, (1, 4)), (8, 2, 4, (2, 2)), (6, 6, 4, (2, 2)), (3, 3, 4, (4, 1)),
    (12, 4, 8, (2, 4)), (4, 1, 4, (4, 1)), (5, 5, 6, (6, 1))])
def test_the_split_keeps_the_heads_even(heads, kv, world, split):
    assert choose_split(heads, kv, world) == split


def test_the_layout_covers_every_row_once_zigzag_over_groups():
    for n, ring, uly in [(23, 2, 2), (40, 2, 3), (7, 3, 2), (16, 1, 4), (16, 4, 1)]:
        ranges = hybrid_ranges(n, ring, uly)
        rows = torch.cat([L.positions(rr) for rr in ranges])
        assert sorted(rows.tolist()) == list(range(n))
        for r, group in enumerate(L.zigzag_ranges(n, ring)):      # a group holds its shard
            members = torch.cat([L.positions(rr) for rr in ranges[r * uly:(r + 1) * uly]])
            assert torch.equal(members, L.positions(group))


def test_two_by_two_equals_one_process_with_uneven_heads_and_lengths():
    # over 5 s: one spawn of 4 ranks; 3 query heads over 2 members (2 and 1), GQA with one
    # K/V head, 23 rows (uneven zig-zag chunks), causal, padding and a window
    cases = [dict(n_q=23, heads=3, kv_heads=3, causal=True, split=(2, 2)),
             dict(n_q=23, heads=4, kv_heads=1, causal=True, lengths=[23, 15], split=(2, 2)),
             dict(n_q=22, heads=4, kv_heads=2, window=(5, 0), split=(2, 2)),
             dict(n_q=21, heads=2, kv_heads=2, lengths=[21, 9], split=(4, 1))]
    got = spawn(W.hybrid_case, 4, args=(cases,), timeout=180)
    for i, case in enumerate(cases):
        q, k, v, lengths, c_out, _ = W.inputs(case)
        q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
        n = q.shape[2]
        mask = (torch.arange(n)[None, :] < lengths[:, None])[:, None, None, :] \
            if case.get("lengths") else None
        out = attention(q, k, v, causal=case.get("causal", False), window=case.get("window"),
                        mask=mask, enable_gqa=True, backend="reference")
        out.backward(c_out)
        for rank in range(4):
            rr, o, dq, dk, dv = got[rank][i]
            rows = L.positions(rr)
            for name, a, b in (("out", o, out.detach()), ("dq", dq, q.grad),
                               ("dk", dk, k.grad), ("dv", dv, v.grad)):
                err = float((a - b.index_select(2, rows)).abs().max())
                assert err < 1e-10, (case, rank, name, err)
