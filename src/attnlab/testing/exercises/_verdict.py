"""The one-line verdict every exercise check returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Verdict:
    """One exercise's verdict: ``passed``, and what was off when it did not."""

    exercise: str
    passed: bool
    detail: str

    def __str__(self) -> str:
        if self.passed:
            return f"exercise {self.exercise} passed ({self.detail})"
        return f"exercise {self.exercise} FAIL: {self.detail}"


def conformance(exercise: str, fn, supports: set[str] = frozenset({"scale"})) -> "Verdict":
    """The verdict on an attention function a reader wrote: first its output on one plain
    float64 case beside the formula (so a wrong forward pass is named as such), then
    :func:`attnlab.testing.check_attention` in float64 and float32, outputs and gradients."""
    import math

    import torch

    from attnlab.testing import check_attention  # noqa: PLC0415 (the package imports this one)

    g = torch.Generator().manual_seed(19)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (5, 23, 23))
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1) @ v
    got = fn(q, k, v)
    if tuple(got.shape) != tuple(want.shape):
        return Verdict(exercise, False, f"for q (1, 2, 5, 8) and k, v (1, 2, 23, 8) the output "
                       f"has shape {tuple(want.shape)}, yours {tuple(got.shape)}")
    err = float((got - want).abs().max())
    if not err <= 1e-10:
        return Verdict(exercise, False, f"the output differs from softmax(q k^T / sqrt(D)) v by "
                       f"up to {err:.3g} on 5 queries and 23 keys (float64)")
    report = check_attention(fn, supports=supports, dtypes=(torch.float64, torch.float32))
    if not report.passed:
        return Verdict(exercise, False, f"right on a plain case, but the conformance kit "
                       f"finds: {report.failures[0]}")
    return Verdict(exercise, True, f"{len(report.results)} conformance checks, outputs and "
                   "gradients")
