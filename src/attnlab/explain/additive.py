"""Additive (Bahdanau) scoring on the same Q and K as a walk, beside the dot product."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab.explain.walk import Check, Walkthrough


@dataclass
class AdditiveWalk:
    """Additive (Bahdanau) scoring on the same Q and K as a walk, beside the dot product."""

    tokens: list[str]
    scores: torch.Tensor              # (N, N) v^T tanh(W_q q_i + W_k k_j + b)
    a: torch.Tensor                   # (N, N)
    dot: Walkthrough
    w_q: torch.Tensor                 # (D, H) the scorer's parameters (q_i W_q)
    w_k: torch.Tensor                 # (D, H)
    b: torch.Tensor                   # (H,)
    v: torch.Tensor                   # (H,)
    checks: list[Check] = field(default_factory=list)


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def additive_walk(wt: Walkthrough, hidden: int | None = None, seed: int = 0) -> AdditiveWalk:
    """Score the walk's queries and keys with a (seeded, untrained) additive scorer, compute
    its softmax by the formula and check it against :class:`attnlab.nn.AdditiveAttention`."""
    from attnlab.nn import AdditiveAttention

    d = wt.q.shape[1]
    torch.manual_seed(seed)
    add = AdditiveAttention(d, d, hidden_dim=hidden or d).double()
    with torch.no_grad():
        hq = wt.q @ add.w_q.weight.T                                     # (N_q, H)
        hk = wt.k @ add.w_k.weight.T + add.w_k.bias                      # (N_k, H)
        s = (torch.tanh(hq[:, None, :] + hk[None, :, :]) @ add.v.weight.T).squeeze(-1)
        s = s.masked_fill(~wt.keep, float("-inf"))
        a = torch.zeros_like(s)
        live = wt.keep.any(-1)
        a[live] = torch.softmax(s[live], dim=-1)
        res = add(wt.q, wt.k, wt.v, mask=wt.keep, return_weights=True)
    aw = AdditiveWalk(wt.tokens, s, a, wt, add.w_q.weight.T.detach().clone(),
                      add.w_k.weight.T.detach().clone(), add.w_k.bias.detach().clone(),
                      add.v.weight[0].detach().clone())
    err = float((res.weights - a).abs().max())
    aw.checks.append(Check("formula = AdditiveAttention", err <= 1e-12, f"max |dA| = {err:.2e}"))
    return aw
