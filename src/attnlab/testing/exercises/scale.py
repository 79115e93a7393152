"""Chapter 14's checks: merging two partial softmax results, the causal work of each rank in
the contiguous layout, and the zig-zag layout."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict


def _merge(fn: Callable) -> Verdict:
    """``fn(o1, lse1, o2, lse2) -> (o, lse)`` over the union of two disjoint key sets."""
    g = torch.Generator().manual_seed(16)
    for shift, label in ((0.0, "ordinary scores"), (800.0, "scores near 800")):
        q = torch.randn(3, 4, generator=g, dtype=torch.float64)
        k = torch.randn(9, 4, generator=g, dtype=torch.float64)
        v = torch.randn(9, 5, generator=g, dtype=torch.float64)
        s = q @ k.T + shift
        want_o, want_lse = torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)
        o1, l1 = torch.softmax(s[:, :4], -1) @ v[:4], torch.logsumexp(s[:, :4], -1)
        o2, l2 = torch.softmax(s[:, 4:], -1) @ v[4:], torch.logsumexp(s[:, 4:], -1)
        o, lse = fn(o1, l1, o2, l2)
        if not (torch.isfinite(o).all() and torch.isfinite(lse).all()):
            return Verdict("14.1", False, f"with {label} your merge gives inf or nan: "
                           "exponentiate lse minus the larger lse, never lse itself")
        err = max(float((o - want_o).abs().max()), float((lse - want_lse).abs().max()))
        if err > 1e-9:
            return Verdict("14.1", False, f"with {label} the merge is off by {err:.3g} from one "
                           "softmax over all the keys")
    o1, l1 = torch.randn(3, 5, generator=g, dtype=torch.float64), \
        torch.randn(3, generator=g, dtype=torch.float64)
    empty_o, empty_l = torch.zeros(3, 5, dtype=torch.float64), \
        torch.full((3,), -math.inf, dtype=torch.float64)
    o, lse = fn(o1, l1, empty_o, empty_l)
    if not (torch.allclose(o, o1) and torch.allclose(lse, l1)):
        return Verdict("14.1", False, "merging with an empty part (lse -inf, output 0) should "
                       "return the other part unchanged")
    o, lse = fn(empty_o, empty_l, empty_o, empty_l)
    if torch.isnan(o).any() or not (o == 0).all() or not torch.isneginf(lse).all():
        return Verdict("14.1", False, "two empty parts should merge to output 0 and lse -inf, "
                       "without nan")
    return Verdict("14.1", True, "ordinary and huge scores, and empty parts")


def _contiguous_work(fn: Callable) -> Verdict:
    """``fn(N, P) -> [pairs of rank 0, ..., rank P - 1]`` under a causal mask."""
    for n, p in ((8, 2), (4096, 4), (12, 3)):
        b = n // p
        want = [sum(i + 1 for i in range(r * b, (r + 1) * b)) for r in range(p)]
        got = [int(x) for x in fn(n, p)]
        if got != want:
            return Verdict("14.2", False, f"for N = {n}, P = {p} the ranks compute {want}, you "
                           f"said {got}")
    return Verdict("14.2", True, "three sizes")


def _zigzag(fn: Callable) -> Verdict:
    """``fn(N, P, r) -> row indices of rank r`` in the zig-zag layout (N divisible by 2P)."""
    for n, p in ((8, 2), (16, 4), (24, 3)):
        c = n // (2 * p)
        for r in range(p):
            want = list(range(r * c, (r + 1) * c)) + \
                list(range((2 * p - 1 - r) * c, (2 * p - r) * c))
            got = [int(i) for i in fn(n, p, r)]
            if sorted(got) != want:
                return Verdict("14.3", False, f"N = {n}, P = {p}: rank {r} should hold chunks "
                               f"{r} and {2 * p - 1 - r} of {2 * p} (rows {want[0]}..{want[c - 1]} "
                               f"and {want[c]}..{want[-1]}), so that an early chunk balances a "
                               "late one")
    return Verdict("14.3", True, "P = 2, 3, 4")


CHECKS = {"14.1": _merge, "14.2": _contiguous_work, "14.3": _zigzag}
