"""Listen to a model's attention calls and compute their health statistics.

Three kinds of model, one mechanism per kind (as :mod:`attnlab.inspect.capture`):

* attnlab's modules: every ``attnlab.attention`` call is routed through
  :func:`attnlab.core.api.dispatch_to`; the route computes the statistics from q and k, then
  the attention itself, unchanged;
* Hugging Face models: attnlab's registered attention implementation (which calls
  ``attnlab.attention``) is switched on for the block, so the same route sees q and k;
* ``torch.nn.MultiheadAttention``: a forward pre-hook projects the inputs with the module's own
  ``in_proj`` weights to get q and k.

Each call is named after the innermost module running when it happens.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnlab.core.api import attention, dispatch_to
from attnlab.diagnose.stats import HeadStats, head_health


@dataclass
class Call:
    """One attention call: the module's name, its index among the calls, the statistics."""

    name: str
    index: int
    stats: HeadStats


@dataclass
class Diagnosis:
    """The statistics of every attention call of one forward pass, in call order."""

    calls: list[Call] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (module, why not measured)

    def rows(self) -> list[dict]:
        """One dict per (call, head): every statistic as a float."""
        out = []
        for c in self.calls:
            s = c.stats
            for h in range(s.score_std.numel()):
                out.append({
                    "layer": c.name, "call": c.index, "head": h,
                    "score_mean": float(s.score_mean[h]), "score_std": float(s.score_std[h]),
                    "score_max": float(s.score_max[h]), "predicted_std": s.predicted_std,
                    "expected_std": float(s.expected_std[h]),
                    "saturation": float(s.saturation[h]), "entropy": float(s.entropy[h]),
                    "entropy_ratio": float(s.entropy_ratio[h]),
                    "jacobian_norm": float(s.jacobian_norm[h]),
                    "sink_mass": float(s.sink_mass[h]), "n_keys": s.n_keys})
        return out

    def per_layer(self) -> list[dict]:
        """One dict per call: each statistic's mean over heads (max for score_max)."""
        out = []
        for c in self.calls:
            s = c.stats
            out.append({"layer": c.name, "call": c.index, "heads": s.score_std.numel(),
                        "score_std": float(s.score_std.mean()),
                        "score_max": float(s.score_max.max()),
                        "predicted_std": s.predicted_std,
                        "saturation": float(s.saturation.mean()),
                        "entropy_ratio": float(s.entropy_ratio.mean()),
                        "jacobian_norm": float(s.jacobian_norm.mean()),
                        "sink_mass": float(s.sink_mass.mean()), "n_keys": s.n_keys})
        return out


def _options_for_stats(q, k, options: dict) -> dict:
    mask = options["mask"]
    return dict(scale=options["scale"], temperature=options["temperature"],
                softcap=options["softcap"], mask=mask, causal=options["causal"],
                window=options["window"])


@contextmanager
def watch(model: nn.Module, on_call=None):
    """While the block runs, every attention call of ``model`` adds its statistics to the
    yielded :class:`Diagnosis` (and is passed to ``on_call(call)`` if given)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    diag = Diagnosis()
    names = {id(m): n or type(m).__name__ for n, m in model.named_modules()}
    stack: list[str] = []
    handles = []

    def add(name, stats):
        call = Call(name, len(diag.calls), stats)
        diag.calls.append(call)
        if on_call is not None:
            on_call(call)

    def enter(mod, args):
        stack.append(names.get(id(mod), type(mod).__name__))

    def leave(mod, args, out):
        stack.pop()

    for m in model.modules():
        handles.append(m.register_forward_pre_hook(enter))
        handles.append(m.register_forward_hook(leave))
        if isinstance(m, nn.MultiheadAttention):
            handles.append(m.register_forward_pre_hook(_torch_mha_hook(add, names),
                                                       with_kwargs=True))

    def route(q, k, v, options):
        name = stack[-1] if stack else "attention"
        if q.dim() != 4 or k.dim() != 4:
            diag.skipped.append((name, f"q of shape {tuple(q.shape)}: the statistics take "
                                       "(B, H, N, D)"))
        elif options["score_mod"] is not None:
            diag.skipped.append((name, "a score_mod changes the scores after the scale"))
        else:
            add(name, head_health(q, k, **_options_for_stats(q, k, options)))
        return attention(q, k, v, **options)

    from attnlab.integrations import transformers as hf
    try:
        with hf.recorded(model), dispatch_to(route):
            yield diag
    finally:
        for h in handles:
            h.remove()


def _torch_mha_hook(add, names):
    def pre(mod: nn.MultiheadAttention, args, kwargs):
        query = args[0] if args else kwargs["query"]
        key = args[1] if len(args) > 1 else kwargs.get("key", query)
        if not mod.batch_first and query.dim() == 3:
            query, key = query.transpose(0, 1), key.transpose(0, 1)
        if query.dim() == 2:
            query, key = query.unsqueeze(0), key.unsqueeze(0)
        e, h = mod.embed_dim, mod.num_heads
        with torch.no_grad():
            if mod._qkv_same_embed_dim:
                w_q, w_k = mod.in_proj_weight[:e], mod.in_proj_weight[e:2 * e]
            else:
                w_q, w_k = mod.q_proj_weight, mod.k_proj_weight
            b = mod.in_proj_bias
            q = F.linear(query, w_q, None if b is None else b[:e])
            k = F.linear(key, w_k, None if b is None else b[e:2 * e])
            bsz, n_q, n_k = q.shape[0], q.shape[1], k.shape[1]
            q = q.view(bsz, n_q, h, e // h).transpose(1, 2)
            k = k.view(bsz, n_k, h, e // h).transpose(1, 2)
            kpm = kwargs.get("key_padding_mask", args[3] if len(args) > 3 else None)
            mask = None
            if kpm is not None:
                mask = ~kpm.bool()[:, None, None, :] if kpm.dtype == torch.bool else \
                    kpm[:, None, None, :].float()
            causal = bool(kwargs.get("is_causal", False))
            add(names.get(id(mod), "MultiheadAttention"),
                head_health(q, k, mask=mask, causal=causal, scale=1 / math.sqrt(e // h)))
        return None
    return pre
