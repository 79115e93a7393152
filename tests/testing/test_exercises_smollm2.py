"""Chapter 15's checks of induction heads on the real SmolLM2 (slow tier: make check)."""

from __future__ import annotations

import pytest
import torch

from attnlab.testing.exercises import check

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_repeated():
    from attnlab import zoo

    model, _ = zoo.load("smollm2")
    half = torch.randint(1000, 40000, (1, 48), generator=torch.Generator().manual_seed(3))
    return model, torch.cat([torch.tensor([[1]]), half, half], 1)


def test_15_2_and_15_3_induction_heads_of_smollm2(smollm2_repeated):
    from attnlab.inspect import census
    from attnlab.inspect.ablation import ablate_heads
    from attnlab.testing.exercises.heads import MAYBE, SURE, prefix_matching, second_copy_nats

    model, ids = smollm2_repeated
    scores = prefix_matching(model, ids)

    def by_threshold(model, ids, at=0.4):
        s = prefix_matching(model, ids)
        return [(la, h) for la in range(s.shape[0]) for h in range(s.shape[1]) if s[la, h] >= at]

    def by_census(model, ids):
        c = census(model, input_ids=ids)
        return [(la, h) for la in range(c.layers) for h in range(c.heads)
                if c.labels[la][h] == "induction"]

    def by_hand(model, ids):                   # weights on the key after the earlier copy
        from attnlab.inspect.capture import record
        n = (ids.shape[1] - 1) // 2
        with record(model) as rec, torch.no_grad():
            model(input_ids=ids, use_cache=False)
        maps = rec.maps(0)                                          # (L, H, N, N)
        q = torch.arange(n + 1, 2 * n + 1)                          # the second copy
        score = maps[:, :, q, q - n + 1].mean(-1)
        return [(la, h) for la, h in torch.nonzero(score >= 0.35).tolist()]

    for answer in (by_threshold, by_census, by_hand):
        v = check("15.2", answer, model, ids)
        assert v.passed, (answer.__name__, v.detail)
    top = divmod(int(scores.argmax()), scores.shape[1])
    v = check("15.2", lambda m, i: [x for x in by_threshold(m, i) if x != top], model, ids)
    assert not v.passed and f"head {top[0]}.{top[1]}" in v.detail
    v = check("15.2", lambda m, i: by_threshold(m, i) + [(0, 0)], model, ids)
    assert not v.passed and "you named head 0.0" in v.detail
    assert float(scores.max()) >= SURE > MAYBE

    heads = by_threshold(model, ids, SURE)

    def with_attnlab(model, ids, heads):
        before = second_copy_nats(model, ids)
        with ablate_heads(model, heads):
            return before, second_copy_nats(model, ids)

    def with_a_hook(model, ids, heads):
        layers = model.model.layers
        n_heads = model.config.num_attention_heads
        before = second_copy_nats(model, ids)
        handles = []
        for la, h in heads:
            def pre(mod, args, h=h):
                x = args[0].clone()
                d = x.shape[-1] // n_heads
                x[..., h * d:(h + 1) * d] = 0
                return (x,)
            handles.append(layers[la].self_attn.o_proj.register_forward_pre_hook(pre))
        try:
            return before, second_copy_nats(model, ids)
        finally:
            for hd in handles:
                hd.remove()

    def with_weights(model, ids, heads):        # zero the o_proj columns, then put them back
        n_heads = model.config.num_attention_heads
        before = second_copy_nats(model, ids)
        saved = []
        with torch.no_grad():
            for la, h in heads:
                w = model.model.layers[la].self_attn.o_proj.weight
                d = w.shape[1] // n_heads
                saved.append((w, h * d, w[:, h * d:(h + 1) * d].clone()))
                w[:, h * d:(h + 1) * d] = 0
        try:
            return before, second_copy_nats(model, ids)
        finally:
            with torch.no_grad():
                for w, start, old in saved:
                    w[:, start:start + old.shape[1]] = old

    for answer in (with_attnlab, with_a_hook, with_weights):
        v = check("15.3", answer, model, ids, heads)
        assert v.passed, (answer.__name__, v.detail)
    before, after = with_attnlab(model, ids, heads)
    assert after - before > 1.0                       # the proof the chapter states

    def left_in_place(model, ids, heads):              # the hook is never removed
        before = second_copy_nats(model, ids)
        n_heads = model.config.num_attention_heads
        for la, h in heads:
            def pre(mod, args, h=h):
                x = args[0].clone()
                d = x.shape[-1] // n_heads
                x[..., h * d:(h + 1) * d] = 0
                return (x,)
            model.model.layers[la].self_attn.o_proj.register_forward_pre_hook(pre)
        return before, second_copy_nats(model, ids)

    try:
        v = check("15.3", left_in_place, model, ids, heads)
        assert not v.passed and "left in place" in v.detail
    finally:
        for layer in model.model.layers:               # undo the planted mistake
            layer.self_attn.o_proj._forward_pre_hooks.clear()
    v = check("15.3", lambda m, i, hs: (second_copy_nats(m, i),) * 2, model, ids, heads)
    assert not v.passed and "after ablating" in v.detail
