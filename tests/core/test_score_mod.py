"""score_mod (FlexAttention's score_mod(score, b, h, q_idx, kv_idx)) on reference, tiled and
blocksparse: outputs, lse and gradients -- including the gradient of a learnable bias the
function captures -- against the float64 reference; ALiBi with custom slopes and a relative
position bias against the same bias written as a float mask."""


import pytest
import torch
import torch.nn as nn

from attnlab import attention, masks
from attnlab.core.score_mod import captured_tensors

B, H = 2, 3


@pytest.fixture(autouse=True)
def small_tiles(tiles):
    tiles(tiled_sizes=(16, 32), blocksparse_sizes=dict(block=(16, 16)))


def _qkv(n_q=37, n_k=53, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, d, generator=g, dtype=torch.float64).to(dtype)
            for n, d in ((n_q, 16), (n_k, 16), (n_k, 9))]


def _grads(backend, q, k, v, table, make_mod, lse=True, **kw):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    table = table.detach().requires_grad_()
    res = attention(q, k, v, score_mod=make_mod(table), backend=backend, return_lse=lse, **kw)
    g = torch.Generator().manual_seed(1)
    loss = (res.out * torch.randn(res.out.shape, generator=g, dtype=torch.float64)
            .to(res.out.dtype)).sum()
    fin = torch.where(torch.isfinite(res.lse), res.lse, torch.zeros_like(res.lse))
    loss = loss + (fin * torch.randn(fin.shape, generator=g, dtype=torch.float64)
                   .to(fin.dtype)).sum()
    return [res.out.detach(), res.lse.detach(), *torch.autograd.grad(loss, (q, k, v, table))]


def relative_bias(table, n_k):
    """A learnable bias per head and relative distance (T5 / Shaw et al. style, unbucketed)."""
    def mod(score, b, h, q_idx, kv_idx):
        return score + table[h, kv_idx - q_idx + table.shape[1] // 2]
    return mod


KW = {"causal": {"causal": True}, "window": {"window": (6, 3)}, "none": {},
      "dilated": {"mask": masks.dilated(2, 12, 12, offset=16)}}
CASES = [("tiled", m) for m in KW] + [("blocksparse", m) for m in ("causal", "window", "dilated")]


@pytest.mark.parametrize("n_q, n_k", [(37, 53), (53, 37)])
@pytest.mark.parametrize("backend, mask", CASES)
def test_learnable_bias_gradients_match_reference(backend, mask, n_q, n_k):
    q, k, v = _qkv(n_q, n_k)
    span = n_q + n_k
    table = torch.randn(H, 2 * span + 1, generator=torch.Generator().manual_seed(2),
                        dtype=torch.float64)
    make = lambda t: relative_bias(t, n_k)  # noqa: E731
    kw = dict(KW[mask])
    if mask == "dilated":
        kw["mask"] = masks.dilated(2, 12, 12, offset=n_k - n_q)
    want = _grads("reference", q, k, v, table, make, **kw)
    got = _grads(backend, q, k, v, table, make, **kw)
    assert torch.allclose(got[0], want[0], atol=1e-11)
    fin = torch.isfinite(want[1])
    assert torch.equal(fin, torch.isfinite(got[1])) and torch.allclose(got[1][fin], want[1][fin])
    for name, a, b in zip(("dq", "dk", "dv", "dtable"), got[2:], want[2:]):
        assert torch.allclose(a, b, atol=1e-10), (name, float((a - b).abs().max()))
    again = _grads(backend, q, k, v, table, make, **kw)
    assert torch.equal(again[-1], got[-1])                          # deterministic, no atomics


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", ["tiled", "blocksparse"])
def test_low_precision_within_the_same_precision_reference(backend, dtype):
    q, k, v = _qkv()
    table = torch.randn(H, 2 * 91 + 1, generator=torch.Generator().manual_seed(2))
    make = lambda t: relative_bias(t, 53)  # noqa: E731
    gold = _grads("reference", q, k, v, table.double(), make, causal=True)
    plain = _grads("reference", *(t.to(dtype) for t in (q, k, v)), table.to(dtype), make,
                   causal=True)
    got = _grads(backend, *(t.to(dtype) for t in (q, k, v)), table.to(dtype), make, causal=True)
    for i, name in enumerate(("out", "lse", "dq", "dk", "dv", "dtable")):
        g, p, o = gold[i], plain[i].double(), got[i].double()
        fin = torch.isfinite(g)
        err, base = (o - g)[fin].abs().max(), (p - g)[fin].abs().max()
        assert err <= 3 * base + 1e-6 * max(float(g[fin].abs().max()), 1.0), (name, err, base)


def test_alibi_with_custom_slopes_equals_the_float_mask():
    q, k, v = _qkv(40, 40)
    slopes = torch.tensor([0.5, 0.1, 0.02], dtype=torch.float64)    # not the paper's 2^-8h/H

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    i = torch.arange(40)
    bias = -slopes.view(H, 1, 1) * (i.view(-1, 1) - i.view(1, -1)).abs()   # (H, N, N)
    want = attention(q, k, v, mask=bias, causal=True, backend="reference")
    for backend in ("reference", "tiled", "blocksparse"):
        got = attention(q, k, v, score_mod=alibi, causal=True, backend=backend)
        assert torch.allclose(got, want, atol=1e-12), backend


def test_score_mod_on_grouped_query_heads_sees_the_query_head():
    q, _, _ = _qkv(20, 20)
    q = torch.cat([q, q], dim=1)                                     # 6 query heads
    _, k, v = _qkv(20, 20, seed=1)
    k, v = k[:, :2], v[:, :2]                                         # 2 K/V heads
    per_head = torch.arange(6, dtype=torch.float64)

    def mod(score, b, h, q_idx, kv_idx):
        return score + per_head[h] * (kv_idx == 0)

    rep = [t.repeat_interleave(3, dim=1) for t in (k, v)]
    want = attention(q, *rep, score_mod=mod, backend="reference")
    for backend in ("reference", "tiled"):
        got = attention(q, k, v, score_mod=mod, enable_gqa=True, backend=backend)
        assert torch.allclose(got, want, atol=1e-12), backend


def test_module_parameters_and_partials_are_found_and_get_gradients():
    class Bias(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(H, dtype=torch.float64))

        def forward(self, score, b, h, q_idx, kv_idx):
            return score + self.w[h] * (q_idx >= kv_idx)

    mod = Bias()
    assert captured_tensors(mod) == [mod.w]
    q, k, v = _qkv(30, 30)
    grads = []
    for backend in ("reference", "tiled"):
        mod.w.grad = None
        attention(q, k, v, score_mod=mod, backend=backend).square().sum().backward()
        grads.append(mod.w.grad.clone())
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], grads[1], atol=1e-10)


def test_softcap_as_a_score_mod_equals_softcap():
    q, k, v = _qkv()
    q = q * 5

    def cap(score, b, h, q_idx, kv_idx):
        return 4.0 * torch.tanh(score / 4.0)

    for backend in ("reference", "tiled"):
        assert torch.allclose(attention(q, k, v, score_mod=cap, backend=backend),
                              attention(q, k, v, softcap=4.0, backend="reference"), atol=1e-12)


def test_clear_errors():
    q, k, v = _qkv()

    def ok(score, b, h, q_idx, kv_idx):
        return score

    with pytest.raises(ValueError, match="does not take score_mod.*reference, tiled"):
        attention(q, k, v, score_mod=ok, backend="sdpa")
    with pytest.raises(TypeError, match="score_mod must be a function"):
        attention(q, k, v, score_mod=torch.zeros(3))
    with pytest.raises(TypeError, match="must return a float tensor"):
        attention(q, k, v, score_mod=lambda s, b, h, i, j: s > 0, backend="tiled")
    with pytest.raises(ValueError, match="tile's shape"):
        attention(q, k, v, score_mod=lambda s, b, h, i, j: s[..., :1, :1, None],
                  backend="reference")
