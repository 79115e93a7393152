"""Stable softmax pieces shared by every backend: masked softmax with lse, and the merge rule.

The merge rule. Split the keys into disjoint blocks and let block b give the partial result
``(o_b, lse_b)`` with ``o_b = softmax(s_b) @ v_b`` and ``lse_b = log sum_j exp(s_bj)``. Then the
full result over all keys is::

    lse = log(exp(lse_1) + exp(lse_2))                  (a log-sum-exp of the block lse's)
    o   = exp(lse_1 - lse) * o_1 + exp(lse_2 - lse) * o_2

because each block's weights are renormalized by its share of the total mass. A block in which
a query sees no key has ``lse_b = -inf`` and ``o_b = 0`` and drops out; if all blocks are empty,
``lse = -inf`` and ``o = 0`` (the fully-masked-row contract). Tiled, block-sparse and (later)
ring attention all use :func:`merge_partials`; see ``docs/math.md``.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def finite_or_zero(x: torch.Tensor) -> torch.Tensor:
    """Replace -inf (an empty row's max or lse) by 0 so that ``s - x`` stays -inf, never NaN."""
    return torch.where(torch.isneginf(x), torch.zeros_like(x), x)


def masked_softmax(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the last dim of scores that may hold -inf; returns ``(a, lse)``.

    Rows that are entirely -inf give ``a = 0`` and ``lse = -inf`` with zero gradients, where
    ``torch.softmax`` would give NaN. Written with the max subtracted for stability:
    ``a = exp(s - m) / sum exp(s - m)``, ``lse = m + log sum exp(s - m)``.

    Args:
        s: scores ``(..., N_q, N_k)``, -inf where masked.

    Returns:
        ``a (..., N_q, N_k)`` and ``lse (..., N_q)``.
    """
    # The shift m cancels in exact arithmetic, so it carries no gradient.
    m = finite_or_zero(s.amax(dim=-1, keepdim=True).detach())      # (..., N_q, 1)
    p = torch.exp(s - m)                                             # (..., N_q, N_k), 0 at -inf
    l = p.sum(dim=-1, keepdim=True)                                  # (..., N_q, 1)
    empty = l == 0
    # Double where: the unselected branch must not see log(0) or x/0, whose gradients are NaN.
    l_safe = torch.where(empty, torch.ones_like(l), l)
    a = p / l_safe
    lse = torch.where(empty, torch.full_like(l, NEG_INF), m + torch.log(l_safe))
    return a, lse.squeeze(-1)


def merge_partials(out_a: torch.Tensor, lse_a: torch.Tensor,
                   out_b: torch.Tensor, lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attention results over disjoint key sets (log-sum-exp weighting).

    Args:
        out_a, out_b: normalized partial outputs ``(..., N_q, D_v)``; 0 on rows with no key.
        lse_a, lse_b: their log-sum-exp of scores ``(..., N_q)``; -inf on rows with no key.

    Returns:
        ``(out, lse)`` over the union of the key sets, the same as one softmax over all keys.

    Example:
        >>> o, lse = merge_partials(o1, lse1, o2, lse2)   # doctest: +SKIP
    """
    out, m, r = merge_split(out_a, lse_a, 0.0, out_b, lse_b, 0.0)
    return out, m + r


def add_sink(out: torch.Tensor, lse: torch.Tensor,
             sink: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One more key with logit ``sink`` (``(..., N_q)``, or broadcastable to it) and value 0,
    merged into a result ``(out (..., N_q, D_v), lse (..., N_q))`` by :func:`merge_partials`:
    the sink of gpt-oss's heads, which takes softmax mass and returns nothing. Differentiable
    in all three; a row with no key gets lse = sink and output 0."""
    sink = sink.to(lse.dtype).expand_as(lse)
    return merge_partials(out, lse, torch.zeros_like(out), sink)


def merge_split(out_a: torch.Tensor, m_a: torch.Tensor, r_a, out_b: torch.Tensor,
                m_b: torch.Tensor, r_b, *, base2: bool = False):
    """The merge rule with each lse held in two parts, ``lse = m + r``: ``m`` a row shift (the
    largest score seen) and ``r = log sum exp(s - m)``, small.

    Under a huge additive mask (``finfo.min``, -1e9 on every key of a row) ``m`` is huge and
    ``m + r`` rounds ``r`` away; kept apart, ``exp(s - m - r)`` is still the softmax (the
    backward passes recompute it this way). With ``base2`` every log and exp is base 2 (the
    scores are in units of log2 e). Returns ``(out, m, r)``; a row with no key in either part
    gives ``out = 0``, ``m = r = -inf``. :func:`merge_partials` is this with ``r = 0``.
    """
    exp, logaddexp = (torch.exp2, torch.logaddexp2) if base2 else (torch.exp, torch.logaddexp)
    m = torch.maximum(m_a, m_b)                          # (..., N_q)
    m_safe = finite_or_zero(m)
    x_a = (m_a - m_safe) + r_a                           # the parts' lse relative to m
    x_b = (m_b - m_safe) + r_b
    r = logaddexp(x_a, x_b)                              # -inf only if both parts are empty
    r_safe = finite_or_zero(r)
    w_a = exp(x_a - r_safe).unsqueeze(-1)                # (..., N_q, 1), 0 for an empty part
    w_b = exp(x_b - r_safe).unsqueeze(-1)
    return w_a * out_a + w_b * out_b, torch.where(torch.isneginf(r), r, m), r


def block_lse(m: torch.Tensor, l: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For one block of keys with row shift ``m`` and row sums ``l = sum exp(s - m)``: the
    divisor to normalize with (1 on rows with no key) and the block's lse (-inf there).
    Shared by the forward passes of tiled, blocksparse and its band path."""
    empty = l == 0
    l_safe = torch.where(empty, torch.ones_like(l), l)
    return l_safe, torch.where(empty, float("-inf"), m + torch.log(l_safe))


def backward_terms(d_out: torch.Tensor, out: torch.Tensor, d_lse: torch.Tensor | None,
                   lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What a backward pass that recomputes ``P = exp(S - lse)`` needs (docs/math.md §3):
    ``D_i = dO_i · O_i - dlse_i``, and lse with +inf on empty rows so that P = 0 there."""
    delta = (d_out * out).sum(dim=-1)
    if d_lse is not None:
        delta = delta - d_lse
    return delta, torch.where(torch.isneginf(lse), float("inf"), lse)
