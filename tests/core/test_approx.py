"""Approximations: error shrinks with rank / features / chunk size, the Performer estimator is
unbiased, causal prefix sums equal the masked quadratic form, and auto never picks them."""

import math
import statistics

import pytest
import torch

from attnlab import attention, which_backend
from attnlab.core import approx as A
from attnlab.nn import LinformerProjection, PerformerAttention


def _rel(out, exact):
    return float((out - exact).norm() / exact.norm())


def _qkv(n=256, d=16, scale=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, n, d, generator=g, dtype=torch.float64) * scale for _ in range(2))
    v = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    return q, k, v


def test_performer_error_falls_with_the_number_of_features():
    q, k, v = _qkv()
    exact = attention(q, k, v)

    def mean_err(m):
        return statistics.mean(
            _rel(A.performer_attention(q, k, v, A.orthogonal_gaussian(
                m, 16, torch.Generator().manual_seed(s), dtype=torch.float64)), exact)
            for s in range(8))

    e16, e64, e256 = mean_err(16), mean_err(64), mean_err(256)
    assert e256 < 0.5 * e16 and e16 > e64 > e256


def test_performer_estimator_is_unbiased_for_the_softmax_kernel():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, generator=g, dtype=torch.float64) * 0.4
    y = torch.randn(16, generator=g, dtype=torch.float64) * 0.4

    def phi(z, w):
        return torch.exp(z @ w.T - 0.5 * z.square().sum()) / math.sqrt(w.shape[0])

    draws = [float(phi(x, w) @ phi(y, w)) for w in
             (A.orthogonal_gaussian(16, 16, g, dtype=torch.float64) for _ in range(3000))]
    mean, se = statistics.mean(draws), statistics.stdev(draws) / math.sqrt(len(draws))
    assert abs(mean - math.exp(float(x @ y))) < 4 * se


def test_orthogonal_features_are_orthogonal_within_blocks_with_gaussian_norms():
    w = A.orthogonal_gaussian(40, 16, torch.Generator().manual_seed(0), dtype=torch.float64)
    block = w[:16] / w[:16].norm(dim=-1, keepdim=True)
    assert torch.allclose(block @ block.T, torch.eye(16, dtype=torch.float64), atol=1e-12)
    assert w.shape == (40, 16) and 2.0 < float(w.norm(dim=-1).mean()) < 6.0   # ~ sqrt(16)


def test_linformer_error_falls_with_rank_and_is_exact_at_full_rank():
    q, k, v = _qkv(n=128)
    exact = attention(q, k, v)
    errs = [_rel(A.linformer_attention(q, k, v, e, e), exact)
            for e in (A.pooling_projection(128, r, dtype=torch.float64) for r in (8, 32, 64, 128))]
    assert errs[0] > errs[1] > errs[2] > errs[3] and errs[3] < 1e-12


def test_lsh_error_falls_with_chunk_size_and_vanishes_when_one_chunk_sees_all():
    q, k, v = _qkv(n=256, scale=1.0)
    exact = attention(q, k, v)
    errs = [_rel(A.lsh_attention(q, k, v, chunk=c, n_buckets=4,
                                 generator=torch.Generator().manual_seed(0)), exact)
            for c in (16, 64, 128)]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-12
    # More hash rounds: each query sees the union of its buckets, so the error falls.
    rounds = [_rel(A.lsh_attention(q, k, v, chunk=64, n_buckets=4, n_hashes=h,
                                   generator=torch.Generator().manual_seed(0)), exact)
              for h in (1, 2, 4)]
    assert rounds[0] > rounds[1] > rounds[2]


@pytest.mark.parametrize("chunk", [1, 7, 64, 300])
def test_causal_prefix_form_equals_masked_quadratic_form(chunk):
    q, k, v = _qkv(n=100, scale=1.0)
    pq, pk = A.elu_features(q), A.elu_features(k)
    w = (pq @ pk.transpose(-1, -2)).tril()
    quadratic = (w / w.sum(-1, keepdim=True)) @ v
    assert torch.allclose(A.kernel_attention(pq, pk, v, causal=True, chunk=chunk), quadratic,
                          atol=1e-12)
    noncausal = (pq @ pk.transpose(-1, -2))
    assert torch.allclose(A.kernel_attention(pq, pk, v),
                          (noncausal / noncausal.sum(-1, keepdim=True)) @ v, atol=1e-12)


def test_linear_attention_is_a_different_kernel_not_an_estimate():
    q, k, v = _qkv(scale=1.0)
    err = _rel(A.linear_attention(q, k, v), attention(q, k, v))
    assert err > 0.05                                     # it does not converge to softmax


def test_modules_own_their_parameters():
    lin = LinformerProjection(seq_len=64, rank=8)
    q = torch.randn(2, 4, 64, 16)
    out = lin(q, q, q)
    out.sum().backward()
    assert out.shape == (2, 4, 64, 16) and lin.e.grad is not None and lin.f.grad is not None
    with pytest.raises(ValueError, match="rank must be in 1..seq_len"):
        LinformerProjection(16, 32)
    with pytest.raises(ValueError, match="e must have shape"):
        lin(q[..., :32, :], q[..., :32, :], q[..., :32, :])
    perf = PerformerAttention(16, num_features=32, causal=True,
                              generator=torch.Generator().manual_seed(0))
    before = perf.features.clone()
    perf.redraw_features(torch.Generator().manual_seed(1))
    assert not torch.equal(before, perf.features)
    out = perf(q, q, q)
    assert out.shape == q.shape
    # causal: a new last key and value leave every earlier output as it was
    k2, v2 = q.clone(), q.clone()
    k2[..., -1, :], v2[..., -1, :] = torch.randn(16), torch.randn(16)
    out2 = perf(q, k2, v2)
    assert torch.allclose(out2[..., :-1, :], out[..., :-1, :], atol=1e-6)
    assert (out2[..., -1, :] - out[..., -1, :]).abs().amax() > 1e-3


def test_approximate_backends_run_only_when_named():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 16, generator=g, dtype=torch.float64) * s
               for s in (0.3, 0.3, 1.0))          # 256 keys: more than one LSH chunk
    exact = attention(q, k, v)
    for name in ("performer", "linear", "lsh"):
        out = attention(q, k, v, backend=name)
        # an approximation: close to softmax attention in the large, never equal to it
        assert out.shape == q.shape and 1e-6 < _rel(out, exact) < 1.0, name
    assert which_backend(q, k, v) not in ("performer", "linear", "lsh")
    with pytest.raises(ValueError, match="N_q == N_k"):
        attention(q[..., :10, :], q, q, causal=True, backend="performer")
