"""MultiheadAttention against torch.nn.MultiheadAttention for add_bias_kv / add_zero_attn,
unbatched input and CausalBias masks; grouped-query attention (num_kv_heads) against a
full multi-head module whose K/V heads are repeated by hand."""

import pytest
import torch
import torch.nn as nn
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attnlab.nn import MultiheadAttention


def _masks(kind, b, h, n_q, n_k):
    g = torch.Generator().manual_seed(4)
    if kind == "none":
        return {}
    if kind == "padding":
        kpm = torch.zeros(b, n_k, dtype=torch.bool)
        kpm[1, n_k - 2:] = True
        return {"key_padding_mask": kpm}
    if kind == "bool2d":
        return {"attn_mask": torch.rand(n_q, n_k, generator=g) > 0.7}
    if kind == "float3d":
        return {"attn_mask": torch.randn(b * h, n_q, n_k, generator=g, dtype=torch.float64)}
    raise KeyError(kind)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("mask", ["none", "padding", "bool2d", "float3d"])
@pytest.mark.parametrize("cfg", [dict(add_bias_kv=True), dict(add_zero_attn=True),
                                 dict(add_bias_kv=True, add_zero_attn=True, kdim=5, vdim=7),
                                 dict(add_bias_kv=True, batch_first=False)],
                         ids=["bias_kv", "zero_attn", "both+kdim", "bias_kv-seq-first"])
def test_parity_with_torch_extras(cfg, mask, train):
    torch.manual_seed(0)
    cfg = {"batch_first": True, **cfg}
    ref = nn.MultiheadAttention(12, 3, dtype=torch.float64, **cfg)
    ours = MultiheadAttention.from_torch(ref)
    ref.train(train), ours.train(train)
    b, n_q, n_k = 3, 4, 6
    shape = (lambda n, e: (b, n, e)) if cfg["batch_first"] else (lambda n, e: (n, b, e))
    x = torch.randn(*shape(n_q, 12), dtype=torch.float64, requires_grad=True)
    kv = (torch.randn(*shape(n_k, cfg.get("kdim", 12)), dtype=torch.float64),
          torch.randn(*shape(n_k, cfg.get("vdim", 12)), dtype=torch.float64))
    kw = _masks(mask, b, 3, n_q, n_k)
    outs = []
    for m in (ref, ours):
        out, w = m(x, *kv, average_attn_weights=False, **kw)
        grads = torch.autograd.grad(out.square().sum(), [x, *m.parameters()])
        outs.append((out, w, grads))
    assert torch.allclose(outs[0][0], outs[1][0], atol=1e-12)
    assert torch.allclose(outs[0][1], outs[1][1], atol=1e-12)
    for a, c in zip(outs[0][2], outs[1][2]):
        assert torch.allclose(a, c, atol=1e-11)
    back = ours.to_torch()
    assert torch.allclose(back(x, *kv, **kw)[0], ref(x, *kv, **kw)[0], atol=1e-12)


def test_unbatched_input_like_torch():
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, dtype=torch.float64, add_bias_kv=True)
    ours = MultiheadAttention.from_torch(ref)
    x = torch.randn(5, 8, dtype=torch.float64)                  # (seq_len, embed_dim)
    kpm = torch.tensor([False, False, False, True, True])
    a, b = ref(x, x, x, key_padding_mask=kpm), ours(x, x, x, key_padding_mask=kpm)
    assert a[0].shape == b[0].shape == (5, 8) and a[1].shape == b[1].shape == (5, 6)
    assert torch.allclose(a[0], b[0], atol=1e-12) and torch.allclose(a[1], b[1], atol=1e-12)


@pytest.mark.parametrize("variant", ["lower_right", "upper_left"])
def test_causal_bias_masks(variant):
    torch.manual_seed(0)
    ours = MultiheadAttention(8, 2, batch_first=True).double()
    q, kv = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    bias = (causal_lower_right if variant == "lower_right" else causal_upper_left)(3, 5)
    keep = bias._materialize()                                  # True = may attend
    out, w = ours(q, kv, kv, attn_mask=bias)
    want, w_want = ours(q, kv, kv, attn_mask=~keep)            # torch polarity: True = masked
    assert torch.allclose(out, want, atol=1e-12) and torch.allclose(w, w_want, atol=1e-12)
    assert (w[..., ~keep] == 0).all()
    with pytest.raises(ValueError, match="CausalBias for \\(4, 5\\)"):
        ours(q, kv, kv, attn_mask=causal_lower_right(4, 5))


@pytest.mark.parametrize("kv_heads", [1, 2, 6])
def test_grouped_query_attention_module(kv_heads):
    torch.manual_seed(0)
    h, e = 6, 24
    d, g = e // h, h // kv_heads
    gqa = MultiheadAttention(e, h, num_kv_heads=kv_heads, batch_first=True).double()
    assert gqa.in_proj_weight.shape == (e + 2 * kv_heads * d, e)
    full = MultiheadAttention(e, h, batch_first=True).double()
    w_q, w_k, w_v = gqa.in_proj_weight.detach().split([e, kv_heads * d, kv_heads * d])
    b_q, b_k, b_v = gqa.in_proj_bias.detach().split([e, kv_heads * d, kv_heads * d])
    def rep(t):
        return t.view(kv_heads, d, *t.shape[1:]).repeat_interleave(g, 0).reshape(e, *t.shape[1:])
    with torch.no_grad():
        full.in_proj_weight.copy_(torch.cat([w_q, rep(w_k), rep(w_v)]))
        full.in_proj_bias.copy_(torch.cat([b_q, rep(b_k), rep(b_v)]))
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
    x = torch.randn(2, 7, e, dtype=torch.float64)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[0, 5:] = True
    for kw in ({}, {"key_padding_mask": kpm}, {"is_causal": True}):
        a, b = gqa(x, x, x, **kw), full(x, x, x, **kw)
        assert torch.allclose(a[0], b[0], atol=1e-12) and torch.allclose(a[1], b[1], atol=1e-12)
    if kv_heads != h:
        with pytest.raises(ValueError, match="no grouped-query attention"):
            gqa.to_torch()
    with pytest.raises(ValueError, match="num_kv_heads must be a positive int dividing"):
        MultiheadAttention(e, h, num_kv_heads=4)
