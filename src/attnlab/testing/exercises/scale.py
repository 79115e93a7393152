"""Chapter 14's checks: merging two partial softmax results, the causal work of each rank in
the contiguous layout, and the zig-zag layout."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, close, tolerance


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
        o, lse = (torch.as_tensor(x) for x in fn(o1, l1, o2, l2))
        if not (torch.isfinite(o).all() and torch.isfinite(lse).all()):
            bad = "output" if not torch.isfinite(o).all() else "lse"
            return Verdict("14.1", False, f"with {label} (lse {float(l1.max()):.1f} and "
                           f"{float(l2.max()):.1f}) your merged {bad} holds inf or nan")
        err = max(float((o.double() - want_o).abs().max()) / tolerance(o, shift),
                  float((lse.double() - want_lse).abs().max()) / tolerance(lse, shift))
        if err > 1:
            err = max(float((o.double() - want_o).abs().max()),
                      float((lse.double() - want_lse).abs().max()))
            return Verdict("14.1", False, f"with {label} the merge is off by {err:.3g} from one "
                           "softmax over all the keys")
    o1, l1 = torch.randn(3, 5, generator=g, dtype=torch.float64), \
        torch.randn(3, generator=g, dtype=torch.float64)
    empty_o, empty_l = torch.zeros(3, 5, dtype=torch.float64), \
        torch.full((3,), -math.inf, dtype=torch.float64)
    o, lse = (torch.as_tensor(x) for x in fn(o1, l1, empty_o, empty_l))
    if not (close(o, o1, scale=4.0) and close(lse, l1, scale=4.0)):
        return Verdict("14.1", False, "merging with an empty part (lse -inf, output 0) should "
                       "return the other part unchanged")
    o, lse = (torch.as_tensor(x) for x in fn(empty_o, empty_l, empty_o, empty_l))
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
                shown = sorted(got) if len(got) <= 8 else sorted(got)[:8] + ["..."]
                work = sum(i + 1 for i in got)
                return Verdict("14.3", False, f"N = {n}, P = {p}: rank {r} holds rows {shown}, "
                               f"{work} causal pairs, against the {sum(i + 1 for i in want)} "
                               f"of the zig-zag layout's rank {r} (every rank "
                               f"{n * (n + 1) // 2 // p} pairs)")
    return Verdict("14.3", True, "P = 2, 3, 4")


CHECKS = {"14.1": _merge, "14.2": _contiguous_work, "14.3": _zigzag}
