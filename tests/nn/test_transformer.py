"""EncoderLayer / Encoder against torch.nn.TransformerEncoderLayer / TransformerEncoder."""

import math

import pytest
import torch
import torch.nn as nn

from attnlab.nn import Encoder, EncoderLayer, FeedForward

CONFIGS = [
    dict(norm_first=False, activation="relu", batch_first=True),
    dict(norm_first=True, activation="gelu", batch_first=True),
    dict(norm_first=False, activation="gelu", batch_first=False),
    dict(norm_first=True, activation="relu", batch_first=False),
]


def _masks(kind, b, n, h, dtype):
    if kind == "none":
        return {}
    if kind == "causal":
        return {"src_mask": nn.Transformer.generate_square_subsequent_mask(n, dtype=dtype)}
    kpm = torch.zeros(b, n, dtype=torch.bool)
    kpm[0, n - 2:] = True
    return {"src_key_padding_mask": kpm}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("mask", ["none", "causal", "padding"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("train", [False, True])
def test_layer_parity_outputs_and_gradients(cfg, mask, dtype, train):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(16, 4, dim_feedforward=24, dropout=0.0, dtype=dtype, **cfg)
    ours = EncoderLayer.from_torch(ref)
    ref.train(train), ours.train(train)
    b, n = 3, 7
    x = torch.randn(b, n, 16, dtype=dtype)
    if not cfg["batch_first"]:
        x = x.transpose(0, 1)
    kw = _masks(mask, b, n, 4, dtype)
    res = []
    for m in (ref, ours):
        xi = x.clone().requires_grad_()
        out = m(xi, **kw)
        grads = torch.autograd.grad(out.square().sum(), [xi, *m.parameters()])
        res.append((out, grads))
    tol = 1e-10 if dtype == torch.float64 else 3e-5
    assert torch.allclose(res[0][0], res[1][0], atol=tol, rtol=tol)
    for a, c in zip(res[0][1], res[1][1]):
        assert torch.allclose(a, c, atol=10 * tol, rtol=10 * tol)


def test_encoder_parity_and_attention_maps():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=True,
                                       dtype=torch.float64)
    ref = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(16, dtype=torch.float64),
                                enable_nested_tensor=False)
    ours = Encoder.from_torch(ref)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    kpm = torch.zeros(2, 9, dtype=torch.bool)
    kpm[1, 6:] = True
    assert torch.allclose(ref(x, src_key_padding_mask=kpm), ours(x, src_key_padding_mask=kpm),
                          atol=1e-12)
    res = ours(x, src_key_padding_mask=kpm, return_weights=True, return_hidden_states=True)
    assert len(res.attentions) == 3 and res.attentions[0].shape == (2, 4, 9, 9)
    assert len(res.hidden_states) == 4 and torch.equal(res.hidden_states[0], x)
    assert (res.attentions[2][1, :, :, 6:] == 0).all()              # padded keys get no weight
    assert torch.allclose(res.attentions[1].sum(-1), torch.ones(2, 4, 9, dtype=torch.float64))


def test_layer_attention_maps_match_a_manual_call():
    layer = EncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = torch.randn(1, 5, 8)
    res = layer(x, return_weights=True)
    _, w = layer.self_attn(x, x, x, average_attn_weights=False)
    assert torch.allclose(res.attention, w) and torch.allclose(res.out, layer(x))


def test_initialization_options():
    torch.manual_seed(0)
    d, f = 64, 256
    xav = EncoderLayer(d, 4, f, init="xavier_uniform")
    bound = math.sqrt(6 / (d + f))
    assert xav.ff.linear1.weight.abs().max() <= bound and (xav.ff.linear1.bias == 0).all()
    kai = EncoderLayer(d, 4, f, init="kaiming")
    std = kai.ff.linear1.weight.std().item()
    assert abs(std - math.sqrt(2 / d)) < 0.1 * math.sqrt(2 / d)       # He: Var = 2 / fan_in
    with pytest.raises(ValueError, match="init must be one of"):
        EncoderLayer(d, 4, f, init="orthogonal")


def test_feedforward_and_bad_arguments():
    ff = FeedForward(8, 16, dropout=0.0, activation="gelu")
    x = torch.randn(3, 8)
    expected = ff.linear2(torch.nn.functional.gelu(ff.linear1(x)))
    assert torch.allclose(ff(x), expected)
    with pytest.raises(ValueError, match="activation must be one of"):
        FeedForward(8, 16, activation="swishy")
    with pytest.raises(ValueError,
                       match="embed_dim \\(10\\) must be divisible by num_heads \\(4\\)"):
        EncoderLayer(10, 4)
    with pytest.raises(ValueError, match="num_layers must be an int >= 1"):
        Encoder(EncoderLayer(8, 2), 0)


@pytest.mark.parametrize("activation", [nn.GELU(approximate="tanh"), nn.GELU(), nn.ReLU(),
                                        nn.SiLU(), lambda t: torch.tanh(t) * t],
                         ids=["gelu-tanh", "gelu", "relu", "silu", "function"])
def test_from_torch_copies_every_activation_exactly(activation):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, activation=activation,
                                     batch_first=True, dtype=torch.float64)
    ours = EncoderLayer.from_torch(ref)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    # tanh-GELU differs from exact GELU by 1.6e-4 here; a converter may not swap them
    assert torch.allclose(ref(x), ours(x), atol=1e-13, rtol=0)


def test_encoder_takes_is_causal_none_as_torch_does():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                       dtype=torch.float64)
    ref = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    ours = Encoder.from_torch(ref)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64)
    assert torch.allclose(ours(x, is_causal=None), ref(x, is_causal=None), atol=1e-12)
    assert torch.allclose(ours(x, mask=causal, is_causal=None),
                          ref(x, mask=causal, is_causal=None), atol=1e-12)
    assert torch.allclose(ours.layers[0](x, is_causal=None), ref.layers[0](x), atol=1e-12)
