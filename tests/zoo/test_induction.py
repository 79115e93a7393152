"""The shipped ``induction`` model: its planted heads are found by the detectors, and ablation
shows which heads the in-context loss depends on."""

import pytest
import torch

from attnlab import zoo
from attnlab.inspect.ablation import ablate_heads, head_importance
from attnlab.inspect.capture import record
from attnlab.inspect.heads import duplicate_token_scores, induction_scores, previous_token_scores
from attnlab.zoo.induction import repeat_losses, repeated_tokens

L = 20


@pytest.fixture(scope="module")
def setup():
    model = zoo.load("induction")
    ids = repeated_tokens(64, L, prefix=7, generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), record(model) as rec:
        model(ids)
    maps = torch.stack(rec.raw).transpose(0, 1)                   # (B, layers, H, N, N)
    return model, ids, maps


def test_the_second_repeat_is_predicted_in_context(setup):
    model, ids, _ = setup
    with torch.no_grad():
        first, second = repeat_losses(model, ids, L)
    assert first > 3.9                       # about ln 63 = 4.14: nothing to predict from
    assert second < 0.1 * first


def test_detectors_find_the_planted_heads(setup):
    _, ids, maps = setup
    prefix = induction_scores(maps, ids)
    prev = previous_token_scores(maps)
    assert (prefix[1] > 0.5).any()                         # layer-1 induction head(s)
    assert (prefix[0] < 0.1).all()                         # none in layer 0
    assert (prev[0] > 0.5).any()                           # a layer-0 previous-token head
    assert (duplicate_token_scores(maps, ids) < 0.1).all()


def test_ablation_finds_the_circuit(setup):
    model, ids, _ = setup
    with torch.no_grad():
        first, second = repeat_losses(model, ids, L)
    gap = first - second

    def loss():
        return repeat_losses(model, ids, L)[1]

    imp = head_importance(model, loss)
    prev_head = int(previous_token_scores(setup[2])[0].argmax())
    induction = [(1, h) for h in range(4)]
    with torch.no_grad(), ablate_heads(model, induction):
        without = loss()
    # The layer-1 induction heads together, and the previous-token head they compose with,
    # carry the in-context prediction; every other layer-0 head carries little.
    assert without - second > 0.5 * gap
    assert imp[0, prev_head] > 0.5 * gap
    others = [imp[0, h] for h in range(4) if h != prev_head]
    assert max(others) < 0.1 * gap
    # The four induction heads are redundant: one alone is far less than all four.
    assert imp[1].max() < 0.1 * (without - second)


def test_taxonomy_labels_the_heads():
    from attnlab.inspect.generative import inspect_induction

    ins = inspect_induction()
    assert "induction" in ins.taxonomy.labels[1]
    assert "previous token" in ins.taxonomy.labels[0]
    assert ins.head_table["columns"][-1] == "loss increase"
    assert (ins.metrics.copying[1] > 0.9).all()          # the induction heads copy (Olsson)
    assert not torch.triu(ins.maps, diagonal=1).any()
