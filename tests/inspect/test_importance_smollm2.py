"""The new statistics on the real SmolLM2-135M at 600 tokens of King Lear, in float64: head
importance, token relevance and the value-weighted statistics each equal their dense float64
definition (maps from attnlab's reference, gradients by autograd) within 1e-5 of the
largest."""

import sys
from pathlib import Path

import pytest
import torch

from attnlab.inspect import census
from attnlab.inspect.importance import head_gradients
from tests.inspect.test_importance import _dense_value_weighted, dense_relevance, gate_gradients

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smollm2")]

N = 600


@pytest.fixture(scope="module")
def lear():
    from attnlab.zoo import smollm2

    sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
    from demo_text import first_scene

    model, tok = smollm2.load()
    ids = tok(first_scene() * 2, return_tensors="pt")["input_ids"][:, :N]
    assert ids.shape[1] == N
    return model.to(torch.float64).eval(), ids


def test_importance_and_relevance_equal_the_dense_definitions(lear):
    model, ids = lear
    target = (500, N)                                   # the last 100 tokens' loss
    got = head_gradients(model, ids, target=target, relevance=True)
    want = gate_gradients(model, ids, *target).abs()
    assert got.importance.shape == (30, 9)
    assert float((got.importance - want).abs().max()) <= 1e-5 * float(want.max())
    rel = dense_relevance(model, ids, target=target)
    assert float((got.relevance - rel).abs().max()) <= 1e-5 * float(rel.abs().max())


def test_value_weighted_statistics_equal_the_dense_definition(lear):
    model, ids = lear
    c = census(model, input_ids=ids, value_weighted=True)
    dense = _dense_value_weighted(model, ids)
    for name in ("sink_mass", "prev_mass", "self_mass", "local_mass", "match_mass"):
        assert float((c.stats[name + "_vw"].double() - dense[name]).abs().max()) <= 1e-5, name
    got, want = c.stats["received_vw"].double(), dense["received"]
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
