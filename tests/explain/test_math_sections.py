"""docs/math.md sections 8-13 on numbers: multi-head, sinusoidal positions, the encoder block,
initialisation and "weight is not importance", each computed by hand beside attnlab's code."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.nn import Encoder, EncoderLayer, MultiheadAttention
from attnlab.nn.position import sinusoidal_table


def _project(x, w, b, e):
    return [x @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e] for i in range(3)]


def test_multi_head_is_h_small_attentions_concatenated_then_w_o():
    torch.manual_seed(0)
    e, h, n = 16, 4, 5
    mha = MultiheadAttention(e, h, batch_first=True, dtype=torch.float64)
    x = torch.randn(1, n, e, dtype=torch.float64)
    q, k, v = _project(x[0], mha.in_proj_weight, mha.in_proj_bias, e)
    d = e // h
    heads = []
    for i in range(h):                                       # split: head i owns dims i*d..
        cols = slice(i * d, (i + 1) * d)
        a = torch.softmax(q[:, cols] @ k[:, cols].T / math.sqrt(d), dim=-1)
        heads.append(a @ v[:, cols])
    out = torch.cat(heads, dim=-1) @ mha.out_proj.weight.T + mha.out_proj.bias
    assert torch.allclose(mha(x, x, x)[0][0], out, atol=1e-12)


@pytest.mark.parametrize("k", [1, 7, 50])
def test_sinusoidal_positions_shift_by_a_rotation_that_ignores_the_position(k):
    d = 64
    pe = sinusoidal_table(300, d, dtype=torch.float64)
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    m = torch.zeros(d, d, dtype=torch.float64)               # block-diagonal rotation M_k
    m[0::2, 0::2] = torch.diag(c)
    m[0::2, 1::2] = torch.diag(s)
    m[1::2, 0::2] = torch.diag(-s)
    m[1::2, 1::2] = torch.diag(c)
    assert (pe[k:] - pe[:-k] @ m.T).abs().max() < 1e-9      # PE(p + k) = M_k PE(p), every p
    dots = (pe[k:] * pe[:-k]).sum(-1)                        # PE(p) . PE(p + k) = sum cos(k w)
    assert (dots - c.sum()).abs().max() < 1e-9


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_encoder_block_is_residuals_around_attention_and_feed_forward(norm_first):
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first,
                         dtype=torch.float64).eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)

    def sa(t):
        return layer.self_attn(t, t, t)[0]

    def ff(t):
        return layer.ff.linear2(F.relu(layer.ff.linear1(t)))
    if norm_first:                                          # pre-LN: x + f(LN(x))
        y = x + sa(layer.norm1(x))
        y = y + ff(layer.norm2(y))
    else:                                                   # post-LN: LN(x + f(x))
        y = layer.norm1(x + sa(x))
        y = layer.norm2(y + ff(y))
    assert torch.allclose(layer(x), y, atol=1e-12)
    ln = layer.norm1                                        # LayerNorm by hand
    z = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True)
                                                     + ln.eps)
    assert torch.allclose(ln(x), z * ln.weight + ln.bias, atol=1e-12)


def test_scaled_init_keeps_a_deep_residual_stream_level():
    torch.manual_seed(0)
    x = torch.randn(8, 32, 64)

    def growth(init):                                       # variance out / variance in
        torch.manual_seed(0)
        enc = Encoder(EncoderLayer(64, 4, 256, dropout=0.0, batch_first=True, norm_first=True),
                      12, init=init).eval()
        with torch.no_grad():
            return float(enc(x).var() / x.var())
    copies, scaled = growth(None), growth("scaled")         # measured 16.2 and 1.13
    assert copies > 10 and scaled < 1.3, (copies, scaled)


def test_weight_is_not_importance_on_the_embedded_model():
    from attnlab.nn import load_default
    model, tok = load_default()
    batch = tok(["The animal didn't cross the street because it was too tired."],
                return_tensors="pt")
    with torch.no_grad():
        res = model(batch["input_ids"], batch["attention_mask"], return_weights=True,
                    return_hidden_states=True)
        mha = model.encoder.layers[2].self_attn
        e, d = mha.embed_dim, mha.head_dim
        v = _project(res.hidden_states[2][0].double(), mha.in_proj_weight.double(),
                     mha.in_proj_bias.double(), e)[2][:, 5 * d:6 * d]
    alpha = res.attentions[2][0, 5].double()                  # layer 2, head 5: (n, n)
    norms = v.norm(dim=-1)
    contrib = alpha * norms                                   # ||alpha_ij v_j||
    weight_share = float(alpha[:, 0].mean())
    value_share = float((contrib[:, 0] / contrib.sum(-1)).mean())
    assert round(weight_share, 2) == 0.64 and round(float(norms[0]), 3) == 0.079
    assert float(norms[1:].median()) > 40 * float(norms[0]) and value_share < 0.1
