"""Dropout: reproducible from a generator, identical across reference and tiled, unbiased."""

import pytest
import torch

from attnlab import attention


def _qkv(*shape, n=37, d=8):
    return (torch.randn(*shape, n, d, dtype=torch.float64, requires_grad=True) for _ in range(3))


def test_same_generator_same_output_and_different_seed_differs():
    q, k, v = _qkv(2)
    a = attention(q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(5))
    b = attention(q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(5))
    c = attention(q, k, v, dropout_p=0.3, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.allclose(a, c)


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"window": (5, 2)}])
def test_tiled_equals_reference_with_dropout_outputs_and_gradients(tiles, kw):
    tiles(tiled_sizes=(8, 16))
    q, k, v = _qkv(2, 3)
    res = {}
    for backend in ("reference", "tiled"):
        out = attention(q, k, v, dropout_p=0.25, backend=backend,
                        generator=torch.Generator().manual_seed(11), **kw)
        res[backend] = (out, torch.autograd.grad(out.square().sum(), (q, k, v)))
    assert torch.allclose(res["reference"][0], res["tiled"][0], atol=1e-12)
    for a, b in zip(res["reference"][1], res["tiled"][1]):
        assert torch.allclose(a, b, atol=1e-11)


def test_weights_after_dropout_reproduce_output():
    q, k, v = _qkv(1)
    r = attention(q, k, v, dropout_p=0.5, return_weights=True,
                  generator=torch.Generator().manual_seed(0))
    assert torch.allclose(r.out, r.weights @ v)
    kept = (r.weights > 0).double().mean().item()
    assert 0.4 < kept < 0.6


def test_dropout_is_unbiased_in_expectation():
    q, k, v = (torch.randn(1, 16, 4, dtype=torch.float64) for _ in range(3))
    exact = attention(q, k, v)
    g = torch.Generator().manual_seed(0)
    mean = torch.stack([attention(q, k, v, dropout_p=0.2, generator=g) for _ in range(400)]).mean(0)
    assert (mean - exact).abs().max() < 0.1
