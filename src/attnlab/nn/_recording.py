"""Where attnlab modules report attention maps while :func:`attnlab.inspect.record` is active.

A context variable, not a patch: modules check it and, when a recorder listens, ask the core for
weights (the typed ``AttentionOutput``) and hand them over.
"""

from __future__ import annotations

from contextvars import ContextVar

import torch

_RECORDERS: ContextVar[tuple] = ContextVar("attnlab_recorders", default=())


def listening() -> bool:
    return bool(_RECORDERS.get())


def report(module: torch.nn.Module, weights: torch.Tensor, vectors=None) -> None:
    """``weights (B, H, N_q, N_k)`` from ``module`` to every active recorder, with the vectors
    they came from when known: ``vectors = (q, k, v, scale)``, q ``(B, H, N_q, D)``, k and v
    ``(B, H, N_k, D)`` as they entered the softmax's scores (after rotary positions, K/V
    repeated per query head) and ``scale`` the factor on ``q . k`` (temperature folded in)."""
    for rec in _RECORDERS.get():
        rec.add(module, weights, vectors)


def push(recorder) -> object:
    return _RECORDERS.set(_RECORDERS.get() + (recorder,))


def pop(token) -> None:
    _RECORDERS.reset(token)
