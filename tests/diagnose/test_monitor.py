"""Each alarm is tripped by a model built to trip it and silent on a healthy one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.diagnose import AttentionMonitor
from attnlab.models.training import TrainConfig, train
from attnlab.nn import Encoder, EncoderLayer, MultiheadAttention


def _run(model, x, steps=3, every=1, backward=True):
    mon = AttentionMonitor(model, every=every)
    target = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    for step in range(steps):
        with mon.step(step):
            out = model(x)
        out = out[0] if isinstance(out, tuple) else out
        if backward:        # a regression loss: every layer's gradient is of the same order
            (out - target).square().mean().backward()
            mon.after_backward()
    return mon


class SelfAttn(nn.Module):
    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def test_a_healthy_model_raises_no_alarm():
    torch.manual_seed(0)
    model = Encoder(EncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2)
    mon = _run(model, torch.randn(4, 16, 32))
    assert mon.alarms == [] and len(mon.history) == 3
    assert set(mon.history[0].grad_norms) == {"layers.0.self_attn", "layers.1.self_attn"}


def test_score_explosion_saturation_and_entropy_collapse():
    torch.manual_seed(0)
    mha = MultiheadAttention(32, 4, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.mul_(40)                 # logits ~ 40^2 x the healthy ones
    mon = _run(SelfAttn(mha), torch.randn(4, 16, 32), steps=1)
    names = {a.name for a in mon.alarms}
    assert {"score explosion", "saturation", "entropy collapse",
            "vanishing softmax gradient"} <= names
    assert all(a.remedy for a in mon.alarms) and "qk_norm" in str(mon.alarms[0])


def test_vanishing_gradient():
    torch.manual_seed(0)
    mha = MultiheadAttention(32, 4, batch_first=True)

    class Dead(nn.Module):          # attention scaled to ~0 beside a path that learns
        def __init__(self):
            super().__init__()
            self.mha, self.skip = mha, nn.Linear(32, 32)

        def forward(self, x):
            return self.skip(x) + self.mha(x, x, x, need_weights=False)[0] * 1e-12
    mon = _run(Dead(), torch.randn(2, 8, 32), steps=1)
    assert [a.name for a in mon.alarms] == ["vanishing gradient"]


def test_sharp_attention_after_initialisation_is_recorded_not_alarmed():
    torch.manual_seed(0)
    mha = MultiheadAttention(32, 4, batch_first=True)
    mon = AttentionMonitor(SelfAttn(mha), every=1)
    x = torch.randn(4, 16, 32)
    with mon.step(0):                               # healthy at initialisation
        mha(x, x, x)
    with torch.no_grad():                           # training made the heads point (score ~200)
        mha.in_proj_weight[:64].mul_(8)
    with mon.step(1):
        mha(x, x, x)
    assert mon.alarms == []
    assert mon.history[1].layers[0]["saturation"] > 0.5
    with torch.no_grad():                           # ten times what pointing needs: an alarm
        mha.in_proj_weight[:64].mul_(3)
    with mon.step(2):
        mha(x, x, x)
    assert [a.name for a in mon.alarms] == ["score explosion"]


def test_large_initial_scores_and_the_inference_wording():
    from attnlab.diagnose import AT_INFERENCE, REMEDIES, THRESHOLDS, score_alarms
    torch.manual_seed(0)
    mha = MultiheadAttention(32, 4, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight[:64].mul_(2.5)           # scores start with std ~6: scale forgotten
    mon = _run(SelfAttn(mha), torch.randn(4, 16, 32), steps=1)
    assert "large initial scores" in {a.name for a in mon.alarms}
    assert set(AT_INFERENCE) == set(REMEDIES)
    for text in AT_INFERENCE.values():              # a trained model: no training advice
        assert "learning rate" not in text and "qk_norm" not in text
    layer = {"layer": "l", "score_max": 2e3, "score_std": 1.0, "saturation": 0.0,
             "n_keys": 4, "entropy_ratio": 1.0, "jacobian_norm": 1.0}
    assert score_alarms([layer]) == [("score explosion", "l", 2e3)]
    assert score_alarms([layer], {"score_max": 1e4}) == []
    assert 150 < THRESHOLDS["score_max"] < 1500    # above healthy pointing heads, below divergence


def test_only_every_kth_step_is_recorded():
    model = Encoder(EncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1)
    mon = _run(model, torch.randn(2, 5, 16), steps=10, every=4)
    assert [r.step for r in mon.history] == [0, 4, 8]
    series = mon.series("score_max")
    assert list(series) == ["layers.0.self_attn"] and len(series["layers.0.self_attn"]) == 3
    with pytest.raises(ValueError, match="every must be"):
        AttentionMonitor(model, every=0)


def test_the_training_loop_takes_a_monitor():
    torch.manual_seed(0)
    model = Encoder(EncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1)
    x, y = torch.randn(40, 6, 16), torch.randn(40, 6, 16)
    mon = AttentionMonitor(model, every=2)
    cfg = TrainConfig(max_epochs=2, batch_size=10, lr=1e-3, patience=5, seed=0, verbose=False)
    train(model, lambda m, a, b: (m(a) - b).square().mean(), (x, y), None, cfg, monitor=mon)
    assert [r.step for r in mon.history] == [0, 2, 4, 6]
    assert all(r.grad_norms for r in mon.history)
    table = mon.table()
    assert table.row_count == 1


def test_monitor_figure(tmp_path):
    from attnlab.plots.diagnose import save_monitor
    torch.manual_seed(0)
    mha = MultiheadAttention(32, 4, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.mul_(40)
    mon = _run(SelfAttn(mha), torch.randn(4, 16, 32), steps=6, every=2)
    save_monitor(mon, tmp_path / "monitor.png")
    assert (tmp_path / "monitor.png").stat().st_size > 20_000
