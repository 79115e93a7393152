"""Where attnlab modules report attention maps while :func:`attnlab.inspect.record` is active.

A context variable, not a patch: modules check it and, when a recorder listens, ask the core for
weights (the typed ``AttentionOutput``) and hand them over.
"""

from __future__ import annotations

from contextvars import ContextVar

import torch

_RECORDERS: ContextVar[tuple] = ContextVar("attnlab_recorders", default=())


def listening() -> bool:
    """Whether a recorder (:func:`attnlab.inspect.record`) listens in this context."""
    return bool(_RECORDERS.get())


def report(module: torch.nn.Module, weights: torch.Tensor, vectors=None) -> None:
    """``weights (B, H, N_q, N_k)`` from ``module`` to every active recorder, with the vectors
    they came from when known: ``vectors = (q, k, v, scale)``, q ``(B, H, N_q, D)``, k and v
    ``(B, H, N_k, D)`` as they entered the softmax's scores (after rotary positions, K/V
    repeated per query head) and ``scale`` the factor on ``q . k`` (temperature folded in)."""
    for rec in _RECORDERS.get():
        rec.add(module, weights, vectors)


def push(recorder) -> object:
    """Add ``recorder`` (its ``add(module, weights, vectors)`` is called for every attention
    call); returns the token :func:`pop` takes."""
    return _RECORDERS.set(_RECORDERS.get() + (recorder,))


def pop(token) -> None:
    """Remove the recorder :func:`push` added."""
    _RECORDERS.reset(token)


# The census (attnlab.inspect.census) listens here: attention calls hand over what the
# statistics need (q and k as they enter the scores, and the call's masks and options).
_CENSUS: ContextVar[object | None] = ContextVar("attnlab_census", default=None)


def census() -> object | None:
    """The active census collector, or None."""
    return _CENSUS.get()


def push_census(collector) -> object:
    """Make ``collector`` the active census collector; returns the token for
    :func:`pop_census`."""
    return _CENSUS.set(collector)


def pop_census(token) -> None:
    """Restore the census collector that was active before :func:`push_census`."""
    _CENSUS.reset(token)
