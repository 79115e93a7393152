"""DecoderLayer / Decoder / Transformer against torch.nn.TransformerDecoderLayer /
TransformerDecoder / Transformer over random configurations (self and cross masks, padding,
pre/post-LN, train/eval, both layouts), outputs and gradients; conversion both ways; and
incremental decoding with a KV cache equal to the full forward."""

import random

import pytest
import torch
import torch.nn as nn

from attnlab.nn import Decoder, DecoderLayer, Encoder, EncoderLayer, Transformer

E, H = 16, 4


def _config(seed):
    r = random.Random(seed)
    return dict(norm_first=r.random() < 0.5, batch_first=r.random() < 0.5,
                activation=r.choice(["relu", "gelu", nn.GELU(approximate="tanh")]),
                bias=r.random() < 0.8, train=r.random() < 0.5,
                tgt_mask=r.choice(["none", "causal", "bool", "float"]),
                memory_mask=r.choice(["none", "bool"]),
                padding=r.random() < 0.6, n_t=r.choice([1, 5, 8]), n_s=r.choice([3, 7]))


def _inputs(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    b, n_t, n_s = 3, cfg["n_t"], cfg["n_s"]
    shape = (lambda n: (b, n, E)) if cfg["batch_first"] else (lambda n: (n, b, E))
    tgt = torch.randn(*shape(n_t), generator=g, dtype=torch.float64, requires_grad=True)
    mem = torch.randn(*shape(n_s), generator=g, dtype=torch.float64, requires_grad=True)
    kw = {}
    if cfg["tgt_mask"] == "causal":
        kw["tgt_mask"] = nn.Transformer.generate_square_subsequent_mask(n_t, dtype=torch.float64)
        kw["tgt_is_causal"] = True
    elif cfg["tgt_mask"] == "bool":
        m = torch.rand(n_t, n_t, generator=g) > 0.7
        m.fill_diagonal_(False)
        kw["tgt_mask"] = m
    elif cfg["tgt_mask"] == "float":
        kw["tgt_mask"] = torch.randn(n_t, n_t, generator=g, dtype=torch.float64)
    if cfg["memory_mask"] == "bool":
        m = torch.rand(n_t, n_s, generator=g) > 0.7
        m[:, 0] = False
        kw["memory_mask"] = m
    if cfg["padding"]:
        kpm = torch.zeros(b, n_s, dtype=torch.bool)
        kpm[1, n_s - 2:] = True
        kw["memory_key_padding_mask"] = kpm
        tpm = torch.zeros(b, n_t, dtype=torch.bool)
        tpm[2, n_t - 1:] = n_t > 1 and cfg["tgt_mask"] != "bool"
        kw["tgt_key_padding_mask"] = tpm
    return tgt, mem, kw


def _compare(ref, ours, args, kw, train, tol=1e-10):
    ref.train(train), ours.train(train)
    res = []
    for m in (ref, ours):
        out = m(*args, **kw)
        res.append((out, torch.autograd.grad(out.square().sum(), [*args, *m.parameters()])))
    diff = float((res[0][0] - res[1][0]).abs().max())
    assert torch.allclose(res[0][0], res[1][0], atol=tol), diff
    for a, b in zip(res[0][1], res[1][1]):
        assert torch.allclose(a, b, atol=10 * tol)


@pytest.mark.parametrize("seed", range(16))
def test_decoder_layer_parity_random_configs(seed):
    cfg = _config(seed)
    torch.manual_seed(seed)
    ref = nn.TransformerDecoderLayer(E, H, 24, dropout=0.0, activation=cfg["activation"],
                                     batch_first=cfg["batch_first"], norm_first=cfg["norm_first"],
                                     bias=cfg["bias"], dtype=torch.float64)
    ours = DecoderLayer.from_torch(ref)
    tgt, mem, kw = _inputs(cfg, seed)
    _compare(ref, ours, (tgt, mem), kw, cfg["train"])
    _compare(ours.to_torch(), ours, (tgt, mem), kw, cfg["train"])      # and back


@pytest.mark.parametrize("seed", range(6))
def test_transformer_parity_random_configs(seed):
    cfg = _config(100 + seed)
    torch.manual_seed(seed)
    ref = nn.Transformer(E, H, 2, 2, 24, dropout=0.0, activation=cfg["activation"],
                         batch_first=cfg["batch_first"], norm_first=cfg["norm_first"],
                         bias=cfg["bias"], dtype=torch.float64)
    ours = Transformer.from_torch(ref)
    tgt, mem, kw = _inputs(cfg, seed)
    src = mem.detach().clone().requires_grad_()
    kw = {k: v for k, v in kw.items() if k != "memory_mask"}
    if "memory_key_padding_mask" in kw:
        kw["src_key_padding_mask"] = kw["memory_key_padding_mask"]
    _compare(ref, ours, (src, tgt), kw, cfg["train"])
    _compare(ours.to_torch(), ours, (src, tgt), kw, cfg["train"])


def test_fresh_transformer_has_torch_names_and_shapes():
    ours = Transformer(E, H, 2, 3, 24, batch_first=True)
    ref = nn.Transformer(E, H, 2, 3, 24, batch_first=True)
    assert {k: v.shape for k, v in ref.state_dict().items()} == {
        k.replace("ff.", ""): v.shape for k, v in ours.state_dict().items()}


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 2, 1], [7]])
def test_kv_cache_decoding_equals_the_full_forward(norm_first, chunks):
    torch.manual_seed(0)
    dec = Decoder(DecoderLayer(E, H, 24, dropout=0.0, batch_first=True, norm_first=norm_first),
                  3, norm=nn.LayerNorm(E)).double().eval()
    tgt, mem = torch.randn(2, 7, E, dtype=torch.float64), torch.randn(2, 5, E, dtype=torch.float64)
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    kpm[0, 3:] = True
    full = dec(tgt, mem, tgt_is_causal=True, memory_key_padding_mask=kpm)
    cache, outs, t = dec.new_cache(), [], 0
    for c in chunks:
        outs.append(dec(tgt[:, t:t + c], mem, tgt_is_causal=True, memory_key_padding_mask=kpm,
                        cache=cache))
        t += c
    assert torch.allclose(torch.cat(outs, 1), full, atol=1e-12)
    assert [len(c) for c in cache] == [7, 7, 7]
    with pytest.raises(ValueError, match="cache has 2 entries for 3 layers"):
        dec(tgt, mem, cache=cache[:2])


def test_encoder_to_torch_round_trip():
    torch.manual_seed(0)
    enc = Encoder(EncoderLayer(E, H, 24, dropout=0.0, batch_first=True, norm_first=True,
                               activation=nn.SiLU()), 2, norm=nn.LayerNorm(E)).double()
    x = torch.randn(2, 6, E, dtype=torch.float64)
    assert torch.allclose(enc.to_torch()(x), enc(x), atol=1e-12)
