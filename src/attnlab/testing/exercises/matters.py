"""Chapter 16's checks: weight is not importance. The share of what a head writes that comes
from a key (Kobayashi et al. 2020), a head's importance from one backward (Michel et al.
2019), and a key's relevance through one head's map (Chefer et al. 2021)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, dtype_name, errors, tolerance
from attnlab.testing.exercises.heads import second_copy_nats


def _value_weighted(fn: Callable) -> Verdict:
    """``fn(a (N_q, N_k), v (N_k, D), w_o (D, d_model)) -> (N_q,)``: each row's share of what
    the head writes, ``sum_j a_ij v_j W_O``, that comes from key 0, measured by norms:
    ``a_i0 ||v_0 W_O|| / sum_j a_ij ||v_j W_O||`` (Kobayashi et al. 2020)."""
    g = torch.Generator().manual_seed(161)
    for n_q, n_k, d, d_model, causal in ((9, 9, 4, 6, True), (5, 12, 3, 8, False)):
        s = torch.randn(n_q, n_k, generator=g, dtype=torch.float64) * 2
        s[:, 0] += 3.0                                   # a sink by weight
        if causal:
            s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), -math.inf)
        a = torch.softmax(s, -1)
        v = torch.randn(n_k, d, generator=g, dtype=torch.float64)
        v[0] *= 0.05                                     # ... that writes little
        v[1:] *= torch.linspace(0.5, 3.0, n_k - 1, dtype=torch.float64)[:, None]
        w_o = torch.randn(d, d_model, generator=g, dtype=torch.float64)
        w_o[:, 0] *= 6.0                                 # W_O stretches some directions
        n = (v @ w_o).norm(dim=-1)
        want = a[:, 0] * n[0] / (a @ n)
        answer = fn(a, v, w_o)
        got = torch.as_tensor(answer)
        if tuple(got.shape) != (n_q,):
            return Verdict("16.1", False, f"for {n_q} queries expected a ({n_q},) tensor (one "
                           f"share per row), got shape {tuple(got.shape)}")
        diff = errors(got, want)
        if float(diff.max()) > tolerance(got, 10.0):
            i = int(diff.argmax())
            return Verdict("16.1", False, f"{n_q} queries, {n_k} keys{', causal' if causal else ''}"
                           f": row {i}'s share from key 0 is {float(want[i]):.6f}, you said "
                           f"{float(got[i]):.6f} ({dtype_name(got)}); its weight there is "
                           f"{float(a[i, 0]):.6f}")
    return Verdict("16.1", True, "causal and not, N_q != N_k, a sink of weight that writes little")


def second_copy_span(ids: torch.Tensor) -> tuple[int, int]:
    """The positions ``(start, end)`` of the tokens whose loss :func:`second_copy_nats`
    averages: the second copy of A after its first token (``N_A - 1`` predictions)."""
    n_half = (ids.shape[1] - 1) // 2
    return n_half + 2, ids.shape[1]


def _importance(fn: Callable, model, ids: torch.Tensor) -> Verdict:
    """``fn(model, ids) -> (layers, heads)``: each head's first-order importance for the second
    copy's mean loss (:func:`second_copy_nats`), ``|sum_t <o_h,t, dL/do_h,t>|`` with ``o_h,t``
    the head's output at position t where the heads are concatenated, before the output
    projection (Michel et al. 2019)."""
    from attnlab.inspect.importance import head_gradients

    start, end = second_copy_span(ids)
    want = head_gradients(model, ids, target=(start, end)).importance.double()
    before = second_copy_nats(model, ids)
    answer = fn(model, ids)
    got = torch.as_tensor(answer).detach()
    if tuple(got.shape) != tuple(want.shape):
        return Verdict("16.2", False, f"expected one number per head, shape "
                       f"{tuple(want.shape)} (layers, heads), got {tuple(got.shape)}")
    if abs(second_copy_nats(model, ids) - before) > 1e-9:
        return Verdict("16.2", False, "after your function the model's loss has changed: a "
                       "hook or a gate was left in place")
    top = float(want.max())
    diff = errors(got, want)
    # float32 logits and another order of the sums: a thousandth of the largest importance
    if float(diff.max()) > 1e-3 * top:
        la, h = divmod(int(diff.argmax()), want.shape[1])
        return Verdict("16.2", False, f"for the loss of the {end - start} predictions of the "
                       f"second copy after its first token, head {la}.{h} (layer.head, 0-based) "
                       f"has importance {float(want[la, h]):.5f}, you said "
                       f"{float(got[la, h]):.5f} (the largest is {top:.5f})")
    best = divmod(int(want.argmax()), want.shape[1])
    return Verdict("16.2", True, f"every head within a thousandth of the largest ({top:.4f}, "
                   f"head {best[0]}.{best[1]})")


def _relevance(fn: Callable) -> Verdict:
    """``fn(a (N_q, N_k), grad (N_q, N_k)) -> (N_k,)``: the relevance each key receives
    through one head's map, ``sum_i (a_ij dL/da_ij)+`` (Chefer et al. 2021): the positive
    part of each product, summed over the queries."""
    g = torch.Generator().manual_seed(163)
    for n_q, n_k, causal in ((8, 8, True), (4, 11, False)):
        s = torch.randn(n_q, n_k, generator=g, dtype=torch.float64) * 2
        if causal:
            s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), -math.inf)
        a = torch.softmax(s, -1)
        grad = torch.randn(n_q, n_k, generator=g, dtype=torch.float64)
        grad[:, 1] = -grad[:, 1].abs() - 0.5           # a key whose products are all negative
        grad[0] *= 40.0                                 # one query's gradient dominates
        want = (a * grad).clamp_min(0).sum(0)
        got = torch.as_tensor(fn(a, grad))
        if tuple(got.shape) != (n_k,):
            return Verdict("16.3", False, f"for {n_k} keys expected a ({n_k},) tensor (one "
                           f"relevance per key), got shape {tuple(got.shape)}")
        diff = errors(got, want)
        if float(diff.max()) > tolerance(got, 40.0):
            j = int(diff.argmax())
            return Verdict("16.3", False, f"{n_q} queries, {n_k} keys"
                           f"{', causal' if causal else ''}: key {j}'s relevance is "
                           f"{float(want[j]):.6f}, you said {float(got[j]):.6f} "
                           f"({dtype_name(got)})")
    return Verdict("16.3", True, "causal and not, N_q != N_k, a key with only negative products")


CHECKS = {"16.1": _value_weighted, "16.2": _importance, "16.3": _relevance}
