"""Packed documents (``masks.segments``): the packed backend runs each document alone and must
equal the float64 reference on the whole row, outputs, lse and gradients, for every mask it
takes; the requests it cannot serve go elsewhere."""

import pytest
import torch

from attnlab import attention, masks, which_backend
from attnlab.core.backends.packed import documents
from attnlab.core.spec import build_spec

# Lengths that cross the tiled backend's (4, 3) test tiles, one document of length 1.
IDS = torch.tensor([0] * 5 + [1] * 1 + [2] * 9 + [3] * 4)
N = len(IDS)


def _qkv(n=N, hq=4, hkv=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, h, n, d, generator=g, dtype=dtype, requires_grad=True)
            for h, d in ((hq, 8), (hkv, 8), (hkv, 5))]


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"window": (2, 1)},
                                {"causal": True, "window": 3}, {"softcap": 2.0},
                                {"causal": True, "enable_gqa": True}], ids=str)
def test_packed_equals_the_reference_row(kw, tiles):
    tiles(tiled_sizes=(4, 3))
    q, k, v = _qkv(hkv=2 if kw.get("enable_gqa") else 4)
    fn = masks.segments(IDS)
    want = attention(q, k, v, mask=fn, backend="reference", return_lse=True, **kw)
    got = attention(q, k, v, mask=fn, backend="packed", return_lse=True, **kw)
    assert torch.allclose(got.out, want.out, atol=1e-12)
    assert torch.allclose(got.lse, want.lse, atol=1e-12)
    cot = torch.randn(want.out.shape, generator=torch.Generator().manual_seed(1),
                      dtype=torch.float64)
    for a, b in zip(torch.autograd.grad((got.out * cot).sum() + got.lse.sum(), (q, k, v)),
                    torch.autograd.grad((want.out * cot).sum() + want.lse.sum(), (q, k, v))):
        assert torch.allclose(a, b, atol=1e-11)


def test_float32_within_the_reference_error():
    q, k, v = (t.detach().float() for t in _qkv())
    fn = masks.segments(IDS)
    exact = attention(q.double(), k.double(), v.double(), mask=fn, causal=True,
                      backend="reference")
    ref32 = attention(q, k, v, mask=fn, causal=True, backend="reference")
    got = attention(q, k, v, mask=fn, causal=True, backend="packed")
    assert (got.double() - exact).abs().max() <= 4 * (ref32.double() - exact).abs().max() + 1e-6


def test_auto_takes_packed_for_long_documents():
    q = torch.randn(1, 2, 2048, 16)
    ids = torch.arange(2048) // 512
    assert which_backend(q, q, q, mask=masks.segments(ids), causal=True) == "packed"


def _spec(q_ids, kv_ids=None, **kw):
    n_q = q_ids.shape[-1]
    n_k = n_q if kv_ids is None else kv_ids.shape[-1]
    q, k = torch.randn(q_ids.shape[0] if q_ids.dim() == 2 else 1, 2, n_q, 4), \
        torch.randn(1, 2, n_k, 4)
    return build_spec(q, k, k, mask=masks.segments(q_ids, kv_ids), **kw)


def test_documents_found_and_refused():
    assert documents(_spec(IDS)) == [(0, 5), (5, 6), (6, 15), (15, 19)]
    split = torch.tensor([0, 0, 1, 1, 0])                      # document 0 in two pieces
    assert documents(_spec(split)) is None
    per_row = torch.stack([IDS, IDS.flip(0)])                  # differs across the batch
    assert documents(_spec(per_row)) is None
    assert documents(_spec(IDS, IDS + 1)) is None              # queries and keys differ
    assert documents(_spec(IDS[:10], IDS)) is None             # N_q != N_k


@pytest.mark.parametrize("kw,why", [({"dropout_p": 0.1}, "dropout"),
                                    ({"return_weights": True}, "weights"),
                                    ({"score_mod": lambda s, b, h, i, j: s}, "score_mod")])
def test_what_it_does_not_serve_is_refused_by_name(kw, why):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=why):
        attention(q, k, v, mask=masks.segments(IDS), backend="packed", **kw)
    split = torch.tensor([0, 0, 1, 1, 0])
    x = torch.randn(1, 1, 5, 4)
    with pytest.raises(ValueError, match="contiguous documents"):
        attention(x, x, x, mask=masks.segments(split), backend="packed")
