"""Mask algebra: constructors, and/or, materialization, and agreement with the core flags."""

import pytest
import torch

from attnlab import attention, masks


def grid(fn, n_q, n_k, **kw):
    return masks.materialize(fn, n_q, n_k, **kw)[0, 0]


def test_causal_matches_lower_triangle_and_bottom_right():
    assert torch.equal(grid(masks.causal(), 5, 5), torch.ones(5, 5).tril().bool())
    br = grid(masks.causal(offset=2), 3, 5)
    assert br.tolist() == [[True, True, True, False, False], [True, True, True, True, False],
                           [True] * 5]


def test_window_and_dilated():
    w = grid(masks.window(1, 2), 5, 5)
    for i in range(5):
        for j in range(5):
            assert w[i, j] == (i - 1 <= j <= i + 2)
    d = grid(masks.dilated(2, 4, 4), 7, 7)
    for i in range(7):
        for j in range(7):
            assert d[i, j] == (abs(i - j) <= 4 and (i - j) % 2 == 0)
    assert torch.equal(grid(masks.dilated(1, 2, 0), 6, 6), grid(masks.window(2, 0), 6, 6))


def test_key_padding_segments_global():
    kp = masks.materialize(masks.key_padding(torch.tensor([2, 4])), 3, 4, batch=2)
    assert kp[0, 0, 0].tolist() == [True, True, False, False] and kp[1].all()
    seg = grid(masks.segments(torch.tensor([0, 0, 1, 1, 1])), 5, 5)
    assert seg.tolist()[1] == [True, True, False, False, False]
    assert torch.equal(seg, seg.T)
    g = grid(masks.global_tokens([0, 3]), 5, 5)
    assert g[:, 0].all() and g[0].all() and g[3].all() and g[:, 3].all() and not g[1, 2]


def test_and_or_compose():
    fn = masks.or_masks(masks.and_masks(masks.causal(), masks.window(1, 0)), masks.global_tokens(1))
    m = grid(fn, 6, 6)
    expected = (grid(masks.causal(), 6, 6) & grid(masks.window(1, 0), 6, 6)) | grid(
        masks.global_tokens(1), 6, 6)
    assert torch.equal(m, expected)
    assert grid(masks.and_masks(), 3, 4).all()


def test_to_additive():
    keep = torch.tensor([[True, False]])
    bias = masks.to_additive(keep, torch.float64)
    assert bias.tolist() == [[0.0, float("-inf")]]
    with pytest.raises(TypeError, match="bool"):
        masks.to_additive(bias)


def test_mask_function_bool_tensor_and_bias_give_the_same_attention():
    q, k, v = torch.randn(2, 3, 9, 4), torch.randn(2, 3, 11, 4), torch.randn(2, 3, 11, 5)
    fn = masks.and_masks(masks.window(3, 1, offset=2), masks.key_padding(torch.tensor([11, 6])))
    keep = masks.materialize(fn, 9, 11, batch=2, heads=3)
    by_fn = attention(q, k, v, mask=fn, backend="reference")
    by_bool = attention(q, k, v, mask=keep, backend="reference")
    by_bias = attention(q, k, v, mask=masks.to_additive(keep), backend="reference")
    assert torch.allclose(by_fn, by_bool) and torch.allclose(by_bool, by_bias)


@pytest.mark.parametrize("n_q, n_k", [(7, 7), (4, 9), (9, 4)])
def test_core_flags_equal_mask_functions(n_q, n_k):
    q, k, v = torch.randn(n_q, 5), torch.randn(n_k, 5), torch.randn(n_k, 3)
    off = n_k - n_q
    flags = attention(q, k, v, causal=True, window=(2, None), backend="reference")
    fn = masks.and_masks(masks.causal(off), masks.window(2, None, off))
    assert torch.allclose(flags, attention(q, k, v, mask=fn, backend="reference"))


def test_flex_style_user_function_is_accepted():
    def every_other(b, h, q_idx, kv_idx):
        return (kv_idx % 2 == 0) | (q_idx == kv_idx)

    q, k, v = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    w = attention(q, k, v, mask=every_other, backend="reference", return_weights=True).weights
    assert (w[..., 1, 3] == 0).all() and (w[..., 1, 1] > 0).all()


def test_bad_mask_function_output_and_bad_arguments():
    with pytest.raises(TypeError, match="must return a bool tensor"):
        masks.materialize(lambda b, h, qi, ki: qi - ki, 3, 3)
    with pytest.raises(ValueError, match="left must be an int >= 0"):
        masks.window(-2, 0)
    with pytest.raises(ValueError, match="dilation must be an int >= 1"):
        masks.dilated(0)
    with pytest.raises(ValueError, match="lengths must be a 1-D integer tensor"):
        masks.key_padding(torch.ones(2, 2))
