"""Learned scoring functions: hand-computed Bahdanau case, Luong bilinear, cosine."""

import math

import pytest
import torch

from attnlab import attend, attention
from attnlab.nn import AdditiveAttention, CosineAttention, GeneralAttention


def test_additive_hand_computed():
    att = AdditiveAttention(query_dim=1, key_dim=2, hidden_dim=1)
    with torch.no_grad():
        att.w_q.weight.fill_(1.0)                       # W_q = [1]
        att.w_k.weight.copy_(torch.tensor([[1.0, -1.0]]))
        att.w_k.bias.fill_(0.5)                         # b
        att.v.weight.fill_(2.0)                         # v = [2]
    q = torch.tensor([[0.5]])                           # (N_q = 1, D_q = 1)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])          # (N_k = 2, D_k = 2)
    v = torch.tensor([[1.0], [3.0]])
    # s_0 = 2 tanh(0.5 + 1 + 0.5) = 2 tanh(2); s_1 = 2 tanh(0.5 - 1 + 0.5) = 0
    s0 = 2 * math.tanh(2.0)
    a0 = math.exp(s0) / (math.exp(s0) + 1.0)
    res = att(q, k, v, return_weights=True)
    assert torch.allclose(res.weights, torch.tensor([[a0, 1 - a0]]))
    assert torch.allclose(res.out, torch.tensor([[a0 * 1 + (1 - a0) * 3]]))


def test_additive_shapes_masks_and_fully_masked_rows():
    att = AdditiveAttention(query_dim=7, key_dim=5, hidden_dim=11)
    q, k, v = torch.randn(2, 3, 7), torch.randn(2, 4, 5), torch.randn(2, 4, 6)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False],
                         [True, False, True, False]])   # core polarity: True = may attend
    res = att(q, k, v, mask=mask, return_weights=True)
    assert res.out.shape == (2, 3, 6)
    assert (res.weights[..., ~mask] == 0).all() and (res.out[:, 1] == 0).all()
    res.out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in att.parameters())
    with pytest.raises(ValueError, match="query has last dim 5 .* query_dim=7"):
        att(torch.randn(2, 3, 5), k, v)


def test_general_attention_is_bilinear():
    att = GeneralAttention(query_dim=4, key_dim=3)
    q, k, v = torch.randn(5, 4), torch.randn(6, 3), torch.randn(6, 2)
    res = att(q, k, v, return_weights=True)
    s = q @ att.weight @ k.T
    assert torch.allclose(res.weights, torch.softmax(s, -1), atol=1e-6)


def test_cosine_attention_bounded_scores_and_learned_temperature():
    att = CosineAttention(temperature=0.5)
    q, k, v = torch.randn(3, 8) * 100, torch.randn(5, 8), torch.randn(5, 2)
    w = att(q, k, v, return_weights=True).weights
    cos = torch.nn.functional.cosine_similarity(q[:, None], k[None], dim=-1)
    assert torch.allclose(w, torch.softmax(cos / 0.5, -1), atol=1e-5)
    att(q, k, v).sum().backward()
    assert att.log_tau.grad is not None
    fixed = CosineAttention(0.5, learn_temperature=False)
    assert not any(True for _ in fixed.parameters())
    with pytest.raises(ValueError, match="temperature must be > 0"):
        CosineAttention(0.0)


def test_attend_equals_attention_for_dot_product_scores():
    q, k, v = (torch.randn(2, n, d, dtype=torch.float64) for n, d in ((5, 4), (7, 4), (7, 3)))
    s = q @ k.transpose(-1, -2) / 2.0
    for kw in ({}, {"causal": True}, {"window": (1, 1)}, {"temperature": 0.3}):
        a = attend(s, v, return_lse=True, return_weights=True, **kw)
        b = attention(q, k, v, backend="reference", return_lse=True, return_weights=True, **kw)
        assert torch.allclose(a.out, b.out) and torch.allclose(a.weights, b.weights)
    with pytest.raises(TypeError, match="scores and v must share one dtype"):
        attend(s, v.float())
