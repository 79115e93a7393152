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


def _gate_importance(model, ids, span=None, signed=False, per_position=False, cut=False):
    """The importance by hand: a pre-hook keeps o_proj's input (every head's output side by
    side, in the graph: the weights require gradients) and autograd gives dL/do there. With
    ``cut``, each kept input is a detached copy: the later layers' attention then no longer
    depends on it, and only the direct paths remain (a plausible wrong answer)."""
    from attnlab.testing.exercises.matters import second_copy_span

    start, end = span or second_copy_span(ids)
    kept = []

    def keep(mod, args):
        x = args[0].detach().requires_grad_(True) if cut else args[0]
        kept.append(x)
        return (x,)

    hooks = [layer.self_attn.o_proj.register_forward_pre_hook(keep)
             for layer in model.model.layers]
    try:
        logits = model(input_ids=ids, use_cache=False).logits[0, start - 1:end - 1].double()
        loss = torch.nn.functional.cross_entropy(logits, ids[0, start:end])
        grads = torch.autograd.grad(loss, kept)
    finally:
        for h in hooks:
            h.remove()
    heads = model.config.num_attention_heads
    out = []
    for x, g in zip(kept, grads):
        prod = (x * g)[0].reshape(x.shape[1], heads, -1).sum(-1)          # (N, H)
        out.append(prod.abs().sum(0) if per_position else prod.sum(0))
    out = torch.stack(out)
    return out if signed or per_position else out.abs()


def test_16_2_importance_by_hand_passes_and_its_wrong_forms_fail(smollm2_repeated):
    """Three right answers (hooks and autograd; the library's head_gradients; gates on every
    head), and the wrong forms: signed, per-position absolute values, the loss of every token,
    the loss of all 48 tokens of the second copy, a hook left in place."""
    from attnlab.inspect.importance import head_gradients
    from attnlab.testing.exercises.matters import second_copy_span

    model, ids = smollm2_repeated

    def by_library(model, ids):
        return head_gradients(model, ids, target=second_copy_span(ids)).importance

    def by_gates(model, ids):
        heads = model.config.num_attention_heads
        gates = [torch.ones(heads, requires_grad=True) for _ in model.model.layers]
        hooks = [layer.self_attn.o_proj.register_forward_pre_hook(
            lambda m, a, g=g: ((a[0].unflatten(-1, (heads, -1)) * g[:, None]).flatten(-2),))
            for layer, g in zip(model.model.layers, gates)]
        try:
            start, end = second_copy_span(ids)
            logits = model(input_ids=ids, use_cache=False).logits[0, start - 1:end - 1]
            loss = torch.nn.functional.cross_entropy(logits.float(), ids[0, start:end])
            grads = torch.autograd.grad(loss, gates)
        finally:
            for h in hooks:
                h.remove()
        return torch.stack(grads).abs()

    for answer in (_gate_importance, by_library, by_gates):
        v = check("16.2", answer, model, ids)
        assert v.passed, (answer.__name__, v.detail)
    n = ids.shape[1]
    half = (n - 1) // 2
    wrong = {
        "signed": lambda m, i: _gate_importance(m, i, signed=True),
        "per position": lambda m, i: _gate_importance(m, i, per_position=True),
        "every token": lambda m, i: _gate_importance(m, i, span=(1, n)),
        "all 48 of the copy": lambda m, i: _gate_importance(m, i, span=(half + 1, n)),
        "detached at each layer": lambda m, i: _gate_importance(m, i, cut=True),
    }
    for name, answer in wrong.items():
        v = check("16.2", answer, model, ids)
        assert not v.passed, name
        assert "has importance" in v.detail, (name, v.detail)

    def left_in_place(m, i):
        m.model.layers[0].self_attn.o_proj.register_forward_pre_hook(
            lambda mod, a: (a[0] * 0.5,))
        return by_library(m, i)

    v = check("16.2", left_in_place, model, ids)
    model.model.layers[0].self_attn.o_proj._forward_pre_hooks.clear()
    assert not v.passed and "left in place" in v.detail


def test_the_catalogue_of_mutants_fails_the_exercises_on_smollm2(smollm2_repeated):
    """The catalogue (tests/testing/mutants.py) against 15.2, 15.3 and 16.2, whose checks need
    the real model: at least 6 operators apply to each, and every one fails."""
    from attnlab.inspect.ablation import ablate_heads
    from attnlab.testing.exercises.heads import second_copy_nats
    from tests.testing.mutants import run_catalogue

    model, ids = smollm2_repeated
    heads = [(17, 3), (18, 6)]

    def induction(model, ids):          # only the heads that must be named (one_dropped then
        from attnlab.testing.exercises.heads import SURE, prefix_matching  # drops one of them)

        s = prefix_matching(model, ids)
        return [(la, h) for la in range(s.shape[0]) for h in range(s.shape[1])
                if s[la, h] >= SURE]

    def ablation(model, ids, heads):
        before = second_copy_nats(model, ids)
        with ablate_heads(model, heads):
            after = second_copy_nats(model, ids)
        return before, after

    cases = {"15.2": (induction, (model, ids)), "15.3": (ablation, (model, ids, heads)),
             "16.2": (_gate_importance, (model, ids))}
    for exercise, (reference, args) in cases.items():
        applied, passed = run_catalogue(exercise, reference, args)
        assert not passed, (exercise, passed)
        assert len(applied) >= 6, (exercise, [name for name, _ in applied])
