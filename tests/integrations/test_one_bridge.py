"""One bridge to transformers: the integration and the sharded models register through one
registrar (version-gated, with an unregister) and turn a call's flags into causal and window
by one rule; the sink merge is core's."""

import types

import pytest
import torch

from attnlab.core.softmax import add_sink
from attnlab.distributed import hf
from attnlab.integrations import registry
from attnlab.integrations import transformers as bridge


@pytest.mark.parametrize("is_causal, window, n_q, expect", [
    (True, 24, 5, (True, (23, 0))),         # a causal sliding-window model: keys up to it
    (False, 24, 5, (False, (23, 23))),      # bidirectional: w - 1 on each side
    (True, None, 1, (False, None)),         # one query attends to every cached key
    (None, 8, 3, (True, (7, 0))),           # no flag: the module's, True when it has none
])
def test_both_routes_give_one_window_for_one_config(is_causal, window, n_q, expect):
    module = types.SimpleNamespace()
    assert bridge.causal_and_window(module, is_causal, window, n_q) == expect
    # the sharded route has no mask tensor (padding is each rank's key mask) and calls the
    # same function
    assert hf.causal_and_window is bridge.causal_and_window
    # with a mask the mask holds causality and the window
    assert bridge.causal_and_window(module, is_causal, window, n_q, masked=True) == (False,
                                                                                     None)


def test_the_sharded_names_register_and_unregister_through_the_one_registrar():
    from transformers import AttentionInterface

    assert hf.add_names is bridge.add_names is registry.add_names
    from transformers.masking_utils import AttentionMaskInterface

    held = bool(hf._REGISTERED)          # an earlier test in this worker may hold the names
    hf.unregister()
    before = dict(AttentionInterface._global_mapping)
    names = hf.register()
    assert set(names) == set(hf.NAMES)
    for n in names:
        assert AttentionInterface._global_mapping[n].__name__.startswith("attnlab_")
        assert n in AttentionMaskInterface._global_mapping
    assert hf.register() == names                          # idempotent
    hf.unregister()
    assert dict(AttentionInterface._global_mapping) == before   # nothing else touched
    if held:
        hf.register()


def test_a_name_held_by_someone_else_is_refused_before_any_change():
    from transformers import AttentionInterface

    def theirs(*a, **k):
        return None

    # a test before this one in the same worker may have registered attnlab's names: start
    # from none, and give them back after
    held = bool(hf._REGISTERED)
    hf.unregister()
    AttentionInterface.register("attnlab_ring", theirs)
    try:
        with pytest.raises(ValueError, match="'attnlab_ring' is already registered"):
            hf.register()
        assert not any(n in hf._REGISTERED for n in hf.NAMES)    # none half-registered
        assert AttentionInterface._global_mapping["attnlab_ring"] is theirs
    finally:
        del AttentionInterface._global_mapping["attnlab_ring"]
        if held:
            hf.register()


def test_an_old_transformers_is_refused_with_the_version(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.40.2")
    with pytest.raises(ImportError, match=r"needs transformers >= 4\.48, found 4\.40\.2"):
        registry.interfaces()


def test_the_sharded_sink_merge_is_cores():
    g = torch.Generator().manual_seed(0)
    out = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)
    lse = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)
    lse[0, 0, 0] = float("-inf")                           # a row with no key
    out[0, 0, 0] = 0
    sinks = torch.randn(3, generator=g, dtype=torch.float64)
    merged = hf.with_sinks(out, lse, sinks)
    want, _ = add_sink(out, lse, sinks[None, :, None])
    assert torch.equal(merged, want)
    # the formula: the sink-free output times sigmoid(lse - sink); 0 where no key
    assert torch.allclose(merged, out * torch.sigmoid(lse - sinks[None, :, None])[..., None])
