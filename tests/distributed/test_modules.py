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
