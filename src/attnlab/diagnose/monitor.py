"""A training monitor: attention statistics every k steps, attention layers' gradient norms,
and named alarms with a one-line remedy each.

    monitor = AttentionMonitor(model, every=50)
    for step, batch in enumerate(data):
        with monitor.step(step):              # records this forward when step % every == 0
            loss = loss_fn(model(batch))
        loss.backward()
        monitor.after_backward()              # gradient norms of the attention layers
        opt.step()
    monitor.alarms                            # what went wrong, where, when, and the remedy

Alarms: at the first recorded step (the model as initialised) a saturated, collapsed or flat
softmax means the scale or the init is wrong; at any step, scores an order of magnitude beyond
what a pointing head needs (1e3) and an attention layer whose gradient vanished while the rest
of the model's did not.

``attnlab.models.training.train(..., monitor=monitor)`` does the two calls itself.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from attnlab.diagnose.watch import watch

# Thresholds. Scores: a head that must point at one key (copying, recall) is one-hot in float32
# once its logit gap passes ~17 + ln n, and trained such heads reach scores of 30-150; runs that
# diverge (too high a learning rate, no 1/sqrt(d_k)) reach 1.5e3-6e4 (measured on the recall
# task, docs/diagnostics.md). 1e3 sits an order of magnitude above the healthy runs. With a
# unit-variance scale the score std starts near 1 (above 3 at initialisation: the scale or the
# init of W_q, W_k is off; trained models grow it on purpose). Saturation: rows with one weight
# > 0.99 pass almost no gradient. Entropy collapse (Zhai et al. 2023): entropy far below ln n.
# Vanishing gradient: an attention layer's gradient norm below 1e-4 of the whole model's (a
# converged model's gradients all shrink together; this one's alone vanished).
THRESHOLDS = {"score_max": 1e3, "score_std": 3.0, "saturation": 0.5,
              "entropy_ratio": 0.05, "jacobian_norm": 1e-3}
GRAD_SHARE_FLOOR = 1e-4

REMEDIES = {
    "score explosion": "normalise q and k (qk_norm='layernorm', Wortsman et al. 2023), cap the "
                       "logits (softcap=50, Gemma 2), or lower the learning rate",
    "large initial scores": "scores should start with a standard deviation near 1: check the "
                            "1/sqrt(d_k) scale and the init of W_q, W_k",
    "saturation": "the softmax is one-hot: check the 1/sqrt(d_k) scale, raise the temperature, "
                  "or add qk_norm",
    "entropy collapse": "attention has collapsed onto single keys: lower the learning rate, "
                        "add qk_norm, or use sigma-reparametrised projections (Zhai et al. 2023)",
    "vanishing softmax gradient": "the softmax passes almost no gradient: reduce the score "
                                  "scale (temperature > 1) or normalise q and k",
    "vanishing gradient": "the attention layers' gradients are ~0: use pre-LN layers "
                          "(norm_first=True), residual connections, or scaled init",
}


# What each finding means for a trained model at inference, where there is nothing to tune:
# attnlab diagnose reports these instead of REMEDIES.
AT_INFERENCE = {
    "score explosion": "scores this large make the layer's softmax one-hot on this text; a "
                       "property of the trained weights, not a fault to fix at inference",
    "large initial scores": "the scores spread wider than the 1/sqrt(d_k) scale's unit "
                            "variance: the trained q and k have grown (common after training)",
    "saturation": "most rows put more than 99% of their weight on one key (copying or "
                  "pointing heads do this by design)",
    "entropy collapse": "rows attend to single keys: sharp, not spread attention",
    "vanishing softmax gradient": "the softmax is flat to small changes of the scores here; "
                                  "it matters only if this model is trained further",
    "vanishing gradient": "no gradient at inference: not measured",
}


# Sharp attention is often what a task needs (a copying head, a recall task): after training
# has shaped it, saturation, low entropy and a flat softmax are recorded, not alarmed. At
# initialisation they mean the scale or the init is wrong (no 1/sqrt(d_k), q and k too large).
AT_INIT_ONLY = ("large initial scores", "saturation", "entropy collapse",
                "vanishing softmax gradient")


def score_alarms(layers: list[dict], thresholds: dict | None = None,
                 at_init: bool = True) -> list[tuple[str, str, float]]:
    """``(alarm, layer, value)`` for every layer of :meth:`Diagnosis.per_layer` that crosses a
    threshold (:data:`THRESHOLDS`, or the given overrides) of the score statistics.
    ``at_init=False`` (a model already trained for a while) checks score explosion only: the
    others (:data:`AT_INIT_ONLY`) describe sharp attention, which training may have built on
    purpose."""
    t = {**THRESHOLDS, **(thresholds or {})}
    out = []
    for layer in layers:
        name = layer["layer"]
        if layer["score_max"] > t["score_max"]:
            out.append(("score explosion", name, layer["score_max"]))
        if not at_init:
            continue
        if layer["score_std"] > t["score_std"]:
            out.append(("large initial scores", name, layer["score_std"]))
        if layer["saturation"] > t["saturation"]:
            out.append(("saturation", name, layer["saturation"]))
        if layer["n_keys"] > 1 and layer["entropy_ratio"] < t["entropy_ratio"]:
            out.append(("entropy collapse", name, layer["entropy_ratio"]))
        if layer["n_keys"] > 1 and layer["jacobian_norm"] < t["jacobian_norm"]:
            out.append(("vanishing softmax gradient", name, layer["jacobian_norm"]))
    return out


@dataclass
class Alarm:
    """A named alarm raised by the monitor at a step, in a layer, with its value and remedy."""
    name: str
    step: int
    layer: str
    value: float
    remedy: str

    def __str__(self) -> str:
        return f"step {self.step}, {self.layer}: {self.name} ({self.value:.3g}); {self.remedy}"


@dataclass
class Record:
    """One layer's statistics at one monitored step."""
    step: int
    layers: list[dict]
    grad_norms: dict = field(default_factory=dict)
    seconds: float = 0.0


class AttentionMonitor:
    """Records attention health every ``every`` steps and raises named alarms.

    Args:
        model: the model being trained (attnlab modules, torch MultiheadAttention, or
            transformers).
        every: record one step in ``every``; other steps cost nothing.
        thresholds: overrides of :data:`THRESHOLDS`.
        grad_floor: an attention layer whose gradient norm falls below this share of the
            whole model's gradient norm raises "vanishing gradient" (a model that has
            converged has small gradients everywhere and raises nothing).
    """

    def __init__(self, model: nn.Module, every: int = 50, thresholds: dict | None = None,
                 grad_floor: float = GRAD_SHARE_FLOOR):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        unknown = set(thresholds or {}) - set(THRESHOLDS)
        if unknown:
            raise ValueError(f"unknown thresholds {sorted(unknown)}; known: {sorted(THRESHOLDS)}")
        self.model, self.every = model, every
        self.thresholds = {**THRESHOLDS, **(thresholds or {})}
        self.grad_floor = grad_floor
        self.history: list[Record] = []
        self.alarms: list[Alarm] = []
        self._pending: Record | None = None
        self._attn = [(n, m) for n, m in model.named_modules() if _is_attention(m)]

    @contextmanager
    def step(self, step: int):
        """Wrap the forward pass of training step ``step``."""
        if step % self.every:
            yield None
            return
        start = time.perf_counter()
        with watch(self.model) as diag:
            yield diag
        self._pending = Record(step, diag.per_layer(), seconds=time.perf_counter() - start)
        self.history.append(self._pending)
        self._check_scores(self._pending)

    def after_backward(self) -> None:
        """After ``loss.backward()`` of a recorded step: each attention layer's gradient norm."""
        rec, self._pending = self._pending, None
        if rec is None:
            return
        total = _norm([p.grad for p in self.model.parameters() if p.grad is not None])
        for name, m in self._attn:
            grads = [p.grad for p in m.parameters() if p.grad is not None]
            if not grads:
                continue
            norm = _norm(grads)
            rec.grad_norms[name or type(m).__name__] = norm
            if total > 0 and norm < self.grad_floor * total:
                self._alarm("vanishing gradient", rec.step, name, norm / total)

    def _alarm(self, name, step, layer, value):
        self.alarms.append(Alarm(name, step, layer, float(value), REMEDIES[name]))

    def _check_scores(self, rec: Record) -> None:
        first = len(self.history) == 1                 # the model as initialised
        for name, layer, value in score_alarms(rec.layers, self.thresholds, at_init=first):
            self._alarm(name, rec.step, layer, value)

    def series(self, key: str) -> dict[str, list[tuple[int, float]]]:
        """``{layer: [(step, value), ...]}`` of one statistic (or ``"grad_norm"``)."""
        out: dict[str, list[tuple[int, float]]] = {}
        for rec in self.history:
            if key == "grad_norm":
                for name, v in rec.grad_norms.items():
                    out.setdefault(name, []).append((rec.step, v))
                continue
            for layer in rec.layers:
                out.setdefault(layer["layer"], []).append((rec.step, layer[key]))
        return out

    def table(self):
        """The last record as a rich table (one row per attention layer)."""
        from rich.table import Table
        table = Table(title=f"attention health at step {self.history[-1].step}"
                      if self.history else "attention health (nothing recorded yet)")
        for col in ("layer", "score std", "score max", "saturated", "entropy/ln n",
                    "|J| softmax", "sink", "grad norm"):
            table.add_column(col, justify="left" if col == "layer" else "right")
        if self.history:
            rec = self.history[-1]
            for layer in rec.layers:
                g = rec.grad_norms.get(layer["layer"])
                table.add_row(layer["layer"], f"{layer['score_std']:.2f}",
                              f"{layer['score_max']:.1f}", f"{layer['saturation']:.0%}",
                              f"{layer['entropy_ratio']:.2f}", f"{layer['jacobian_norm']:.3f}",
                              f"{layer['sink_mass']:.2f}", "" if g is None else f"{g:.2e}")
        return table


def _norm(grads) -> float:
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads))) if grads else 0.0


def _is_attention(m: nn.Module) -> bool:
    from attnlab.nn.multihead import MultiheadAttention
    if isinstance(m, (MultiheadAttention, nn.MultiheadAttention)):
        return True
    # transformers' attention modules (BertSelfAttention, LlamaAttention, ...): the innermost
    # module named *Attention that owns parameters
    return (type(m).__name__.endswith("Attention") and any(True for _ in m.parameters())
            and not any(type(c).__name__.endswith("Attention") for c in m.children()))
