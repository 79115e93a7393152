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
from attnlab.diagnose.stats import head_health


def _softmax_grad_norm(q, k, scale):
    """Mean over rows of |d softmax(s) / d s|_F for the scores of q, k at this scale."""
    return float(head_health(q, k, scale=scale).jacobian_norm.mean())


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
            s = head_health(q, k, scale=scale)
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
            s = head_health(q, k, temperature=t)
            rows.append({"d_k": d, "T": t, "std": float(s.score_std.mean()),
                         "saturation": float(s.saturation.mean()),
                         "entropy_ratio": float(s.entropy_ratio.mean()),
                         "jacobian": float(s.jacobian_norm.mean())})
    return {"rows": rows}


class _Recall(nn.Module):
    """A one-layer attention model: every position must output the sequence's first token."""

    def __init__(self, vocab: int, d_model: int, heads: int, temperature: float = 1.0,
                 qk_norm: str | None = None, layers: int = 1, norm_first: bool = True):
        super().__init__()
        from attnlab.nn import Encoder, EncoderLayer
        from attnlab.nn.position import sinusoidal_table
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pe", sinusoidal_table(512, d_model), persistent=False)
        self.encoder = Encoder(EncoderLayer(d_model, heads, 2 * d_model, dropout=0.0,
                                            batch_first=True, norm_first=norm_first,
                                            temperature=temperature, qk_norm=qk_norm), layers,
                               norm=nn.LayerNorm(d_model) if norm_first else None)
        if layers > 1:
            self.encoder.redraw_layers()              # independent layers, torch's init
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x):
        n = x.shape[1]
        return self.head(self.encoder(self.embed(x) + self.pe[:n], is_causal=True))


def _recall_batch(step, size, n, vocab):
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, vocab, (size, n), generator=g)
    return x, x[:, :1].expand(size, n)


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def train_recall(*, temperature: float = 1.0, qk_norm: str | None = None, lr: float = 3e-3,
                 steps: int = 300, d_model: int = 128, heads: int = 1, n: int = 32,
                 vocab: int = 16, layers: int = 1, seed: int = 0, every: int = 10,
                 norm_first: bool = True, warmup: int = 0, progress=None) -> dict:
    """Train :class:`_Recall` and return its loss curve and, every ``every`` steps, the largest
    attention logit (the AttentionMonitor's record). ``warmup``: steps of linear learning-rate
    warm-up from lr/warmup to lr (0: none); ``norm_first=False`` builds post-LN layers."""
    torch.manual_seed(seed)
    model = _Recall(vocab, d_model, heads, temperature, qk_norm, layers, norm_first)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
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
        sched.step()
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
            rows.append({"qk_norm": qk or "none", "lr": lr,
                         "max_logit": max(r["max_logit"]),
                         "final_loss": _tail_mean(r["loss"], 20),
                         "alarms": r["alarms"]})
    return {"rows": rows}


def no_scale_regime(d_k: int = 512, lrs=(1e-3, 3e-3), seeds=(0, 1, 2), steps: int = 150,
                    n: int = 64, progress=None) -> dict:
    """The recall model (one head of dimension ``d_k``) trained with and without 1/sqrt(d_k)
    (``temperature = 1/sqrt(d_k)`` undoes it) at each learning rate and seed: the final loss
    (mean of the last 10 steps) and the largest attention logit."""
    rows = []
    for lr in lrs:
        for seed in seeds:
            for tag, t in (("scaled", 1.0), ("unscaled", 1 / math.sqrt(d_k))):
                r = train_recall(d_model=d_k, heads=1, n=n, lr=lr, steps=steps, temperature=t,
                                 seed=seed, progress=progress)
                rows.append({"lr": lr, "seed": seed, "scale": tag,
                             "final_loss": _tail_mean(r["loss"]),
                             "max_logit": max(r["max_logit"]), "loss": r["loss"]})
    return {"d_k": d_k, "n": n, "steps": steps, "chance": math.log(16), "rows": rows}


def _tail_mean(loss: list[float], k: int = 10) -> float:
    tail = [v for v in loss[-k:] if math.isfinite(v)]
    return sum(tail) / len(tail) if tail else float("nan")


@torch.random.fork_rng(devices=[])   # seeds for the call, the caller's RNG back
def ln_depth(depths=(6, 12, 24), d_model: int = 64, seeds=(0, 1, 2), n: int = 32) -> dict:
    """Xiong et al. (2020), Theorem 1, measured: the gradient norm of every layer's second
    feed-forward weight W2 at initialisation, post-LN vs pre-LN, on the recall task's
    cross-entropy (one batch, mean over ``seeds``). Their claim: post-LN's last-layer gradient
    does not shrink with depth L, pre-LN's shrinks like 1/sqrt(L), so post-LN's large early
    steps at depth need a learning-rate warm-up."""
    out = {"depths": list(depths), "seeds": list(seeds), "post": {}, "pre": {}}
    for depth in depths:
        for tag, first in (("post", False), ("pre", True)):
            per_seed = []
            for seed in seeds:
                torch.manual_seed(seed)
                model = _Recall(16, d_model, 4, layers=depth, norm_first=first)
                x, y = _recall_batch(seed, 16, n, 16)
                F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
                per_seed.append([float(lay.ff.linear2.weight.grad.norm())
                                 for lay in model.encoder.layers])
            out[tag][depth] = [sum(v) / len(v) for v in zip(*per_seed)]
    return out


def ln_training(depth: int = 12, lr: float = 5e-3, steps: int = 300, warmups=(0, 100, 250),
                seeds=(0, 1, 2), d_model: int = 64, progress=None) -> dict:
    """Post-LN needs warm-up at depth, pre-LN does not (Xiong et al. 2020), shown in training:
    the recall model with ``depth`` layers (4 heads) under Adam at ``lr``, post-LN with each
    warm-up length and pre-LN without, over ``seeds``. A run "trained" when its last 10 steps
    average below 0.1 (chance is ln 16 = 2.77)."""
    rows = []
    configs = [("post", w) for w in warmups] + [("pre", 0)]
    for norm, warm in configs:
        for seed in seeds:
            r = train_recall(d_model=d_model, heads=4, n=32, lr=lr, steps=steps,
                             layers=depth, norm_first=norm == "pre", warmup=warm, seed=seed,
                             every=steps, progress=progress)
            final = _tail_mean(r["loss"])
            rows.append({"norm": norm, "warmup": warm, "seed": seed, "final_loss": final,
                         "trained": final < 0.1, "loss": r["loss"]})
    return {"depth": depth, "lr": lr, "steps": steps, "rows": rows}
