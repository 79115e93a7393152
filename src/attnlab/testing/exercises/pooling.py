"""Chapter 7's checks: attention pooling from Nadaraya-Watson kernel regression."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, dtype_name, tolerance


def gaussian_weights(x_q: torch.Tensor, x_k: torch.Tensor, sigma: float) -> torch.Tensor:
    """Nadaraya-Watson weights with a Gaussian kernel: ``softmax(-(x_q - x_k)^2 / (2 sigma^2))``
    over the keys, ``(len(x_q), len(x_k))``."""
    d = x_q[:, None] - x_k[None, :]
    return torch.softmax(-d ** 2 / (2 * sigma ** 2), dim=-1)


def nadaraya_watson(x_q, x_k, y_k, sigma: float) -> torch.Tensor:
    """The kernel-regression estimate at each query: the attention-weighted average of ``y_k``."""
    return gaussian_weights(x_q, x_k, sigma) @ y_k


def loo_mse(x: torch.Tensor, y: torch.Tensor, sigma) -> torch.Tensor:
    """Leave-one-out squared error of Nadaraya-Watson on ``(x, y)``: each point predicted from
    all the others (its own weight masked), so that a tiny width cannot copy its own value."""
    d = x[:, None] - x[None, :]
    s = -d ** 2 / (2 * sigma ** 2)
    s = s.masked_fill(torch.eye(len(x), dtype=torch.bool), float("-inf"))
    return ((torch.softmax(s, dim=-1) @ y - y) ** 2).mean()


def _dot_form(fn: Callable) -> Verdict:
    g = torch.Generator().manual_seed(7)
    worst, allowed, dtype = 0.0, 0.0, "float64"
    for sigma in (0.3, 1.0, 2.5):
        x_q = torch.rand(9, generator=g, dtype=torch.float64) * 5
        x_k = torch.rand(13, generator=g, dtype=torch.float64) * 5
        answer = fn(x_q, x_k, sigma)
        allowed, dtype = tolerance(answer), dtype_name(answer)
        got = torch.as_tensor(answer, dtype=torch.float64)
        if got.shape != (9, 13):
            return Verdict("7.1", False, f"expected weights of shape (9, 13) for 9 queries and "
                           f"13 keys, got {tuple(got.shape)}")
        worst = max(worst, float((got - gaussian_weights(x_q, x_k, sigma)).abs().max()))
    if worst > allowed:
        return Verdict("7.1", False, f"the weights differ from the Gaussian kernel's by up to "
                       f"{worst:.3g} ({dtype}, 9 queries, 13 keys, sigma 0.3, 1 and 2.5)")
    return Verdict("7.1", True, f"largest difference {worst:.1e}")


def _small_width(fn: Callable) -> Verdict:
    g = torch.Generator().manual_seed(8)
    x_k = torch.sort(torch.rand(20, generator=g, dtype=torch.float64) * 5).values
    y_k = torch.randn(20, generator=g, dtype=torch.float64)
    x_q = torch.rand(6, generator=g, dtype=torch.float64) * 5
    got = torch.as_tensor(fn(x_q, x_k, y_k), dtype=torch.float64).reshape(-1)
    want = nadaraya_watson(x_q, x_k, y_k, 1e-3)
    err = float((got - want).abs().max())
    if err > 1e-6:
        return Verdict("7.2", False, f"at sigma = 0.001 the estimate is {want.numpy().round(3)}, "
                       f"you predicted {got.numpy().round(3)}")
    return Verdict("7.2", True, "the width -> 0 limit")


def _trained_width(sigma, x: torch.Tensor, y: torch.Tensor, target: float) -> Verdict:
    s = float(sigma)
    if not math.isfinite(s) or s <= 0:
        return Verdict("7.3", False, f"sigma must be a positive number, got {sigma!r}")
    loss = float(loo_mse(x, y, torch.tensor(s, dtype=x.dtype)))
    if loss > target:
        return Verdict("7.3", False, f"leave-one-out MSE {loss:.4f} with sigma = {s:.3f}; the "
                       f"target is {target:.4f}")
    return Verdict("7.3", True, f"leave-one-out MSE {loss:.4f} at sigma = {s:.3f}")


CHECKS = {"7.1": _dot_form, "7.2": _small_width, "7.3": _trained_width}
