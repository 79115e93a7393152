"""attnlab's modules on a sharded sequence give the single-process outputs and gradients."""

from __future__ import annotations

import pytest
import torch

from attnlab.distributed import SequenceParallel, spawn
from attnlab.nn import MultiheadAttention
from tests.distributed import _workers as W

pytestmark = pytest.mark.xdist_group("distributed")


def _single_process():
    enc, dec, x, tgt, pad = W.modules_setup()
    mem, y = W.modules_forward(enc, dec, x, tgt, pad)
    grads = {n: p.grad for n, p in W.parameter_grads(enc, dec).items()}
    return mem.detach(), y.detach(), grads


@pytest.mark.parametrize("world, layout, strategy", [(2, "zigzag", "ring"),
                                                     (3, "contiguous", "ulysses"),
                                                     (3, "zigzag", "auto")])
def test_encoder_and_decoder_layers_sharded_equal_one_process(world, layout, strategy):
    mem, y, grads = _single_process()
    got = spawn(W.modules_case, world, args=(layout, strategy), timeout=120)[0]
    assert (got["mem"] - mem).abs().max() < 1e-12
    assert (got["y"] - y).abs().max() < 1e-12
    for name, g in grads.items():
        assert (got["grads"][name] - g).abs().max() < 1e-10, name


def test_what_cannot_be_sharded_is_refused_by_name():
    from attnlab.distributed import sequence_parallel
    mha = MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 4, 8)
    with sequence_parallel():
        with pytest.raises(ValueError, match="need_weights=False"):
            mha(x, x, x)
        with pytest.raises(ValueError, match="may only mask keys"):
            mha(x, x, x, attn_mask=torch.ones(4, 4, dtype=torch.bool), need_weights=False)
    mha.train()
    mha.dropout = 0.1
    with sequence_parallel(), pytest.raises(ValueError, match="dropout"):
        mha(x, x, x, need_weights=False)
    with pytest.raises(ValueError, match="strategy must be one of"):
        SequenceParallel(mha, strategy="tree")


@pytest.mark.parametrize("extra", [{"add_bias_kv": True}, {"add_zero_attn": True}])
def test_an_extra_key_is_refused_when_wrapped_and_inside_the_block(extra):
    """add_bias_kv / add_zero_attn append one key to the sequence; sharded, every rank would
    append its own and the softmax would see P of them (the loss was off by 9-17%)."""
    from attnlab.distributed import sequence_parallel
    from attnlab.nn import EncoderLayer
    mha = MultiheadAttention(8, 2, batch_first=True, **extra)
    name = next(iter(extra))
    with pytest.raises(ValueError, match=f"{name}=True.*every rank would append its own"):
        SequenceParallel(mha)
    layer = EncoderLayer(8, 2, 16, batch_first=True)
    layer.self_attn = mha
    with pytest.raises(ValueError, match=f"self_attn.*{name}=True"):
        SequenceParallel(layer)
    x = torch.randn(1, 4, 8)
    with sequence_parallel(), pytest.raises(ValueError, match=f"{name}=True"):
        mha(x, x, x, need_weights=False)


def test_torch_multihead_attention_inside_a_wrapped_model_is_refused():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    model.append(torch.nn.MultiheadAttention(8, 2))
    with pytest.raises(TypeError, match=r"1 is torch.nn.MultiheadAttention.*from_torch"):
        SequenceParallel(model)
