"""Masks that broadcast, on every exact backend, at lengths that cross the tile and block sizes
on both sides; and the empty cases N_k = 0 and N_q = 0.

Tiles: tiled 512 x 1024 (default), blocksparse 128 x 128 and its band path 64; the lengths
1, 127, 129, 513 and 1025 sit on either side of each. Everything in float64 against the
reference: outputs, lse and the gradients of <out, c> + <lse, c'>.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab.core.backends.tiled as tiled_mod
from attnlab import attention, list_backends
from attnlab.core.spec import broadcast_shapes

EXACT = ["reference", "sdpa", "tiled", "blocksparse"]
B, H, D = 2, 3, 8

# (N_q, N_k): each length of {1, 127, 129, 513, 1025} appears on both sides.
LENGTHS = [(1, 1025), (127, 129), (129, 127), (513, 1025), (1025, 513), (129, 1)]

# Shapes relative to (B, H, N_q, N_k): size-1 batch, head, query or key dims, fewer dims.
PATTERNS = {
    "padding (B,1,1,Nk)": lambda nq, nk: (B, 1, 1, nk),
    "(1,Nk)": lambda nq, nk: (1, nk),
    "(Nk,)": lambda nq, nk: (nk,),
    "(Nq,1)": lambda nq, nk: (nq, 1),
    "(B,1,Nq,1)": lambda nq, nk: (B, 1, nq, 1),
    "(1,H,1,Nk)": lambda nq, nk: (1, H, 1, nk),
    "(1,1)": lambda nq, nk: (1, 1),
    "(H,Nq,Nk)": lambda nq, nk: (H, nq, nk),
    "(B,H,Nq,Nk)": lambda nq, nk: (B, H, nq, nk),
}


def _mask(shape, kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=g) < 0.8
    if keep.numel() > 1:
        keep.view(-1)[0] = False
    if kind == "bool":
        return keep
    bias = torch.randn(shape, generator=g, dtype=torch.float64)
    return bias.masked_fill(~keep, float("-inf"))


def _run(q, k, v, backend, lse, **kw):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    res = attention(q, k, v, backend=backend, return_lse=lse, **kw)
    out = res.out if lse else res
    g = torch.Generator().manual_seed(1)
    loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum()
    if lse:
        finite = torch.where(torch.isfinite(res.lse), res.lse, torch.zeros_like(res.lse))
        loss = loss + (finite * torch.randn(finite.shape, generator=g, dtype=out.dtype)).sum()
    grads = torch.autograd.grad(loss, (q, k, v), allow_unused=True)
    return out, (res.lse if lse else None), [torch.zeros_like(t) if d is None else d
                                             for t, d in zip((q, k, v), grads)]


def _assert_matches(q, k, v, backend, **kw):
    lse = list_backends()[backend].capabilities.lse        # compared, with its gradient
    want = _run(q, k, v, "reference", lse, **kw)
    got = _run(q, k, v, backend, lse, **kw)
    assert got[0].shape == want[0].shape
    assert torch.allclose(got[0], want[0], atol=1e-10), f"{backend} out"
    if got[1] is not None:
        assert torch.equal(torch.isneginf(got[1]), torch.isneginf(want[1]))
        fin = torch.isfinite(want[1])
        assert torch.allclose(got[1][fin], want[1][fin], atol=1e-10), f"{backend} lse"
    for name, a, b in zip(("dq", "dk", "dv"), got[2], want[2]):
        assert torch.isfinite(a).all() and torch.allclose(a, b, atol=1e-9), f"{backend} {name}"


def _inputs(lead, n_q, n_k, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*lead, n, D, generator=g, dtype=torch.float64)
            for n in (n_q, n_k, n_k))


# blocksparse declares no float masks (test_blocksparse_float_mask_error_names_who_can)
SERVES = [(b, kind) for b in ("sdpa", "tiled", "blocksparse") for kind in ("bool", "float")
          if (b, kind) != ("blocksparse", "float")]


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("n_q, n_k", LENGTHS)
@pytest.mark.parametrize("backend, kind", SERVES)
def test_broadcast_masks_across_tiles(backend, kind, n_q, n_k, pattern):
    q, k, v = _inputs((B, H), n_q, n_k)
    _assert_matches(q, k, v, backend, mask=_mask(PATTERNS[pattern](n_q, n_k), kind))


@pytest.mark.parametrize("backend", ["sdpa", "tiled", "blocksparse"])
@pytest.mark.parametrize("lead, mask_shape", [
    ((), (1, 700)),                      # 2-D inputs (N, D)
    ((B,), (B, 600, 700)),               # 3-D inputs with a per-batch mask
    ((B,), (B, 1, 700)),
    ((B,), (600, 700)),
    ((2, 2, 2), (2, 1, 1, 1, 700)),      # 5-D inputs
    ((2, 2, 2), (2, 600, 700)),
])
def test_masks_on_2d_to_5d_inputs(backend, lead, mask_shape):
    q, k, v = _inputs(lead, 600, 700)
    _assert_matches(q, k, v, backend, mask=_mask(mask_shape, "bool"))
    if backend != "blocksparse":
        _assert_matches(q, k, v, backend, mask=_mask(mask_shape, "float"))


def test_blocksparse_float_mask_error_names_who_can():
    q, k, v = _inputs((B, H), 9, 9)
    with pytest.raises(ValueError, match="does not take float masks.*reference, sdpa, tiled"):
        attention(q, k, v, mask=_mask((9, 9), "float"), backend="blocksparse")


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("n_q, n_k", [(5, 0), (0, 7), (0, 0)])
def test_no_keys_or_no_queries_give_zeros(backend, n_q, n_k):
    q, k, v = (t.requires_grad_() for t in _inputs((B, H), n_q, n_k))
    v = v.detach()[..., :3].requires_grad_()
    kw = {"causal": True} if backend == "blocksparse" else {}
    lse = list_backends()[backend].capabilities.lse
    res = attention(q, k, v, backend=backend, return_lse=lse, **kw)
    out = res.out if lse else res
    assert out.shape == (B, H, n_q, 3) and (out == 0).all()
    if lse:
        assert res.lse.shape == (B, H, n_q) and torch.isneginf(res.lse).all()
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and t.grad.shape == t.shape and (t.grad == 0).all()
    w = attention(q, k, v, return_weights=True).weights
    assert w.shape == (B, H, n_q, n_k)


@st.composite
def broadcast_requests(draw):
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
    n_q, n_k = draw(st.integers(1, 45)), draw(st.integers(1, 45))
    full = (*lead, n_q, n_k)
    # every dim full or 1; leading dims may be dropped (they broadcast from the left)
    shape = tuple(d if draw(st.booleans()) else 1 for d in full)
    shape = shape[draw(st.integers(0, len(lead))):]
    kind = draw(st.sampled_from(["bool", "float"]))
    backend = draw(st.sampled_from(["sdpa", "tiled"] + (["blocksparse"] * (kind == "bool"))))
    kw = {"mask": _mask(shape, kind, seed=draw(st.integers(0, 1000)))}
    if draw(st.booleans()):
        kw["causal"] = True
    return lead, n_q, n_k, kw, backend, (draw(st.integers(1, 9)), draw(st.integers(1, 9)))


@settings(max_examples=120, deadline=None)
@given(broadcast_requests())
def test_any_broadcast_pattern_any_tiling(req):
    lead, n_q, n_k, kw, backend, (bq, bk) = req
    with tiled_mod.tile_sizes(bq, bk):                      # many tiles at small sizes
        q, k, v = _inputs(lead, n_q, n_k)
        _assert_matches(q, k, v, backend, **kw)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=4), min_size=1, max_size=3))
def test_broadcast_shapes_agrees_with_torch(shapes):
    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            broadcast_shapes(*shapes)
        return
    assert broadcast_shapes(*shapes) == expected
