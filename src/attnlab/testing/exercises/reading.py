"""Chapter 5's checks: value-weighted contributions, the order of attention rollout, and the
rollout of uniform layers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, dtype_name, tolerance


def _contributions(fn: Callable) -> Verdict:
    """``fn(alpha (N, N), v (N, D)) -> (N, N)``: ||alpha_ij v_j||, rows normalised."""
    g = torch.Generator().manual_seed(21)
    alpha = torch.softmax(torch.randn(5, 5, generator=g, dtype=torch.float64), -1)
    v = torch.randn(5, 4, generator=g, dtype=torch.float64) * \
        torch.tensor([0.05, 1, 2, 3, 4], dtype=torch.float64)[:, None]
    c = torch.stack([(alpha[i, :, None] * v).norm(dim=-1) for i in range(5)])
    want = c / c.sum(-1, keepdim=True)
    answer = fn(alpha, v)
    got = torch.as_tensor(answer, dtype=torch.float64)
    if tuple(got.shape) != (5, 5) or not torch.allclose(got, want, rtol=0,
                                                        atol=tolerance(answer)):
        return Verdict("5.1", False, f"row 0 should be {want[0].numpy().round(3)} (key 0's "
                       f"value is tiny), got {got.reshape(-1)[:5].numpy().round(3)}")
    return Verdict("5.1", True, "a key with a tiny value included")


def _rollout_order(fn: Callable) -> Verdict:
    """``fn(maps (L, N, N), residual=0.5) -> (N, N)``: Â_L ... Â_1."""
    g = torch.Generator().manual_seed(22)
    maps = torch.softmax(torch.randn(3, 5, 5, generator=g, dtype=torch.float64) * 2, -1)
    eye = torch.eye(5, dtype=torch.float64)
    want = eye
    for a in maps:
        want = (0.5 * a + 0.5 * eye) @ want
    answer = fn(maps)
    got = torch.as_tensor(answer, dtype=torch.float64)
    if tuple(got.shape) != (5, 5):
        return Verdict("5.2", False, f"expected a (5, 5) rollout for 3 layers of 5 tokens, got "
                       f"{tuple(got.shape)}")
    if not torch.allclose(got, want, rtol=0, atol=tolerance(answer)):
        rev = eye
        for a in maps:
            rev = rev @ (0.5 * a + 0.5 * eye)
        hint = (" (that is the product in the reverse order)" if torch.allclose(got, rev)
                else "")
        return Verdict("5.2", False, f"with 3 layers the rollout differs from Â_3 Â_2 Â_1 by "
                       f"up to {float((got - want).abs().max()):.3g}{hint}")
    return Verdict("5.2", True, "3 layers that do not commute")


def _uniform_rollout(fn: Callable) -> Verdict:
    """``fn(n, L, r) -> (self weight, weight on each other token)``."""
    for n, L, r in ((5, 1, 0.5), (12, 6, 0.5), (7, 3, 0.2)):
        u = torch.full((n, n), 1 / n, dtype=torch.float64)
        a = (1 - r) * u + r * torch.eye(n, dtype=torch.float64)
        roll = torch.linalg.matrix_power(a, L)
        want = (float(roll[0, 0]), float(roll[0, 1]))
        answer = fn(n, L, r)
        got = tuple(float(x) for x in answer)
        if len(got) != 2 or any(abs(p - w) > tolerance(answer) for p, w in zip(got, want)):
            return Verdict("5.3", False, f"n = {n}, L = {L}, r = {r}: the rollout gives "
                           f"({want[0]:.5f}, {want[1]:.5f}), you said {got} ({dtype_name(answer)})")
    return Verdict("5.3", True, "three sizes, depths and residual shares")


CHECKS = {"5.1": _contributions, "5.2": _rollout_order, "5.3": _uniform_rollout}
