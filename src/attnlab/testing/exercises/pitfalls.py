"""Chapter 6's checks: the spread of unscaled and scaled scores, dropout on the weights, and
the limits of the softmax under temperature."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, dtype_name, tolerance


def _score_std(fn: Callable) -> Verdict:
    """``fn(d) -> (std of q.k, std of q.k / sqrt(d))`` for unit-variance q, k."""
    for d in (4, 64, 1000):
        answer = fn(d)
        got = tuple(float(x) for x in answer)
        want = (math.sqrt(d), 1.0)
        if len(got) != 2 or any(abs(a - b) > tolerance(answer, b) for a, b in zip(got, want)):
            hint = " (that is the variance)" if got and \
                abs(got[0] - d) < 1e-9 and d != 1 else ""
            return Verdict("6.1", False, f"for d = {d} the standard deviations are "
                           f"({want[0]:.4g}, {want[1]:.4g}), you said {got}{hint}"
                           f" ({dtype_name(answer)})")
    return Verdict("6.1", True, "d = 4, 64, 1000")


def _dropout(fn: Callable) -> Verdict:
    """``fn(q, k, v, dropout_p=0.0, generator=None, scale=None)``: attention with dropout on
    the weights, run through :func:`attnlab.testing.check_attention`."""
    from attnlab.testing import check_attention  # noqa: PLC0415 (the package imports this one)

    report = check_attention(fn, supports={"dropout", "scale"}, dtypes=(torch.float64,))
    if not report.passed:
        return Verdict("6.2", False, str(report.failures[0]))
    return Verdict("6.2", True, f"{len(report.results)} conformance checks")


def _temperature_limits(fn: Callable) -> Verdict:
    """``fn(s) -> (weights as T -> 0, weights as T -> infinity)``."""
    for s in (torch.tensor([0.5, 2.0, -1.0, 1.0], dtype=torch.float64),
              torch.tensor([3.0, 1.0, 3.0, 0.0, 2.0], dtype=torch.float64)):
        top = (s == s.max()).to(s.dtype)
        want_cold, want_hot = top / top.sum(), torch.full_like(s, 1 / len(s))
        cold, hot = (torch.as_tensor(t, dtype=torch.float64) for t in fn(s))
        if not torch.allclose(cold, want_cold):
            return Verdict("6.3", False, f"for s = {s.tolist()} the T -> 0 limit is "
                           f"{want_cold.tolist()}, you said {cold.tolist()}"
                           + (f" (s has {int(top.sum())} tied maxima)" if top.sum() > 1 else ""))
        if not torch.allclose(hot, want_hot):
            return Verdict("6.3", False, f"for s = {s.tolist()} the T -> infinity limit is "
                           f"{want_hot.tolist()}, you said {[round(x, 3) for x in hot.tolist()]}")
    return Verdict("6.3", True, "with and without ties")


CHECKS = {"6.1": _score_std, "6.2": _dropout, "6.3": _temperature_limits}
