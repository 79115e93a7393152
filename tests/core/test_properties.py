"""Property test: random shapes, masks and options; every exact backend equals the reference."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab.core.backends.tiled as tiled_mod
from attnlab import attention


@st.composite
def requests(draw):
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    n_q, n_k = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    d_k, d_v = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, n_q, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(*lead, n_k, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, n_k, d_v, generator=g, dtype=torch.float64)
    kw = {"causal": draw(st.booleans())}
    if draw(st.booleans()):
        side = st.one_of(st.none(), st.integers(0, 6))
        kw["window"] = (draw(side), draw(side))
    kind = draw(st.sampled_from(["none", "bool", "float"]))
    if kind == "bool":
        kw["mask"] = torch.rand(n_q, n_k, generator=g) > draw(st.floats(0.0, 1.0))
    elif kind == "float":
        bias = torch.randn(n_q, n_k, generator=g, dtype=torch.float64)
        bias[torch.rand(n_q, n_k, generator=g) > 0.6] = float("-inf")
        kw["mask"] = bias
    kw["temperature"] = draw(st.sampled_from([0.5, 1.0, 2.0]))
    return q, k, v, kw, (draw(st.integers(1, 9)), draw(st.integers(1, 9)))


@settings(max_examples=150, deadline=None)
@given(requests())
def test_exact_backends_agree_with_reference(req):
    q, k, v, kw, (bq, bk) = req
    with tiled_mod.tile_sizes(bq, bk):
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        ref = attention(q, k, v, backend="reference", return_lse=True, **kw)
        ref_g = torch.autograd.grad(ref.out.sum(), (q, k, v))
        for backend in ("sdpa", "tiled"):
            out = attention(q, k, v, backend=backend, **kw)
            assert torch.isfinite(out).all()
            assert torch.allclose(out, ref.out, atol=1e-10), backend
            g = torch.autograd.grad(out.sum(), (q, k, v))
            for a, b in zip(g, ref_g):
                assert torch.isfinite(a).all() and torch.allclose(a, b, atol=1e-9), backend
        tl = attention(q, k, v, backend="tiled", return_lse=True, **kw).lse
        assert torch.equal(torch.isneginf(tl), torch.isneginf(ref.lse))
        fin = torch.isfinite(ref.lse)
        assert torch.allclose(tl[fin], ref.lse[fin], atol=1e-10)
