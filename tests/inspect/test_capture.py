"""record() on the three kinds of model, padded batches, and a model that yields no maps."""

import pytest
import torch
import torch.nn as nn

from attnlab.inspect import record
from attnlab.inspect.attribution import gradient_weighted
from attnlab.nn import Encoder, EncoderLayer, MultiheadAttention, load_default
from attnlab.nn.bert import default_model_path


def test_attnlab_modules_even_when_weights_are_not_asked_for():
    enc = Encoder(EncoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 3).eval()
    x = torch.randn(2, 6, 16)
    with record(enc) as rec:
        out = enc(x)                                   # the layers ask for no weights
    assert isinstance(out, torch.Tensor)
    assert len(rec) == 3 and rec.maps(1).shape == (3, 4, 6, 6)
    assert rec.sources == ["layers.0.self_attn", "layers.1.self_attn", "layers.2.self_attn"]
    explicit = enc(x, return_weights=True).attentions
    assert torch.allclose(rec.maps(1).float(), torch.stack([a[1] for a in explicit]), atol=1e-6)


def test_torch_transformer_encoder_layer_and_padded_batch():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 6, 16)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    with torch.no_grad(), record(enc) as rec:
        y = enc(x, src_key_padding_mask=pad)
    assert len(rec) == 2
    short = rec.maps(1, length=4)
    assert short.shape == (2, 4, 4, 4)
    assert torch.allclose(short.sum(-1), torch.ones(2, 4, 4, dtype=torch.float64))
    assert (rec.maps(1)[..., 4:] == 0).all()                   # padded keys get no weight
    with torch.no_grad():
        assert torch.allclose(enc(x, src_key_padding_mask=pad), y, atol=1e-6)   # hooks removed
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(1, 3, 8)
    with record(mha) as rec:
        out, w = mha(q, q, q)                                   # the caller's view is unchanged
    assert w.shape == (1, 3, 3) and rec.raw[0].shape == (1, 2, 3, 3)


def test_transformers_model_with_the_default_sdpa_implementation():
    from transformers import AutoModel, AutoTokenizer

    path = default_model_path()
    hf = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    assert hf.config._attn_implementation == "sdpa"             # returns no maps by itself
    tok = AutoTokenizer.from_pretrained(str(path))
    batch = tok(["Short one.", "A somewhat longer second sentence."], padding=True,
                return_tensors="pt")
    with torch.no_grad(), record(hf) as rec:
        hf(**batch)
    assert hf.config._attn_implementation == "sdpa"             # restored
    n0 = int(batch["attention_mask"][0].sum())
    maps = rec.maps(0, length=n0)
    assert maps.shape == (6, 12, n0, n0)
    assert torch.allclose(maps.sum(-1), torch.ones(6, 12, n0, dtype=torch.float64), atol=1e-5)
    eager = AutoModel.from_pretrained(str(path), local_files_only=True,
                                      attn_implementation="eager").eval()
    with torch.no_grad():
        ref = eager(**batch, output_attentions=True).attentions
    assert max(float((a - r).abs().max()) for a, r in zip(rec.raw, ref)) < 1e-5
    ours, _ = load_default()
    with torch.no_grad(), record(ours) as rec2:
        ours(batch["input_ids"], batch["attention_mask"])
    assert (rec2.maps(0, n0) - maps).abs().max() < 1e-5


def test_a_model_without_attention_raises():
    with pytest.raises(RuntimeError, match="no attention maps were captured from Sequential"):
        with record(nn.Sequential(nn.Linear(3, 3))) as rec:
            rec  # noqa: B018
    with pytest.raises(TypeError, match="torch.nn.Module"):
        with record("model"):
            pass


def test_gradient_weighted_on_a_tiny_model_with_a_known_answer():
    torch.manual_seed(0)
    mha = MultiheadAttention(4, 2, batch_first=True)
    x = torch.randn(1, 5, 4)
    with record(mha) as rec:
        out, _ = mha(x, x, x, need_weights=False)
        target = out[0, 0].sum()                                # only query 0 matters
        grads = torch.autograd.grad(target, rec.raw)
    r = gradient_weighted([rec.raw[0][0].detach()], [grads[0][0]])
    eye = torch.eye(5, dtype=torch.float64)
    assert torch.allclose(r[1:], eye[1:])                       # other rows: identity only
    assert (r[0] - eye[0]).abs().sum() > 0


def test_maps_of_a_left_padded_batch_are_the_real_tokens():
    from attnlab.nn import load_default

    model, tok = load_default()
    batch = tok(["A short one.", "A much longer sentence than the first one."],
                return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    n = int(mask[0].sum())
    left_ids = torch.cat([ids[0, n:], ids[0, :n]])               # the same text, left-padded
    left_mask = torch.cat([mask[0, n:], mask[0, :n]])
    with torch.no_grad(), record(model) as left:
        model(left_ids[None], left_mask[None])
    got = left.maps(0, attention_mask=left_mask[None])
    real = left_mask.bool().nonzero().flatten()                  # the last n positions
    assert got.shape == (6, 12, n, n)
    assert torch.allclose(got.sum(-1), torch.ones_like(got.sum(-1)), atol=1e-5)  # real rows
    assert torch.equal(got[2], left.raw[2][0][:, real][:, :, real].double())
    top_left = left.maps(0, length=n)                            # the old reading: padding rows
    assert not torch.allclose(top_left.sum(-1), torch.ones_like(top_left.sum(-1)), atol=1e-3)


def test_gradient_relevance_of_a_pair_uses_its_token_types():
    from attnlab.inspect.attribution import bert_gradient_attention
    from attnlab.nn import load_default

    model, tok = load_default()
    b = tok(["The cat sat."], ["A dog slept."], return_tensors="pt")
    with_types = bert_gradient_attention(model, b["input_ids"], b["attention_mask"],
                                         token_type_ids=b["token_type_ids"])
    without = bert_gradient_attention(model, b["input_ids"], b["attention_mask"])
    assert not torch.allclose(with_types, without)             # they change every map
    sim = bert_gradient_attention(model, b["input_ids"], b["attention_mask"], "similarity",
                                  b["token_type_ids"])
    assert sim.shape == with_types.shape and not torch.allclose(sim, with_types)
