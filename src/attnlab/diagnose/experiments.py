"""The experiments behind docs/diagnostics.md: why 1/sqrt(d_k), temperature, attention-logit
growth with and without QK-norm, and post-LN vs pre-LN gradients in depth. Each returns plain
numbers (dicts of lists); the figures are in :mod:`attnlab.plots.diagnose`, the full-size runs in
``benchmarks/diagnostics.py``, a short version in ``attnlab diagnose --demo``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.diagnose.monitor import AttentionMonitor
from attnlab.diagnose.stats import attention_stats


def _softmax_grad_norm(q, k, scale):
    """Mean over rows of |d softmax(s) / d s|_F for the scores of q, k at this scale."""
    return float(attention_stats(q, k, scale=scale).jacobian_norm.mean())


def scale_sweep(dims=(8, 16, 32, 64, 128, 256, 512, 1024), n: int = 128, seed: int = 0) -> dict:
    """Unit-variance q and k of each head dim d: the scores' std, the share of saturated rows
    and the softmax's gradient norm, with the 1/sqrt(d) scale and without it."""
    g = torch.Generator().manual_seed(seed)
    out = {"d_k": list(dims)}
    for name in ("std", "saturation", "jacobian", "entropy_ratio"):
        out[f"{name}_scaled"], out[f"{name}_unscaled"] = [], []
    for d in dims:
        q = torch.randn(1, 4, n, d, generator=g)
        k = torch.randn(1, 4, n, d, generator=g)
        for tag, scale in (("scaled", 1 / math.sqrt(d)), ("unscaled", 1.0)):
            s = attention_stats(q, k, scale=scale)
            out[f"std_{tag}"].append(float(s.score_std.mean()))
            out[f"saturation_{tag}"].append(float(s.saturation.mean()))
            out[f"jacobian_{tag}"].append(float(s.jacobian_norm.mean()))
            out[f"entropy_ratio_{tag}"].append(float(s.entropy_ratio.mean()))
    return out


def temperature_sweep(temperatures=(0.5, 1.0, 2.0, 4.0), dims=(16, 64, 256), n: int = 128,
                      seed: int = 0) -> dict:
    """The same statistics under the 1/sqrt(d) scale at each temperature T (scores / T)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for d in dims:
        q = torch.randn(1, 4, n, d, generator=g) * 2.0    # a model whose q, k have grown (std 2)
        k = torch.randn(1, 4, n, d, generator=g) * 2.0
        for t in temperatures:
            s = attention_stats(q, k, temperature=t)
            rows.append({"d_k": d, "T": t, "std": float(s.score_std.mean()),
                         "saturation": float(s.saturation.mean()),
                         "entropy_ratio": float(s.entropy_ratio.mean()),
                         "jacobian": float(s.jacobian_norm.mean())})
    return {"rows": rows}


class _Recall(nn.Module):
    """A one-layer attention model: every position must output the sequence's first token."""

    def __init__(self, vocab: int, d_model: int, heads: int, temperature: float = 1.0,
                 qk_norm: str | None = None, layers: int = 1):
        super().__init__()
        from attnlab.nn import Encoder, EncoderLayer
        from attnlab.nn.position import sinusoidal_table
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pe", sinusoidal_table(512, d_model), persistent=False)
        self.encoder = Encoder(EncoderLayer(d_model, heads, 2 * d_model, dropout=0.0,
                                            batch_first=True, norm_first=True,
                                            temperature=temperature, qk_norm=qk_norm), layers,
                               norm=nn.LayerNorm(d_model))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x):
        n = x.shape[1]
        return self.head(self.encoder(self.embed(x) + self.pe[:n], is_causal=True))


def _recall_batch(step, size, n, vocab):
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, vocab, (size, n), generator=g)
    return x, x[:, :1].expand(size, n)


def train_recall(*, temperature: float = 1.0, qk_norm: str | None = None, lr: float = 3e-3,
                 steps: int = 300, d_model: int = 128, heads: int = 1, n: int = 32,
                 vocab: int = 16, layers: int = 1, seed: int = 0, every: int = 10,
                 progress=None) -> dict:
    """Train :class:`_Recall` and return its loss curve and, every ``every`` steps, the largest
    attention logit (the AttentionMonitor's record)."""
    torch.manual_seed(seed)
    model = _Recall(vocab, d_model, heads, temperature, qk_norm, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    mon = AttentionMonitor(model, every=every)
    losses = []
    for step in range(steps):
        x, y = _recall_batch(step, 16, n, vocab)
        with mon.step(step):
            logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        mon.after_backward()
        opt.step()
        value = float(loss.detach())
        losses.append(value if math.isfinite(value) else float("nan"))
        if progress is not None:
            progress()
    logit = [max(layer["score_max"] for layer in rec.layers) for rec in mon.history]
    return {"loss": losses, "logit_steps": [r.step for r in mon.history], "max_logit": logit,
            "alarms": sorted({a.name for a in mon.alarms})}


def logit_growth(lrs=(1e-3, 3e-3, 1e-2, 3e-2, 1e-1), steps: int = 200, progress=None,
                 **kw) -> dict:
    """After Wortsman et al. (2023): over a sweep of learning rates, the largest attention logit
    and the final loss, without and with QK-norm."""
    rows = []
    for qk in (None, "layernorm"):
        for lr in lrs:
            r = train_recall(lr=lr, qk_norm=qk, steps=steps, progress=progress, **kw)
            tail = [v for v in r["loss"][-20:] if math.isfinite(v)]
            rows.append({"qk_norm": qk or "none", "lr": lr,
                         "max_logit": max(r["max_logit"]),
                         "final_loss": sum(tail) / len(tail) if tail else float("nan"),
                         "alarms": r["alarms"]})
    return {"rows": rows}


def ln_depth(depths=(2, 6, 12, 24), d_model: int = 64, seed: int = 0) -> dict:
    """Gradient norm of each layer's parameters at initialization, post-LN vs pre-LN (Xiong et
    al. 2020: post-LN gradients grow toward the output layers, pre-LN's stay level)."""
    from attnlab.nn import Encoder, EncoderLayer
    out = {"depths": list(depths), "post": {}, "pre": {}}
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 32, d_model, generator=g)
    y = torch.randn(8, 32, d_model, generator=g)
    for depth in depths:
        for tag, first in (("post", False), ("pre", True)):
            torch.manual_seed(seed)
            enc = Encoder(EncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True,
                                       norm_first=first), depth,
                          norm=nn.LayerNorm(d_model) if first else None)
            enc.redraw_layers()                       # independent layers, torch's init
            F.mse_loss(enc(x), y).backward()
            out[tag][depth] = [float(torch.sqrt(sum((p.grad ** 2).sum() for p in lay.parameters())))
                               for lay in enc.layers]
    return out
