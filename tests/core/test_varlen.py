"""Per-sequence lengths (FlashAttention's varlen semantics): each sequence of a right-padded
batch attends as if alone, with causal / window aligned to its own lengths; against the
float64 reference run on each sequence separately, outputs and gradients."""

import pytest
import torch

from attnlab import attention, masks

Q_LEN = torch.tensor([5, 9, 1, 0])
K_LEN = torch.tensor([7, 9, 4, 3])


def _per_sequence(q, k, v, **kw):
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for b, (nq, nk) in enumerate(zip(Q_LEN.tolist(), K_LEN.tolist())):
        if nq:
            out[b, :, :nq] = attention(q[b:b + 1, :, :nq], k[b:b + 1, :, :nk],
                                       v[b:b + 1, :, :nk], backend="reference", **kw)[0]
    return out


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"window": (2, 1)},
                                {"causal": True, "window": 3}], ids=str)
@pytest.mark.parametrize("backend", ["reference", "sdpa", "tiled", "blocksparse"])
def test_each_sequence_attends_as_if_alone(backend, kw, tiles):
    tiles(tiled_sizes=(4, 3))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 2, 9, d, generator=g, dtype=torch.float64, requires_grad=True)
               for d in (8, 8, 5))
    want = _per_sequence(q, k, v, **kw)
    fn = masks.varlen(Q_LEN, K_LEN, causal=kw.get("causal", False), window=kw.get("window"))
    got = attention(q, k, v, mask=fn, backend=backend)
    assert torch.allclose(got, want, atol=1e-12)
    cot = torch.randn(want.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad((got * cot).sum(), (q, k, v)),
                    torch.autograd.grad((want * cot).sum(), (q, k, v))):
        assert torch.allclose(a, b, atol=1e-11)


def test_padded_alignment_differs_from_per_sequence_alignment():
    # Without lengths, causal aligns to the padded N_q = N_k = 9 (top-left here): sequence 0
    # (5 queries, 7 keys) would let its query 4 see only keys 0..4, not 0..6.
    q = k = v = torch.randn(4, 1, 9, 4, dtype=torch.float64)
    w = attention(q, k, v, mask=masks.varlen(Q_LEN, K_LEN, causal=True),
                  return_weights=True).weights
    assert (w[0, 0, 4, :7] > 0).all() and (w[0, 0, 4, 7:] == 0).all()
    assert (w[0, 0, 5:] == 0).all()                                 # padding rows


def test_the_removed_keywords_are_refused_by_python():
    q = torch.randn(4, 2, 9, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="q_lengths"):
        attention(q, q, q, q_lengths=Q_LEN, kv_lengths=K_LEN, causal=True)


def test_bad_lengths():
    with pytest.raises(ValueError, match="one entry per sequence each"):
        masks.varlen(Q_LEN, K_LEN[:3])
    with pytest.raises(ValueError, match="q_lengths must be >= 0"):
        masks.varlen(torch.tensor([-1, 2, 3, 4]), K_LEN)
