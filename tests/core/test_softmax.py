"""The shared merge primitive on its own."""

import torch

from attnlab import attention, merge_partials
from attnlab.core.softmax import masked_softmax


def test_merge_of_two_halves_equals_full_softmax():
    q, k, v = (torch.randn(2, 9, 6, dtype=torch.float64) for _ in range(3))
    full = attention(q, k, v, backend="reference", return_lse=True)
    a = attention(q, k[:, :4], v[:, :4], backend="reference", return_lse=True, scale=6 ** -0.5)
    b = attention(q, k[:, 4:], v[:, 4:], backend="reference", return_lse=True, scale=6 ** -0.5)
    out, lse = merge_partials(a.out, a.lse, b.out, b.lse)
    assert torch.allclose(out, full.out) and torch.allclose(lse, full.lse)


def test_merge_is_commutative_and_empty_part_is_identity():
    o, lse = torch.randn(5, 3), torch.randn(5)
    empty_o, empty_lse = torch.zeros(5, 3), torch.full((5,), float("-inf"))
    m1, l1 = merge_partials(o, lse, empty_o, empty_lse)
    m2, l2 = merge_partials(empty_o, empty_lse, o, lse)
    assert torch.allclose(m1, o) and torch.allclose(l1, lse)
    assert torch.allclose(m2, o) and torch.allclose(l2, lse)
    m3, l3 = merge_partials(empty_o, empty_lse, empty_o, empty_lse)
    assert (m3 == 0).all() and torch.isneginf(l3).all()


def test_merge_handles_huge_lse_without_overflow():
    o1, o2 = torch.ones(1, 2), -torch.ones(1, 2)
    out, lse = merge_partials(o1, torch.tensor([1000.0]), o2, torch.tensor([1000.0]))
    assert torch.allclose(out, torch.zeros(1, 2)) and torch.isfinite(lse).all()


def test_masked_softmax_empty_row_and_gradient():
    s = torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]], requires_grad=True)
    a, lse = masked_softmax(s)
    assert (a[1] == 0).all() and torch.isneginf(lse[1])
    (a.sum() + lse[0]).backward()
    assert torch.isfinite(s.grad).all() and (s.grad[1] == 0).all()
