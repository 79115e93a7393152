"""Chapters 1 and 2's checks: a uniform row's weights and lse, the softmax's Jacobian, attention
written by hand, splitting heads, multi-head attention's parameter count, and a padding mask."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, conformance, dtype_name, tolerance


def _equal_row(fn: Callable) -> Verdict:
    """``fn(s, N) -> (weight, lse)`` for a row of N equal scores s."""
    for s, n in ((0.0, 4), (2.5, 10), (-3.0, 1)):
        answer = fn(s, n)
        weight, lse = (float(x) for x in answer)
        if abs(weight - 1 / n) > tolerance(answer):
            return Verdict("1.1", False, f"N = {n} equal scores: each weight is {1 / n:.6g}, "
                           f"you said {weight:.6g}")
        want = s + math.log(n)
        if abs(lse - want) > tolerance(answer, want):
            return Verdict("1.1", False, f"s = {s}, N = {n}: the lse is {want:.6f}, you said "
                           f"{lse:.6f} ({dtype_name(answer)})")
    return Verdict("1.1", True, "three rows")


def _jacobian(fn: Callable) -> Verdict:
    """``fn(a) -> (N, N)``: the softmax's Jacobian at weights ``a``, against autograd."""
    g = torch.Generator().manual_seed(17)
    for n in (3, 6):
        s = torch.randn(n, generator=g, dtype=torch.float64) * 2
        a = torch.softmax(s, -1)
        want = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), s)
        answer = fn(a)
        got = torch.as_tensor(answer, dtype=torch.float64)
        if tuple(got.shape) != (n, n):
            return Verdict("1.2", False, f"expected an ({n}, {n}) matrix, got {tuple(got.shape)}")
        diff = (got - want).abs()
        err = float(diff.max())
        if err > tolerance(answer):
            i, j = divmod(int(diff.argmax()), n)
            where = "on the diagonal" if i == j else "off the diagonal"
            return Verdict("1.2", False, f"differs from autograd's Jacobian by up to {err:.3g}, "
                           f"largest at row {i}, column {j} ({where}): autograd's "
                           f"{float(want[i, j]):.4f}, yours {float(got[i, j]):.4f}")
    return Verdict("1.2", True, "equal to autograd's")


def _my_attention(fn: Callable) -> Verdict:
    """``fn(q, k, v, scale=None)``: attention, through :func:`attnlab.testing.check_attention`
    in float64 and float32; output failures are reported before gradient ones."""
    return conformance("1.3", fn)


def _split_heads(fn: Callable) -> Verdict:
    """``fn(t (N, E), H) -> (H, N, E / H)``, head h holding dimensions h d_h .. (h + 1) d_h - 1
    of every token."""
    n, e, h = 4, 6, 3
    t = torch.arange(n * e, dtype=torch.float64).reshape(n, e)
    got = torch.as_tensor(fn(t, h))
    want = t.reshape(n, h, e // h).transpose(0, 1)
    if tuple(got.shape) != tuple(want.shape):
        return Verdict("2.1", False, f"expected {tuple(want.shape)}, got {tuple(got.shape)}")
    if not torch.equal(got, want):
        return Verdict("2.1", False, f"head 0 should hold dimensions 0-1 of every token, "
                       f"{want[0].long().tolist()}; it holds {got[0].long().tolist()}")
    return Verdict("2.1", True, f"{h} heads of {e // h} dimensions")


def _mha_parameters(fn: Callable) -> Verdict:
    """``fn(E, H)``: the parameters of multi-head attention (with biases)."""
    for e, h in ((12, 3), (64, 8), (384, 12), (10, 1)):
        want = sum(p.numel() for p in torch.nn.MultiheadAttention(e, h).parameters())
        got = fn(e, h)
        if got != want:
            return Verdict("2.2", False, f"E = {e}, H = {h}: torch.nn.MultiheadAttention has "
                           f"{want:,} parameters, you said {got:,}")
    return Verdict("2.2", True, "four widths and head counts")


def _padding_mask(fn: Callable) -> Verdict:
    """``fn(lengths, N) -> (B, 1, 1, N)`` additive mask: 0 on real keys, -inf on padding."""
    lengths, n = [3, 5, 1], 5
    got = torch.as_tensor(fn(lengths, n))
    if tuple(got.shape) != (3, 1, 1, n):
        return Verdict("2.3", False, f"expected shape (3, 1, 1, {n}) to broadcast over heads "
                       f"and queries, got {tuple(got.shape)}")
    want = torch.zeros(3, n)
    for b, length in enumerate(lengths):
        want[b, length:] = float("-inf")
    if got.dtype == torch.bool:
        return Verdict("2.3", False, "this is a boolean mask; the exercise asks for the "
                       "additive one (0 and -inf)")
    row = got[:, 0, 0].double()
    # -inf, or a finite value no score can outweigh (finfo.min, -1e9, as Hugging Face does)
    masked = torch.isneginf(row) | (row <= -1e4)
    real = row == 0
    if not (torch.equal(masked, torch.isneginf(want)) and torch.equal(real, want == 0)):
        b = int(((masked != torch.isneginf(want)) | (real != (want == 0))).any(-1)
                .nonzero()[0])
        return Verdict("2.3", False, f"for lengths {lengths} (N = {n}) row {b} should be "
                       f"{want[b].tolist()}, got {got[b, 0, 0].tolist()}")
    return Verdict("2.3", True, "three lengths")


CHECKS = {"1.1": _equal_row, "1.2": _jacobian, "1.3": _my_attention,
          "2.1": _split_heads, "2.2": _mha_parameters, "2.3": _padding_mask}
