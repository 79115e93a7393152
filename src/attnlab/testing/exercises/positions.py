"""Chapter 11's checks: RoPE's score as a function of the offset, the pairs that never turn
a full circle in training, and RoPE's alignment under a KV cache."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, close, tolerance


def _rotate(x: torch.Tensor, angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack([c * x[0] - s * x[1], s * x[0] + c * x[1]])


def _relative_score(fn: Callable) -> Verdict:
    """``fn(q, k, delta, theta)``: the score of 2-vectors q at m and k at m + delta under
    RoPE, checked against rotating both at several m."""
    g = torch.Generator().manual_seed(12)
    worst = 0.0
    for delta, theta in ((3, 0.7), (-2, 0.25), (0, 1.3), (17, 0.05)):
        q, k = torch.randn(2, generator=g, dtype=torch.float64), \
            torch.randn(2, generator=g, dtype=torch.float64)
        want = float(_rotate(q, 5 * theta) @ _rotate(k, (5 + delta) * theta))
        answer = fn(q, k, delta, theta)
        got = float(answer)
        worst = max(worst, abs(got - want))
        if abs(got - want) > tolerance(answer, want):
            hint = (" (that is the score at offset -delta)"
                    if abs(float(q @ _rotate(k, -delta * theta)) - got) < 1e-9 else "")
            return Verdict("11.1", False, f"for delta = {delta}, theta = {theta}: the rotated "
                           f"vectors score {want:.6f}, you said {got:.6f}{hint}")
    return Verdict("11.1", True, f"four offsets, largest difference {worst:.1e}")


def _unturned_pairs(fn: Callable) -> Verdict:
    """``fn(d, n_train)``: the indices of the RoPE pairs that turn less than 2 pi over the
    offsets 0 .. n_train - 1."""
    for d, n in ((16, 32), (64, 512), (128, 4096)):
        omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        want = [i for i, w in enumerate(omega.tolist()) if (n - 1) * w < 2 * math.pi]
        got = sorted(int(i) for i in fn(d, n))
        if got != want:
            return Verdict("11.2", False, f"for d = {d}, n_train = {n} the pairs short of one "
                           f"turn are {want[0]}..{want[-1]} ({len(want)} of {d // 2}), you said "
                           f"{len(got)} pairs: {got if len(got) <= 8 else got[:8] + ['...']}")
    return Verdict("11.2", True, "three head sizes and lengths")


def _rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE in the rotate-half layout (attnlab.nn.RotaryEmbedding's default)."""
    d = x.shape[-1]
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2).double() / d)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * angles.cos() - x2 * angles.sin(),
                      x1 * angles.sin() + x2 * angles.cos()], dim=-1)


def _cached_rope(fn: Callable, rope) -> Verdict:
    """``fn(q, k, rope) -> (q, k)`` rotated, with q the last n_q of the n_k positions;
    ``rope`` is the reader's ``RotaryEmbedding(8)``, passed through."""
    g = torch.Generator().manual_seed(13)
    k = torch.randn(1, 2, 9, 8, generator=g, dtype=torch.float64)
    q = torch.randn(1, 2, 2, 8, generator=g, dtype=torch.float64)
    want_q = _rope(q, torch.arange(7, 9))
    got_q, got_k = fn(q, k, rope)
    if not close(got_k, _rope(k, torch.arange(9)), scale=4.0):
        return Verdict("11.3", False, "the keys are not rotated by positions 0..n_k - 1")
    if not close(got_q, want_q, scale=4.0):
        return Verdict("11.3", False, "with 2 new queries and 9 keys, the queries are positions "
                       "7 and 8, but they were rotated as other positions")
    return Verdict("11.3", True, "2 new queries after 7 cached positions")


CHECKS = {"11.1": _relative_score, "11.2": _unturned_pairs, "11.3": _cached_rope}
