"""Chapter 10's checks: the decoder's causal mask, a beam-search step, and what a change of
one target token moves under teacher forcing."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, changed_outputs


def _causal_mask(fn: Callable) -> Verdict:
    """``fn(n_q, n_k) -> (n_q, n_k)`` bool, True where the query may not look, for the last
    ``n_q`` of ``n_k`` positions (bottom-right aligned, as a KV cache needs)."""
    for n_q, n_k in ((5, 5), (1, 6), (3, 7), (2, 2)):
        got = torch.as_tensor(fn(n_q, n_k))
        pos = torch.arange(n_k - n_q, n_k)[:, None]
        want = torch.arange(n_k)[None, :] > pos
        if tuple(got.shape) != (n_q, n_k):
            return Verdict("10.1", False, f"expected a ({n_q}, {n_k}) mask, got "
                           f"{tuple(got.shape)}")
        if got.dtype != torch.bool:
            return Verdict("10.1", False, f"expected a boolean mask, got {got.dtype}")
        if not torch.equal(got, want):
            wrong = (got != want).nonzero()[0].tolist()
            return Verdict("10.1", False, f"for n_q = {n_q}, n_k = {n_k}: query {wrong[0]} "
                           f"(position {n_k - n_q + wrong[0]}) and key {wrong[1]} should be "
                           f"{'masked (True)' if want[tuple(wrong)] else 'visible (False)'}: "
                           "this exercise's mask is True where the query may not look, the "
                           "opposite of attnlab.attention's boolean masks (True keeps)")
    return Verdict("10.1", True, "square, one cached query, and n_q < n_k")


def _beam_step(fn: Callable) -> Verdict:
    """``fn(score (B, k), logp (B, k, V), k) -> (score (B, k), parent (B, k), token (B, k))``."""
    g = torch.Generator().manual_seed(11)
    B, k, V = 3, 4, 7
    score = torch.sort(torch.randn(B, k, generator=g, dtype=torch.float64) * 3,
                       descending=True).values
    logp = torch.randn(B, k, V, generator=g, dtype=torch.float64).log_softmax(-1)
    total = (score[:, :, None] + logp).reshape(B, -1)
    want, best = total.topk(k, dim=1)
    got_score, parent, token = (torch.as_tensor(t) for t in fn(score, logp, k))
    if tuple(got_score.shape) != (B, k) or tuple(parent.shape) != (B, k) or \
            tuple(token.shape) != (B, k):
        return Verdict("10.2", False, f"expected three ({B}, {k}) tensors, got "
                       f"{tuple(got_score.shape)}, {tuple(parent.shape)}, {tuple(token.shape)}")
    if not torch.allclose(got_score.to(torch.float64), want):
        return Verdict("10.2", False, f"the best totals of the first source are "
                       f"{want[0].numpy().round(3)}, you kept {got_score[0].numpy().round(3)}")
    if not (torch.equal(parent.long(), best // V) and torch.equal(token.long(), best % V)):
        return Verdict("10.2", False, f"the totals are right but the parents or tokens are "
                       f"not: source 0 keeps parents {(best // V)[0].tolist()} and tokens "
                       f"{(best % V)[0].tolist()}, yours {parent.long()[0].tolist()} and "
                       f"{token.long()[0].tolist()}")
    return Verdict("10.2", True, f"{B} sources, {k} beams, {V} tokens")


def _moved_positions(fn: Callable) -> Verdict:
    """``fn(n, t) -> (n,)`` bool: the decoder outputs that change when target token t changes
    (input shifted right behind a start token, causal mask)."""
    for n, t in ((6, 0), (6, 3), (4, 3)):
        got = torch.as_tensor(fn(n, t)).bool()
        want = torch.arange(n) > t
        if tuple(got.shape) != (n,) or not torch.equal(got, want):
            return Verdict("10.3", False, f"for n = {n}, t = {t} " + changed_outputs(want, got))
    return Verdict("10.3", True, "positions after t")


CHECKS = {"10.1": _causal_mask, "10.2": _beam_step, "10.3": _moved_positions}
