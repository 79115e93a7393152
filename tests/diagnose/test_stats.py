"""Attention statistics on cases with known answers, against the dense computation, and at
long lengths without an N x N matrix."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab import attention
from attnlab.diagnose import diagnose, head_health
from attnlab.nn import Encoder, EncoderLayer, MultiheadAttention


def _dense(q, k, **kw):
    w = attention(q.double(), k.double(), k.double(), backend="reference", return_weights=True,
                  **kw).weights
    live = w.sum(-1) > 0
    ent = -(w * torch.log(torch.where(w > 0, w, 1.0))).sum(-1)
    jac = ((w ** 2).sum(-1) - 2 * (w ** 3).sum(-1) + (w ** 2).sum(-1) ** 2).clamp(min=0).sqrt()

    def mean(x):
        return (x * live).sum((0, 2)) / live.sum((0, 2))
    return {"entropy": mean(ent), "jacobian_norm": mean(jac), "sink_mass": mean(w[..., 0]),
            "saturation": mean((w.amax(-1) > 0.99).double())}


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"window": (3, 1)},
                                {"mask": torch.rand(2, 1, 1, 37) > 0.3}])
def test_block_statistics_equal_the_dense_ones(kw):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 29, 8, generator=g) * 2, torch.randn(2, 3, 37, 8, generator=g) * 2
    s = head_health(q, k, block_q=5, block_k=7, **kw)
    d = _dense(q, k, **kw)
    for name, want in d.items():
        assert torch.allclose(getattr(s, name).double(), want, atol=1e-5), name


def test_scores_of_known_variance():
    """Unit-variance q, k: the scaled scores have std 1 (what 1/sqrt(d) is for); without the
    scale they have std sqrt(d); q scaled by 3 gives 3."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 512, 64, generator=g), torch.randn(1, 2, 512, 64, generator=g)
    s = head_health(q, k)
    assert s.predicted_std == 1.0 and torch.allclose(s.score_std, torch.ones(2), atol=0.03)
    assert torch.allclose(s.expected_std, torch.ones(2), atol=0.03)
    raw = head_health(q, k, scale=1.0)
    assert raw.predicted_std == 8.0
    assert torch.allclose(raw.score_std, torch.full((2,), 8.0), rtol=0.03)
    assert torch.allclose(head_health(3 * q, k).score_std, torch.full((2,), 3.0), rtol=0.03)


def test_uniform_and_saturated_softmax():
    n = 50
    uniform = head_health(torch.zeros(1, 1, 10, 4), torch.randn(1, 1, n, 4))
    assert float(uniform.entropy) == pytest.approx(math.log(n))
    assert float(uniform.entropy_ratio) == pytest.approx(1.0)
    assert float(uniform.saturation) == 0.0
    assert float(uniform.jacobian_norm) == pytest.approx(math.sqrt((n - 1) / n ** 2), rel=1e-5)
    k = torch.eye(4).view(1, 1, 4, 4)
    hot = head_health(100 * torch.eye(4).view(1, 1, 4, 4), k, scale=1.0)
    assert float(hot.saturation) == 1.0 and float(hot.entropy_ratio) < 1e-3
    assert float(hot.jacobian_norm) < 1e-6
    first = head_health(torch.ones(1, 1, 6, 2),
                            torch.tensor([[[[9.0, 9.0]] + [[0.0, 0.0]] * 5]]),
                            scale=1.0)
    assert float(first.sink_mass) > 0.99


def test_fully_masked_rows_are_left_out():
    q, k = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    keep = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    keep[..., 0, :] = False
    s = head_health(q, k, mask=keep)
    assert torch.isfinite(s.entropy).all() and torch.isfinite(s.jacobian_norm).all()


def test_long_input_needs_no_n_by_n_matrix():
    """N = 16384: one (1, 1, 256, 1024) tile at a time. A 16384 x 16384 float64 matrix would
    need 2 GiB; the tracked peak of the call stays far below (measured in the benchmark)."""
    q = torch.randn(1, 1, 16384, 16)
    s = head_health(q, q, causal=True, block_q=256, block_k=1024)
    assert s.n_keys == 16384 and torch.isfinite(s.entropy).all()


def test_diagnose_names_every_layer_of_every_model_kind():
    enc = Encoder(EncoderLayer(16, 2, 32, batch_first=True), 3)
    diag = diagnose(enc, torch.randn(2, 9, 16))
    assert [c.name for c in diag.calls] == [f"layers.{i}.self_attn" for i in range(3)]
    tmha = torch.nn.TransformerEncoderLayer(16, 2, batch_first=True)
    diag = diagnose(tmha, torch.randn(2, 9, 16))
    assert [c.name for c in diag.calls] == ["self_attn"] and diag.calls[0].stats.n_keys == 9
    with pytest.raises(RuntimeError, match="made no attention call"):
        diagnose(torch.nn.Linear(3, 3), torch.randn(2, 3))


def test_diagnose_on_a_transformers_model():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=32)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, 50, (2, 7))
    diag = diagnose(model, input_ids=ids, attention_mask=torch.ones(2, 7, dtype=torch.long))
    assert len(diag.calls) == 2 and all("attention" in c.name for c in diag.calls)
    assert model.config._attn_implementation != "attnlab"      # restored


def test_mha_remedies_do_what_their_papers_say():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 12, 32, generator=g) * 100               # huge activations
    plain = MultiheadAttention(32, 4, batch_first=True)
    normed = MultiheadAttention(32, 4, batch_first=True, qk_norm="layernorm")
    normed.load_state_dict(plain.state_dict(), strict=False)
    capped = MultiheadAttention(32, 4, batch_first=True, softcap=5.0)
    capped.load_state_dict(plain.state_dict())
    max_plain = max(c.stats.score_max.max() for c in diagnose(plain, x, x, x).calls)
    # QK-norm: unit-norm-times-sqrt(D_h) q, k => |q.k| / sqrt(D_h) <= sqrt(D_h)
    max_norm = max(c.stats.score_max.max() for c in diagnose(normed, x, x, x).calls)
    max_cap = max(c.stats.score_max.max() for c in diagnose(capped, x, x, x).calls)
    assert max_plain > 100 and max_norm <= math.sqrt(8) + 1e-4 and max_cap <= 5.0
    hot = MultiheadAttention(32, 4, batch_first=True, temperature=0.5)
    warm = MultiheadAttention(32, 4, batch_first=True, temperature=4.0)
    for m in (hot, warm):
        m.load_state_dict(plain.state_dict())
    y = torch.randn(2, 12, 32, generator=g)
    ent = [float(diagnose(m, y, y, y).calls[0].stats.entropy.mean()) for m in (hot, plain, warm)]
    assert ent[0] < ent[1] < ent[2]                            # T > 1 flattens
    rms = MultiheadAttention(32, 4, batch_first=True, qk_norm="rmsnorm")
    assert isinstance(rms.q_norm, torch.nn.RMSNorm)
    with pytest.raises(ValueError, match="qk_norm must be one of"):
        MultiheadAttention(32, 4, qk_norm="l2")
    with pytest.raises(ValueError, match="no qk_norm='layernorm'"):
        normed.to_torch()


def test_init_schemes_keep_variance():
    """Xavier (Glorot & Bengio 2010) keeps a square projection's output variance near its
    input's (its 2 / (fan_in + fan_out) is a compromise; only fan_in = fan_out keeps both ways);
    GPT-2's scaled init keeps a 24-layer pre-LN residual stream from growing with depth."""
    torch.manual_seed(0)
    x = torch.randn(64, 32, 64)
    layer = EncoderLayer(64, 4, 256, dropout=0.0, batch_first=True, init="xavier_uniform")
    with torch.no_grad():
        v = torch.nn.functional.linear(x, layer.self_attn.out_proj.weight)
    assert 0.7 < float(v.var() / x.var()) < 1.4

    def growth(init, depth):
        torch.manual_seed(0)
        enc = Encoder(EncoderLayer(64, 4, 256, dropout=0.0, batch_first=True, norm_first=True),
                      depth, init=init)
        with torch.no_grad():
            return float(enc(x).var() / x.var())
    # copied layers (torch's default): the stream's variance grows with depth (4x, 74x);
    # scaled: about the same at any depth
    assert growth(None, 24) > 10 * growth(None, 6)
    assert growth("scaled", 24) < 1.2 * growth("scaled", 6) < 1.5
