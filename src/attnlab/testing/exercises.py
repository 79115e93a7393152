"""Checks for the tutorials' exercises (docs/tutorials/): each takes what the reader wrote and
says, in one line, whether it is right and, if not, what is off.

    from attnlab.testing.exercises import check
    check("7.1", dot_form)          # prints "exercise 7.1 passed" or "exercise 7.1 FAIL: ..."

Every check is tested against a planted wrong answer and against the solution
(tests/testing/test_exercises.py), so a reader's wrong answer cannot pass it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch


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


# ---- chapter 7: attention pooling -----------------------------------------------------------

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
    worst = 0.0
    for sigma in (0.3, 1.0, 2.5):
        x_q = torch.rand(9, generator=g, dtype=torch.float64) * 5
        x_k = torch.rand(13, generator=g, dtype=torch.float64) * 5
        got = torch.as_tensor(fn(x_q, x_k, sigma), dtype=torch.float64)
        if got.shape != (9, 13):
            return Verdict("7.1", False, f"expected weights of shape (9, 13) for 9 queries and "
                           f"13 keys, got {tuple(got.shape)}")
        worst = max(worst, float((got - gaussian_weights(x_q, x_k, sigma)).abs().max()))
    if worst > 1e-9:
        return Verdict("7.1", False, f"the weights differ from the Gaussian kernel's by up to "
                       f"{worst:.3g}; did you keep the key's own term -k^2 / (2 sigma^2)?")
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


# ---- chapter 8: the KV cache, MQA and GQA -------------------------------------------------

def _cache_bytes(fn: Callable) -> Verdict:
    cases = [dict(layers=32, kv_heads=8, head_dim=128, tokens=4096, batch=1, bytes_per=2),
             dict(layers=2, kv_heads=1, head_dim=64, tokens=100, batch=3, bytes_per=4),
             dict(layers=12, kv_heads=12, head_dim=64, tokens=1024, batch=8, bytes_per=2)]
    for c in cases:
        want = 2 * c["layers"] * c["kv_heads"] * c["head_dim"] * c["tokens"] * c["batch"] * \
            c["bytes_per"]
        got = fn(**c)
        if got != want:
            hint = " (keys and values: two tensors)" if got * 2 == want else ""
            return Verdict("8.1", False, f"for {c} the cache holds {want:,} bytes, you said "
                           f"{got:,}{hint}")
    return Verdict("8.1", True, "three configurations")


def _cached_step(fn: Callable) -> Verdict:
    """``fn(q_new, k_cache, v_cache, k_new, v_new) -> (out, k_cache, v_cache)``: one decoding
    step of causal attention with a cache; checked against full causal attention."""
    g = torch.Generator().manual_seed(9)
    b, h, d, n = 2, 3, 8, 7
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    full = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")), dim=-1) @ v
    kc, vc = k[:, :, :0], v[:, :, :0]
    for t in range(n):
        out, kc, vc = fn(q[:, :, t:t + 1], kc, vc, k[:, :, t:t + 1], v[:, :, t:t + 1])
        if kc.shape[2] != t + 1:
            return Verdict("8.2", False, f"after step {t} the cache should hold {t + 1} "
                           f"positions, it holds {kc.shape[2]}")
        err = float((out - full[:, :, t:t + 1]).abs().max())
        if err > 1e-10:
            return Verdict("8.2", False, f"step {t}'s output differs from full causal attention "
                           f"by {err:.3g}")
    return Verdict("8.2", True, f"{n} steps equal full causal attention")


def _gqa_share(fn: Callable) -> Verdict:
    """``fn(k, n_heads) -> (B, n_heads, N, D)``: K/V of ``H_kv`` heads repeated so that query head
    ``h`` uses K/V head ``h // (n_heads // H_kv)``."""
    k = torch.arange(2 * 2 * 3 * 1, dtype=torch.float64).reshape(2, 2, 3, 1)
    got = fn(k, 6)
    want = k.repeat_interleave(3, dim=1)
    if tuple(got.shape) != tuple(want.shape):
        return Verdict("8.3", False, f"expected shape {tuple(want.shape)}, got {tuple(got.shape)}")
    if not torch.equal(got, want):
        heads = [int(got[0, h, 0, 0]) // 3 for h in range(6)]
        return Verdict("8.3", False, f"query heads 0-5 read K/V heads {heads}; grouped-query "
                       "attention gives heads 0-2 the first K/V head and 3-5 the second")
    return Verdict("8.3", True, "6 query heads over 2 K/V heads")


# ---- chapter 9: additive attention in an encoder-decoder --------------------------------------

def _additive_scores(fn: Callable) -> Verdict:
    """``fn(s, h, W, U, v) -> (B, L)``: Bahdanau's scores ``e_j = v . tanh(W s + U h_j)`` of the
    decoder state ``s (B, n)`` against the annotations ``h (B, L, m)``."""
    g = torch.Generator().manual_seed(10)
    s_, h = torch.randn(2, 5, generator=g), torch.randn(2, 7, 6, generator=g)
    W, U, v = (torch.randn(4, 5, generator=g), torch.randn(4, 6, generator=g),
               torch.randn(4, generator=g))
    want = torch.tanh((s_ @ W.T)[:, None, :] + h @ U.T) @ v
    got = torch.as_tensor(fn(s_, h, W, U, v))
    if tuple(got.shape) != (2, 7):
        return Verdict("9.1", False, f"expected scores of shape (2, 7) (batch, source "
                       f"positions), got {tuple(got.shape)}")
    err = float((got - want).abs().max())
    if err > 1e-5:
        return Verdict("9.1", False, f"the scores differ by up to {err:.3g}; the tanh takes the "
                       "sum W s + U h_j, and v reduces its result to one number per position")
    return Verdict("9.1", True, "7 positions, 2 sequences")


def _reversal_alignment(fn: Callable) -> Verdict:
    """``fn(L) -> (L, L)``: where output step t of a reversal of length L should attend."""
    for L in (1, 4, 9):
        got = torch.as_tensor(fn(L), dtype=torch.float64)
        want = torch.eye(L, dtype=torch.float64).flip(1)
        if tuple(got.shape) != (L, L) or not torch.allclose(got, want):
            return Verdict("9.2", False, f"for L = {L}, output step 0 writes the last input "
                           f"digit: row t should put its weight on column {L} - 1 - t")
    return Verdict("9.2", True, "the anti-diagonal")


_CHECKS = {"7.1": _dot_form, "7.2": _small_width, "7.3": _trained_width,
           "8.1": _cache_bytes, "8.2": _cached_step, "8.3": _gqa_share,
           "9.1": _additive_scores, "9.2": _reversal_alignment}


def check(exercise: str, answer, *args, **kwargs) -> Verdict:
    """Check ``answer`` to ``exercise`` (e.g. ``"7.1"``) and print the one-line verdict."""
    if exercise not in _CHECKS:
        raise ValueError(f"exercise must be one of {', '.join(_CHECKS)}, got {exercise!r}")
    try:
        verdict = _CHECKS[exercise](answer, *args, **kwargs)
    except NotImplementedError:
        verdict = Verdict(exercise, False, "not written yet (the cell still raises "
                          "NotImplementedError)")
    except Exception as err:                      # the reader's code failed: say how
        verdict = Verdict(exercise, False, f"your code raised {type(err).__name__}: {err}")
    print(verdict)
    return verdict
