"""The one-line verdict every exercise check returns, the tolerance a check allows an answer
(relative to the rounding of the dtype the answer was computed in), and the hints."""

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
        return (f"exercise {self.exercise} FAIL: {self.detail} "
                f"[hint(\"{self.exercise}\") for a nudge]")


def dtype_of(answer):
    """The floating dtype an answer was computed in: a tensor's (or the first tensor's of a
    tuple or list), numpy's, float64 for Python numbers."""
    import torch

    if isinstance(answer, torch.Tensor):
        return answer.dtype if answer.dtype.is_floating_point else torch.float64
    if isinstance(answer, (tuple, list)) and answer:
        return dtype_of(answer[0])
    dtype = getattr(answer, "dtype", None)                  # numpy arrays and scalars
    if dtype is not None and getattr(dtype, "kind", "") == "f":
        return {2: torch.float16, 4: torch.float32}.get(dtype.itemsize, torch.float64)
    return torch.float64


def tolerance(answer, scale: float = 1.0, ulps: float = 64.0) -> float:
    """What a right answer may differ by: ``ulps`` roundings of the answer's dtype at the size
    ``scale`` of the values compared (float64: about 1.4e-14 at 1; float32: 7.6e-6)."""
    import torch

    return ulps * torch.finfo(dtype_of(answer)).eps * max(1.0, abs(scale))


def close(got, want, scale: float = 1.0, ulps: float = 64.0, rtol: float = 1e-5,
          atol: float = 1e-8) -> bool:
    """Whether ``got`` (any dtype, a tensor, an array or a list) equals ``want`` within the
    rounding of ``got``'s own dtype or ``torch.allclose``'s default tolerance, whichever is
    larger: both are compared in float64, so a float32 or bfloat16 answer never fails on the
    comparison itself. Infinities must match exactly."""
    import torch

    a = torch.as_tensor(got)
    tol = tolerance(a, scale, ulps) if a.is_floating_point() else 0.0
    a, b = a.double(), torch.as_tensor(want).double()
    if a.shape != b.shape:
        return False
    finite = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), finite) or not torch.equal(a[~finite], b[~finite]):
        return False
    diff, ref = (a - b)[finite].abs(), b[finite].abs()
    return bool((diff <= torch.clamp(atol + rtol * ref, min=tol)).all())


def errors(got, want):
    """``|got - want|`` per entry in float64, infinite where the answer is NaN or infinite:
    ``errors(...).max()`` is the largest error and ``.argmax()`` the entry to name."""
    import torch

    diff = (torch.as_tensor(got).double() - torch.as_tensor(want).double()).abs()
    return torch.where(torch.isfinite(diff), diff, torch.full_like(diff, float("inf")))


def dtype_name(answer) -> str:
    return str(dtype_of(answer)).replace("torch.", "")


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
    if not isinstance(got, torch.Tensor):
        return Verdict(exercise, False, f"the output is a {type(got).__module__}."
                       f"{type(got).__name__}; the conformance kit differentiates it, so it "
                       "must be a torch tensor built from q, k and v")
    if tuple(got.shape) != tuple(want.shape):
        return Verdict(exercise, False, f"for q (1, 2, 5, 8) and k, v (1, 2, 23, 8) the output "
                       f"has shape {tuple(want.shape)}, yours {tuple(got.shape)}")
    err = float((got.double() - want).abs().max())
    if not err <= tolerance(got):
        where = divmod(int((got.double() - want).abs().flatten().argmax()), 8)
        return Verdict(exercise, False, f"the output differs from softmax(q k^T / sqrt(D)) v by "
                       f"up to {err:.3g} on 5 queries and 23 keys (inputs float64, output "
                       f"{dtype_name(got)}; largest at flat row {where[0]}, column "
                       f"{where[1]})")
    if got.dtype != q.dtype:
        return Verdict(exercise, False, f"for float64 inputs the output is {dtype_name(got)} "
                       f"(it differs from the float64 formula by {err:.3g}, that dtype's "
                       "rounding)")
    report = check_attention(fn, supports=supports, dtypes=(torch.float64, torch.float32))
    if not report.passed:
        return Verdict(exercise, False, f"right on a plain case, but the conformance kit "
                       f"finds: {report.failures[0]}")
    return Verdict(exercise, True, f"{len(report.results)} conformance checks, outputs and "
                   "gradients")


def changed_outputs(want, got) -> str:
    """Which outputs change, as the checks of exercises 4.3 and 10.3 say it: the expected
    positions, then the answer's."""
    return (f"the outputs that change are {want.nonzero().flatten().tolist()}, you said "
            f"{got.nonzero().flatten().tolist()}")
