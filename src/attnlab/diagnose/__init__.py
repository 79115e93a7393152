"""Attention health: score scale, saturation, entropy, softmax gradient, sinks
(docs/diagnostics.md).

* :func:`head_health`: the statistics of one call from q and k, block by block.
* :func:`diagnose`: run a model once and get every attention call's statistics.
* :func:`watch`: the same as a context manager around any forward.
* :class:`AttentionMonitor`: every k training steps, with named alarms and remedies.
"""

from __future__ import annotations

import torch

from attnlab.diagnose.monitor import (
    AT_INFERENCE,
    REMEDIES,
    THRESHOLDS,
    Alarm,
    AttentionMonitor,
    score_alarms,
)
from attnlab.diagnose.stats import HeadStats, head_health
from attnlab.diagnose.watch import Diagnosis, watch


def diagnose(model: torch.nn.Module, *args, **kwargs) -> Diagnosis:
    """``model(*args, **kwargs)`` once without gradients; the statistics of every attention
    call it made. Raises RuntimeError if it made none that attnlab can see."""
    with torch.no_grad(), watch(model) as diag:
        model(*args, **kwargs)
    if not diag.calls:
        why = "; ".join(f"{n}: {r}" for n, r in diag.skipped[:3])
        raise RuntimeError(f"{type(model).__name__} made no attention call attnlab can measure"
                           + (f" ({why})" if why else ": use attnlab modules, "
                              "torch.nn.MultiheadAttention or a transformers model"))
    return diag


__all__ = ["AT_INFERENCE", "Alarm", "AttentionMonitor", "Diagnosis", "HeadStats", "REMEDIES",
           "THRESHOLDS", "head_health", "diagnose", "score_alarms", "watch"]
