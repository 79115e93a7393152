"""Closed-form cases with hand-computed answers pin the reference itself."""

import math

import pytest
import torch

from attnlab import attention


def test_two_keys_hand_computed():
    # q . k = (2, 0); scale 1/sqrt(2); softmax of (sqrt2, 0)
    q = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    k = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    v = torch.tensor([[10.0, 0.0, 1.0], [0.0, 10.0, 1.0]], dtype=torch.float64)
    res = attention(q, k, v, backend="reference", return_weights=True, return_lse=True)
    s = math.sqrt(2.0)
    a0 = math.exp(s) / (math.exp(s) + 1.0)
    assert torch.allclose(res.weights, torch.tensor([[a0, 1 - a0]], dtype=torch.float64))
    want = torch.tensor([[10 * a0, 10 * (1 - a0), 1.0]], dtype=torch.float64)
    assert torch.allclose(res.out, want)
    assert res.lse.item() == pytest.approx(math.log(math.exp(s) + 1.0))


def test_equal_scores_average_values():
    q = torch.zeros(3, 5, dtype=torch.float64)
    k = torch.randn(7, 5, dtype=torch.float64)
    v = torch.randn(7, 2, dtype=torch.float64)
    res = attention(q, k, v, backend="reference", return_weights=True, return_lse=True)
    assert torch.allclose(res.weights, torch.full((3, 7), 1 / 7, dtype=torch.float64))
    assert torch.allclose(res.out, v.mean(0).expand(3, 2))
    assert torch.allclose(res.lse, torch.full((3,), math.log(7), dtype=torch.float64))


def test_scale_and_temperature():
    q = torch.tensor([[2.0]], dtype=torch.float64)
    k = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    v = torch.eye(2, dtype=torch.float64)
    # scores (2, 0) * scale 3 / temperature 2 = (3, 0)
    w = attention(q, k, v, scale=3.0, temperature=2.0, backend="reference",
                  return_weights=True).weights
    assert w[0, 0].item() == pytest.approx(math.exp(3) / (math.exp(3) + 1))


def test_additive_mask_shifts_scores():
    q = torch.zeros(1, 4, dtype=torch.float64)
    k = torch.zeros(2, 4, dtype=torch.float64)
    v = torch.eye(2, dtype=torch.float64)
    bias = torch.tensor([[math.log(3.0), 0.0]], dtype=torch.float64)
    w = attention(q, k, v, mask=bias, backend="reference", return_weights=True).weights
    assert torch.allclose(w, torch.tensor([[0.75, 0.25]], dtype=torch.float64))


def test_bottom_right_causal_pattern():
    q = torch.zeros(2, 3, dtype=torch.float64)
    k = torch.zeros(4, 3, dtype=torch.float64)
    v = torch.ones(4, 1, dtype=torch.float64)
    w = attention(q, k, v, causal=True, backend="reference", return_weights=True).weights
    expected = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0], [0.25, 0.25, 0.25, 0.25]],
                            dtype=torch.float64)
    assert torch.allclose(w, expected)


def test_window_pattern_and_more_queries_than_keys():
    q = torch.zeros(4, 3, dtype=torch.float64)
    k = torch.zeros(3, 3, dtype=torch.float64)
    v = torch.ones(3, 1, dtype=torch.float64)
    res = attention(q, k, v, causal=True, window=(1, None), backend="reference",
                    return_weights=True, return_lse=True)
    # offset = N_k - N_q = -1: query 0 sits at position -1 and sees nothing.
    kept = res.weights > 0
    assert kept.tolist() == [[False, False, False], [True, False, False],
                             [True, True, False], [False, True, True]]
    assert torch.isneginf(res.lse[0]) and res.out[0].abs().sum() == 0


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = (torch.randn(3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    res = attention(q, k, v, mask=mask, backend="reference", return_weights=True, return_lse=True)
    assert res.out[1].abs().sum() == 0 and res.weights[1].abs().sum() == 0
    assert torch.isneginf(res.lse[1])
    (res.out.sum() + res.lse[torch.isfinite(res.lse)].sum()).backward()
    assert torch.isfinite(q.grad).all() and q.grad[1].abs().sum() == 0
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


def test_weights_rows_are_distributions():
    q, k, v = torch.randn(2, 3, 11, 5), torch.randn(2, 3, 13, 5), torch.randn(2, 3, 13, 7)
    w = attention(q, k, v, backend="reference", return_weights=True).weights
    assert (w >= 0).all()
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 11))
