"""Chapter 3's checks: the online softmax's rescale factor, the running maximum over tiles, and
attention computed over chunks of keys."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, conformance


def _rescale(fn: Callable) -> Verdict:
    """``fn(m, m_new)``: the factor that moves sums taken relative to m to m_new."""
    for m, m_new in ((1.0, 2.5), (0.3, 0.3), (-2.0, 4.0), (-math.inf, 1.0)):
        want = math.exp(m - m_new)
        got = float(fn(m, m_new))
        if not math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-300):
            hint = " (the exponent is the wrong way round)" if m > -math.inf and \
                math.isclose(got, math.exp(m_new - m), rel_tol=1e-9) and m != m_new else ""
            return Verdict("3.1", False, f"from m = {m} to m' = {m_new} the factor is "
                           f"{want:.4g}, you said {got:.4g}{hint}")
    return Verdict("3.1", True, "including the first tile (m = -inf)")


def _running_max(fn: Callable) -> Verdict:
    """``fn(scores, tile)``: the running maximum after each tile of a row of scores."""
    g = torch.Generator().manual_seed(18)
    for n, tile in ((64, 16), (50, 8)):
        scores = torch.randn(n, generator=g, dtype=torch.float64) * 2 + \
            torch.linspace(0, 4, n, dtype=torch.float64)         # maxima that rise
        per_tile = torch.tensor([float(scores[i:i + tile].max()) for i in range(0, n, tile)])
        want = per_tile.cummax(0).values.tolist()
        got = [float(x) for x in fn(scores, tile)]
        if len(got) != len(want) or any(abs(a - b) > 1e-12 for a, b in zip(got, want)):
            return Verdict("3.2", False, f"{n} scores in tiles of {tile}: the running max is "
                           f"{[round(x, 2) for x in want]}, you said "
                           f"{[round(x, 2) for x in got]} (a running max never falls)")
    return Verdict("3.2", True, "two rows, an uneven last tile included")


def _chunked(fn: Callable) -> Verdict:
    """``fn(q, k, v, scale=None)``: attention over chunks of keys, through
    :func:`attnlab.testing.check_attention` in float64 and float32."""
    return conformance("3.3", fn)


CHECKS = {"3.1": _rescale, "3.2": _running_max, "3.3": _chunked}
