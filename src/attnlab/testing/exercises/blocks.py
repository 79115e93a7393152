"""Chapter 4's checks: a positional bias added to the scores, the dot product of two sinusoidal
codes, and what a swap of two tokens moves in causal attention without positions."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import (
    Verdict,
    changed_outputs,
    conformance,
    dtype_name,
    tolerance,
)


def _biased(fn: Callable) -> Verdict:
    """``fn(q, k, v, mask=None, scale=None)`` with float (additive) and bool masks."""
    return conformance("4.1", fn, supports={"float_mask", "mask", "scale"})


def _pe_dot(fn: Callable) -> Verdict:
    """``fn(k, d)``: PE(p) . PE(p + k) of the sinusoidal codes, for any p."""
    for d in (16, 64):
        pos = torch.arange(200, dtype=torch.float64)[:, None]
        omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        pe = torch.empty(200, d, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * omega), torch.cos(pos * omega)
        for k in (0, 1, 7, 40):
            want = float(pe[13] @ pe[13 + k])
            answer = fn(k, d)
            got = float(answer)
            if abs(got - want) > tolerance(answer, d / 2):
                return Verdict("4.2", False, f"for d = {d}, k = {k}: PE(p) . PE(p + k) = "
                               f"{want:.6f} for every p, you said {got:.6f} "
                               f"({dtype_name(answer)})")
    return Verdict("4.2", True, "d = 16 and 64, four offsets")


def _changed(fn: Callable) -> Verdict:
    """``fn(n, i, j) -> (n,)`` bool: the outputs of causal attention without positions that
    change when the tokens at i < j are swapped; the truth is computed."""
    from attnlab.core.api import attention  # noqa: PLC0415 (only this check runs attention)

    g = torch.Generator().manual_seed(20)
    for n, i, j in ((6, 1, 3), (8, 0, 7), (5, 2, 3)):
        x = torch.randn(1, 1, n, 8, generator=g, dtype=torch.float64)
        perm = torch.arange(n)
        perm[i], perm[j] = j, i
        y = x[:, :, perm]
        want = (attention(x, x, x, causal=True) - attention(y, y, y, causal=True))[0, 0] \
            .abs().amax(-1) > 1e-9
        got = torch.as_tensor(fn(n, i, j)).bool()
        if tuple(got.shape) != (n,) or not torch.equal(got, want):
            return Verdict("4.3", False, f"n = {n}, swapping {i} and {j}: "
                           + changed_outputs(want, got))
    return Verdict("4.3", True, "three swaps, computed with attnlab.attention")


CHECKS = {"4.1": _biased, "4.2": _pe_dot, "4.3": _changed}
