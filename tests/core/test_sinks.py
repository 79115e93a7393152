"""Learnable attention sinks: a per-head logit in every row's softmax that carries no value.
Against the definition written out (the sink logit concatenated to the scores, softmax, its
column dropped), outputs, lse and gradients including the sink's, on every backend with lse."""

import pytest
import torch

from attnlab import attention

H = 3


def _by_definition(q, k, v, sink, keep=None):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    full = torch.cat([s, sink.view(1, H, 1, 1).expand(*s.shape[:-1], 1)], dim=-1)
    return torch.softmax(full, -1)[..., :-1] @ v, torch.logsumexp(full, -1)


@pytest.mark.parametrize("backend, causal", [("reference", False), ("tiled", False),
                                             ("tiled", True), ("blocksparse", True)])
def test_sinks_match_their_definition_with_gradients(backend, causal, tiles):
    tiles(tiled_sizes=(8, 16))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, H, n, d, generator=g, dtype=torch.float64, requires_grad=True)
               for n, d in ((30, 8), (30, 8), (30, 5)))
    sink = torch.randn(H, generator=g, dtype=torch.float64, requires_grad=True)
    keep = torch.ones(30, 30, dtype=torch.bool).tril() if causal else None
    want = _by_definition(q, k, v, sink, keep)
    got = attention(q, k, v, sinks=sink, causal=causal, backend=backend, return_lse=True)
    assert torch.allclose(got.out, want[0], atol=1e-12)
    assert torch.allclose(got.lse, want[1], atol=1e-12)
    cot = torch.randn(want[0].shape, generator=g, dtype=torch.float64)
    ga = torch.autograd.grad((got.out * cot).sum() + got.lse.sum(), (q, k, v, sink))
    gb = torch.autograd.grad((want[0] * cot).sum() + want[1].sum(), (q, k, v, sink))
    for a, b in zip(ga, gb):
        assert torch.allclose(a, b, atol=1e-11)


def test_weights_leave_the_sink_its_share_and_empty_rows_stay_zero():
    q, k, v = (torch.randn(1, H, 6, 4, dtype=torch.float64) for _ in range(3))
    keep = torch.rand(1, H, 6, 6) > 0.3
    keep[..., 2, :] = False                                     # a row that sees no key
    sink = torch.tensor([0.0, 2.0, -2.0], dtype=torch.float64)
    res = attention(q, k, v, mask=keep, sinks=sink, return_weights=True, return_lse=True)
    rows = res.weights.sum(-1)                                  # < 1: the sink took the rest
    assert (rows < 1).all() and torch.allclose(rows[..., 2], torch.zeros(1, H, dtype=torch.float64))
    assert (res.out[..., 2, :] == 0).all() and torch.allclose(res.lse[..., 2], sink.view(1, H))
    assert torch.isfinite(res.out).all()


def test_sink_errors_and_who_serves_them():
    q = torch.randn(1, H, 4, 8)
    with pytest.raises(ValueError, match="backend 'sdpa' cannot serve sinks"):
        attention(q, q, q, sinks=torch.zeros(H), backend="sdpa")
    with pytest.raises(ValueError, match="do not broadcast to the batch dims"):
        attention(q, q, q, sinks=torch.zeros(H + 1))
    with pytest.raises(TypeError, match="sinks must be a float tensor"):
        attention(q, q, q, sinks=[0.0, 0.0, 0.0])


@pytest.mark.parametrize("backend", ["reference", "tiled", "blocksparse"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sinks_keep_the_input_dtype(backend, dtype):
    # the backends' lse is float32 under half-precision inputs; the merged output must not be
    # promoted by it (a bfloat16 gpt-oss's o_proj then fails on a float32 input)
    q = torch.randn(1, 2, 9, 8, dtype=dtype)
    res = attention(q, q, q, sinks=torch.zeros(2, dtype=dtype), backend=backend, causal=True,
                    return_lse=True)
    assert res.out.dtype == dtype
