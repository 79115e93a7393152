"""Positional encodings: closed forms, RoPE's relative property, ALiBi's slopes."""

import math

import pytest
import torch

from attnlab.nn import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    sinusoidal_table,
)


def test_sinusoidal_closed_form():
    pe = sinusoidal_table(50, 6, dtype=torch.float64)
    for pos in (0, 1, 7, 49):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    module = SinusoidalPositionalEncoding(6, max_len=50)
    x = torch.zeros(2, 10, 6)
    assert torch.allclose(module(x)[1], pe[:10].float())
    with pytest.raises(ValueError, match="exceeds max_len=50"):
        module(torch.zeros(1, 51, 6))


def test_learned_positions_add_an_embedding():
    m = LearnedPositionalEncoding(4, max_len=16)
    x = torch.zeros(2, 5, 4)
    assert torch.allclose(m(x)[0], m.embedding.weight[:5])
    with pytest.raises(TypeError):              # the old (max_len, d_model) order fails loudly
        LearnedPositionalEncoding(16, 4)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_scores_depend_only_on_relative_position(interleaved):
    rope = RotaryEmbedding(16, interleaved=interleaved)
    torch.manual_seed(0)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)

    def score(m, n):
        qs = rope(q.expand(1, 16).clone(), positions=torch.tensor([m]))
        ks = rope(k.expand(1, 16).clone(), positions=torch.tensor([n]))
        return (qs @ ks.T).item()

    for m, n in [(0, 3), (5, 2), (10, 10)]:
        for shift in (1, 7, 100):
            assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-10)
    assert score(0, 3) != pytest.approx(score(0, 4), abs=1e-3)   # but it does see the distance
    x = torch.randn(2, 3, 9, 16, dtype=torch.float64)
    assert torch.allclose(rope(x).norm(dim=-1), x.norm(dim=-1))     # rotations keep norms


def test_alibi_slopes_match_the_paper():
    f64 = torch.float64
    assert torch.allclose(alibi_slopes(8, f64), torch.tensor([2.0 ** -i for i in range(1, 9)],
                                                              dtype=f64))
    twelve = [2.0 ** -i for i in range(1, 9)] + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5]
    assert torch.allclose(alibi_slopes(12, f64), torch.tensor(twelve, dtype=f64))
    assert torch.allclose(alibi_slopes(16, f64)[:2], torch.tensor([2 ** -0.5, 2 ** -1.0],
                                                                  dtype=f64))


def test_alibi_slopes_keep_a_float32_call_in_float32():
    """The slopes come in torch's default dtype: a score_mod that captures them leaves a
    float32 call in float32 (float64 slopes promoted every tile, which made ALiBi 2.5x slower
    than with float32 ones, benchmarks/bench_ratios.py)."""
    from attnlab import attention

    slopes = alibi_slopes(4)
    assert slopes.dtype == torch.float32
    q, k, v = (torch.randn(1, 4, 40, 8) for _ in range(3))
    out = attention(q, k, v, score_mod=lambda s, b, h, i, j: s - slopes[h] * (i - j).abs(),
                    causal=True, backend="tiled")
    ref = attention(q, k, v, mask=alibi_bias(4, 40, dtype=torch.float32)[None],
                    backend="reference")
    assert out.dtype == torch.float32
    assert torch.allclose(out, ref, atol=1e-5)


def test_alibi_bias_pattern():
    b = alibi_bias(8, 4, causal=True, dtype=torch.float64)
    assert b.shape == (8, 4, 4)
    assert b[0, 3].tolist() == [-1.5, -1.0, -0.5, 0.0]            # slope 1/2, distances 3..0
    assert torch.isneginf(b[0, 0, 1:]).all()
    sym = alibi_bias(8, 3, 5, causal=False, dtype=torch.float64)
    assert sym[0, 0].tolist() == [-1.0, -0.5, 0.0, -0.5, -1.0]    # p = 0 + 5 - 3 = 2


def test_rope_of_q_and_k_together():
    rope = RotaryEmbedding(8)
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 9, 8)
    rq, rk = rope(q, k)                               # queries are the last 4 positions of k
    assert torch.allclose(rq, rope(q, positions=torch.arange(5, 9)))
    assert torch.allclose(rk, rope(k))
    with pytest.raises(TypeError, match="positions="):
        rope(q, torch.arange(4))
    with pytest.raises(ValueError, match="N_q <= N_k"):
        rope(k, q)
