"""Grouped-query / multi-query attention (SDPA's enable_gqa): K/V with fewer heads than Q,
on every exact backend, against the float64 reference on K/V repeated by hand; K/V are
never repeated in memory."""

import pytest
import torch

import attnlab.core.backends.tiled as tiled_mod
from attnlab import attention, masks
from tests.helpers import EPS


@pytest.fixture
def small_tiles(tiles):
    tiles(tiled_sizes=(16, 32), blocksparse_sizes=dict(block=(16, 16)))


def _inputs(h_q, h_kv, n_q=37, n_k=53, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h_q, n_q, 24, generator=g, dtype=torch.float64)
    k = torch.randn(2, h_kv, n_k, 24, generator=g, dtype=torch.float64)
    v = torch.randn(2, h_kv, n_k, 11, generator=g, dtype=torch.float64)
    return (t.to(dtype) for t in (q, k, v))


def _grad_run(q, k, v, backend, repeat, lse, **kw):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    if repeat:                                   # the peer's definition: repeat_interleave
        g = q.shape[-3] // k.shape[-3]
        kk, vv = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
        res = attention(q, kk, vv, backend="reference", return_lse=lse, **kw)
    else:
        res = attention(q, k, v, backend=backend, enable_gqa=True, return_lse=lse, **kw)
    out = res.out if lse else res
    gen = torch.Generator().manual_seed(1)
    loss = (out * torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype)).sum()
    if lse:
        fin = torch.where(torch.isfinite(res.lse), res.lse, torch.zeros_like(res.lse))
        loss = loss + (fin * torch.randn(fin.shape, generator=gen,
                                         dtype=torch.float64).to(out.dtype)).sum()
    return [out.detach(), *torch.autograd.grad(loss, (q, k, v))]


MASKS = {
    "none": {},
    "causal": {"causal": True},
    "window": {"window": (5, 3)},
    "per-head bool": "bool",
    "padding": "padding",
    "float": "float",
    "dilated": {"mask": masks.dilated(2, 10, 10, offset=16)},
    "softcap+causal": {"softcap": 4.0, "causal": True},
}


def _kw(name, h_q, n_q, n_k, dtype):
    kw = MASKS[name]
    g = torch.Generator().manual_seed(3)
    if kw == "bool":                             # a mask per query head, not per K/V head
        return {"mask": torch.rand(2, h_q, n_q, n_k, generator=g) > 0.3}
    if kw == "padding":
        m = torch.ones(2, 1, 1, n_k, dtype=torch.bool)
        m[1, ..., n_k // 2:] = False
        return {"mask": m}
    if kw == "float":
        b = torch.randn(1, h_q, n_q, n_k, generator=g, dtype=torch.float64)
        return {"mask": b.masked_fill(torch.rand(b.shape, generator=g) > 0.7, float("-inf"))
                .to(dtype)}
    return dict(kw)


CASES = [(b, m) for b in ("reference", "sdpa", "tiled", "blocksparse") for m in MASKS
         if not (b == "blocksparse" and m in ("none", "float"))
         and not (b == "sdpa" and m.startswith("softcap"))]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("h_q, h_kv", [(6, 2), (4, 1), (3, 3)], ids=["gqa", "mqa", "mha"])
@pytest.mark.parametrize("backend, mask", CASES)
def test_gqa_equals_repeated_kv(backend, mask, h_q, h_kv, dtype, small_tiles):
    q, k, v = _inputs(h_q, h_kv)
    kw = _kw(mask, h_q, 37, 53, dtype)
    lse = backend != "sdpa"
    gold = _grad_run(q, k, v, backend, True, lse, **kw)
    plain = _grad_run(q.to(dtype), k.to(dtype), v.to(dtype), backend, True, lse, **kw)
    got = _grad_run(q.to(dtype), k.to(dtype), v.to(dtype), backend, False, lse, **kw)
    for name, g_, p_, o_ in zip(("out", "dq", "dk", "dv"), gold, plain, got):
        assert o_.shape == g_.shape, name
        err, base = (o_.double() - g_).abs().max(), (p_.double() - g_).abs().max()
        floor = 4 * EPS[dtype] * 80 ** 0.5 * max(float(g_.abs().max()), 1.0)
        assert err <= 3 * base + floor, (name, float(err), float(base))


def test_dropout_under_gqa_draws_the_same_bits_as_repeated_heads():
    q, k, v = _inputs(6, 2)
    rep = [t.repeat_interleave(3, dim=-3) for t in (k, v)]
    for backend in ("reference", "tiled"):
        a = attention(q, k, v, enable_gqa=True, dropout_p=0.3, backend=backend,
                      generator=torch.Generator().manual_seed(7))
        b = attention(q, *rep, dropout_p=0.3, backend="reference",
                      generator=torch.Generator().manual_seed(7))
        assert torch.allclose(a, b, atol=1e-12), backend


def test_gqa_input_errors():
    q, k, v = _inputs(6, 4)
    with pytest.raises(ValueError, match="H_kv dividing q's H_q, got H_q=6, H_k=4"):
        attention(q, k, v, enable_gqa=True)
    q, k, v = _inputs(6, 2)
    with pytest.raises(ValueError, match="pass enable_gqa=True"):
        attention(q, k, v)
    with pytest.raises(ValueError, match="needs a heads dim"):
        attention(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True)
    with pytest.raises(TypeError, match="enable_gqa must be True or False"):
        attention(q, k, v, enable_gqa=1)


def test_tiled_never_repeats_kv(monkeypatch):
    # The K/V the kernel receives keep their own heads: (B * H_kv, N, D), not (B * H_q, N, D).
    seen = []
    real = tiled_mod._TiledAttention.apply
    monkeypatch.setattr(tiled_mod._TiledAttention, "apply",
                        lambda q, k, v, spec, *c: seen.append((q.shape, k.shape))
                        or real(q, k, v, spec, *c))
    q, k, v = _inputs(8, 2, 40, 40)
    attention(q, k, v, enable_gqa=True, backend="tiled")
    assert seen == [(torch.Size([16, 40, 24]), torch.Size([4, 40, 24]))]
