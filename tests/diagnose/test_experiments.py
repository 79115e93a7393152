"""The experiments of docs/diagnostics.md at toy size: what they measure and how they return it
(the full-size numbers come from benchmarks/diagnostics.py)."""

from __future__ import annotations

import math

from attnlab.diagnose import experiments as E


def test_ln_depth_measures_the_feed_forward_weights_of_every_layer():
    r = E.ln_depth(depths=(2, 4), seeds=(0, 1), d_model=16)
    for tag in ("post", "pre"):
        assert [len(r[tag][d]) for d in (2, 4)] == [2, 4]
        assert all(v > 0 and math.isfinite(v) for d in (2, 4) for v in r[tag][d])
    a = E.ln_depth(depths=(2,), seeds=(0,), d_model=16)["post"][2]
    b = E.ln_depth(depths=(2,), seeds=(1,), d_model=16)["post"][2]
    assert r["post"][2] == [(x + y) / 2 for x, y in zip(a, b)]   # the mean over seeds


def test_warmup_ramps_the_learning_rate_and_post_ln_is_built():
    from attnlab.diagnose.experiments import _Recall
    model = _Recall(16, 16, 2, layers=2, norm_first=False)
    assert model.encoder.norm is None and not model.encoder.layers[0].norm_first
    w0, w1 = (lay.ff.linear1.weight for lay in model.encoder.layers)
    assert not (w0 == w1).all()                     # independent layers, not copies
    r = E.ln_training(depth=2, steps=6, warmups=(3,), seeds=(0,), d_model=16)
    assert [(x["norm"], x["warmup"]) for x in r["rows"]] == [("post", 3), ("pre", 0)]
    assert all(len(x["loss"]) == 6 and x["trained"] == (x["final_loss"] < 0.1)
               for x in r["rows"])


def test_no_scale_regime_pairs_scaled_and_unscaled_runs():
    r = E.no_scale_regime(d_k=16, lrs=(3e-3,), seeds=(0,), steps=4, n=8)
    assert [x["scale"] for x in r["rows"]] == ["scaled", "unscaled"]
    assert r["chance"] == math.log(16) and all(x["max_logit"] > 0 for x in r["rows"])
