"""attnlab.nn.MultiheadAttention against torch.nn.MultiheadAttention over random configurations."""

import random

import pytest
import torch
import torch.nn as nn

from attnlab.nn import MultiheadAttention

# torch itself warns when the two masks differ in kind; mixing them is a case we test on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")

TOL = {torch.float64: 1e-10, torch.float32: 2e-5}


def _config(seed):
    rnd = random.Random(seed)
    e, h = rnd.choice([(12, 3), (16, 4), (24, 6), (20, 5)])
    cross = rnd.random() < 0.5
    kdim = rnd.choice([None, 7]) if cross else None
    vdim = rnd.choice([None, 9]) if cross else None
    return dict(e=e, h=h, kdim=kdim, vdim=vdim, cross=cross, batch_first=rnd.random() < 0.5,
                bias=rnd.random() < 0.8, attn=rnd.choice([None, "bool", "float", "3d-bool"]),
                kpm=rnd.choice([None, "bool", "float"]), train=rnd.random() < 0.5,
                avg=rnd.random() < 0.5, n_q=rnd.choice([1, 5, 8]), n_k=rnd.choice([3, 8, 11]))


def _inputs(c, dtype, g):
    b = 3
    n_q = c["n_q"]
    n_k = c["n_k"] if c["cross"] else n_q
    q = torch.randn(b, n_q, c["e"], generator=g, dtype=dtype)
    k = torch.randn(b, n_k, c["kdim"] or c["e"], generator=g, dtype=dtype) if c["cross"] else q
    v = torch.randn(b, n_k, c["vdim"] or c["e"], generator=g, dtype=dtype) if c["cross"] else q
    masks = {}
    # Key 0 stays visible to every query: fully masked rows are tested on their own below
    # (torch gives NaN there, attnlab 0).
    if c["attn"] == "bool":
        masks["attn_mask"] = torch.rand(n_q, n_k, generator=g) > 0.7          # True = masked
        masks["attn_mask"][:, 0] = False
    elif c["attn"] == "3d-bool":
        masks["attn_mask"] = torch.rand(b * c["h"], n_q, n_k, generator=g) > 0.7
        masks["attn_mask"][..., 0] = False
    elif c["attn"] == "float":
        masks["attn_mask"] = torch.randn(n_q, n_k, generator=g, dtype=dtype)
    if c["kpm"] == "bool":
        kpm = torch.rand(b, n_k, generator=g) > 0.7
        kpm[:, 0] = False
        masks["key_padding_mask"] = kpm
    elif c["kpm"] == "float":
        masks["key_padding_mask"] = torch.randn(b, n_k, generator=g, dtype=dtype)
    if not c["batch_first"]:
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        if not c["cross"]:
            k = v = q
    return q, k, v, masks


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("seed", range(24))
def test_parity_with_torch_outputs_weights_and_gradients(seed, dtype):
    c = _config(seed)
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(c["e"], c["h"], bias=c["bias"], kdim=c["kdim"], vdim=c["vdim"],
                                batch_first=c["batch_first"], dtype=dtype)
    ours = MultiheadAttention.from_torch(ref)
    ref.train(c["train"]), ours.train(c["train"])          # dropout 0: train == eval numerically
    g = torch.Generator().manual_seed(seed)
    q, k, v, masks = _inputs(c, dtype, g)
    results = []
    for m in (ref, ours):
        inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        if not c["cross"]:
            inputs = [inputs[0]] * 3
        out, w = m(*inputs, need_weights=True, average_attn_weights=c["avg"], **masks)
        loss = out.square().sum() + (w * torch.arange(w.shape[-1], dtype=dtype)).sum()
        grads = torch.autograd.grad(loss, list(dict.fromkeys(inputs)) + list(m.parameters()))
        results.append((out, w, grads))
    (o1, w1, g1), (o2, w2, g2) = results
    tol = TOL[dtype]
    assert torch.allclose(o1, o2, atol=tol, rtol=tol), float((o1 - o2).abs().max().detach())
    assert torch.allclose(w1, w2, atol=tol, rtol=tol)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, atol=10 * tol, rtol=10 * tol), float((a - b).abs().max())


@pytest.mark.parametrize("batch_first", [True, False])
def test_fully_padded_sequence_gives_zero_attention_not_nan(batch_first):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, batch_first=batch_first, dtype=torch.float64)
    ours = MultiheadAttention.from_torch(ref)
    x = torch.randn(3, 6, 16, dtype=torch.float64, requires_grad=True)
    kpm = torch.zeros(3, 6, dtype=torch.bool)
    kpm[1] = True                                           # the whole second sequence is padding
    kpm[2, 4:] = True
    xin = x if batch_first else x.transpose(0, 1)
    out, w = ours(xin, xin, xin, key_padding_mask=kpm, average_attn_weights=False)
    out_b = out if batch_first else out.transpose(0, 1)
    assert torch.isfinite(out).all() and (w[1] == 0).all()
    assert torch.allclose(out_b[1], ours.out_proj.bias.expand(6, 16))    # attention output 0
    out_b.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    ref_out, _ = ref(xin, xin, xin, key_padding_mask=kpm)
    ref_b = ref_out if batch_first else ref_out.transpose(0, 1)
    assert torch.allclose(ref_b[[0, 2]], out_b[[0, 2]], atol=1e-12)    # other sequences agree


def test_unbatched_and_self_attention_defaults():
    ref = nn.MultiheadAttention(8, 2, dtype=torch.float64)
    ours = MultiheadAttention.from_torch(ref)
    x = torch.randn(5, 8, dtype=torch.float64)
    o1, w1 = ref(x, x, x)
    o2, w2 = ours(x)                                       # key and value default to query
    assert o2.shape == (5, 8) and w2.shape == (5, 5)
    assert torch.allclose(o1, o2) and torch.allclose(w1, w2)


def test_round_trip_to_torch_and_back():
    ours = MultiheadAttention(12, 3, kdim=5, vdim=7, batch_first=True, dropout=0.1)
    back = MultiheadAttention.from_torch(ours.to_torch())
    for (n1, p1), (n2, p2) in zip(ours.state_dict().items(), back.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    assert back.dropout == 0.1 and back.batch_first and back.kdim == 5


def test_causal_flag_matches_a_causal_attn_mask():
    m = MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 6, 8)
    causal_mask = torch.ones(6, 6, dtype=torch.bool).triu(1)       # torch polarity: True = masked
    o1, _ = m(x, x, x, attn_mask=causal_mask)
    o2, _ = m(x, x, x, is_causal=True)
    assert torch.allclose(o1, o2, atol=1e-6)


def test_dropout_only_in_training_and_backend_is_passed():
    m = MultiheadAttention(8, 2, dropout=0.5, batch_first=True, backend="reference")
    x = torch.randn(2, 6, 8)
    m.eval()
    _, w = m(x, x, x, average_attn_weights=False)
    assert torch.allclose(w.sum(-1), torch.ones(2, 2, 6))
    m.train()
    _, w = m(x, x, x, average_attn_weights=False)
    assert (w == 0).float().mean() > 0.3                        # about half the weights dropped
    m2 = MultiheadAttention(8, 2, batch_first=True, backend="tiled")
    with pytest.raises(ValueError, match="'tiled' cannot serve"):
        m2(x, x, x, need_weights=True)
    assert m2(x, x, x, need_weights=False)[1] is None


@pytest.mark.parametrize("build, words", [
    (lambda: MultiheadAttention(10, 3), ["embed_dim (10) must be divisible by num_heads (3)"]),
    (lambda: MultiheadAttention(8, 0), ["num_heads must be a positive int"]),
])
def test_bad_configuration(build, words):
    with pytest.raises(ValueError) as info:
        build()
    for w in words:
        assert w in str(info.value)


def test_bad_inputs_name_the_argument():
    m = MultiheadAttention(8, 2, kdim=5, vdim=5, batch_first=True)
    q, kv = torch.randn(2, 4, 8), torch.randn(2, 6, 5)
    with pytest.raises(ValueError, match="key has last dim 6 .* kdim=5"):
        m(q, torch.randn(2, 6, 6), torch.randn(2, 6, 5))
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(2, 4\) must be \(B, N_k\)"):
        m(q, kv, kv, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        m(q, kv, kv, key_padding_mask=torch.zeros(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(4, 4\)"):
        m(q, kv, kv, attn_mask=torch.zeros(4, 4, dtype=torch.bool))
