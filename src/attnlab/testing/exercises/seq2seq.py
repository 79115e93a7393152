"""Chapter 9's checks: additive attention in an encoder-decoder."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, close


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
        b, j = divmod(int((got - want).abs().argmax()), 7)
        return Verdict("9.1", False, f"the scores differ by up to {err:.3g} (float32 inputs), "
                       f"largest at sequence {b}, position {j}: {float(want[b, j]):.4f} "
                       f"against yours {float(got[b, j]):.4f}")
    return Verdict("9.1", True, "7 positions, 2 sequences")


def _reversal_alignment(fn: Callable) -> Verdict:
    """``fn(L) -> (L, L)``: where output step t of a reversal of length L should attend."""
    for L in (1, 4, 9):
        got = torch.as_tensor(fn(L))
        want = torch.eye(L, dtype=torch.float64).flip(1)
        if tuple(got.shape) != (L, L) or not close(got, want):
            return Verdict("9.2", False, f"for L = {L}, output step 0 writes the last input "
                           f"digit: row t should put its weight on column {L} - 1 - t")
    return Verdict("9.2", True, "the anti-diagonal")


def _padded_alignment(fn: Callable) -> Verdict:
    """``fn(e (B, L), keep (B, L) bool) -> (B, L)``: softmax over the real source positions."""
    g = torch.Generator().manual_seed(23)
    e = torch.randn(3, 6, generator=g, dtype=torch.float64)
    keep = torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None]
    want = torch.softmax(e.masked_fill(~keep, float("-inf")), dim=-1)
    got = torch.as_tensor(fn(e, keep))
    if tuple(got.shape) != (3, 6):
        return Verdict("9.3", False, f"expected (3, 6) weights, got {tuple(got.shape)}")
    leak = float(got[~keep].abs().max())
    if leak > 0:
        return Verdict("9.3", False, f"a source of 2 digits padded to 6 gives its padding "
                       f"{float(got[1, 2:].sum()):.0%} of the weight; padding must get none")
    if not close(got, want):
        return Verdict("9.3", False, "the padding gets no weight, but the real positions' "
                       "weights are not their softmax")
    return Verdict("9.3", True, "sources of 6, 2 and 4 digits padded to 6")


CHECKS = {"9.1": _additive_scores, "9.2": _reversal_alignment, "9.3": _padded_alignment}
