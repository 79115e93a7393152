"""How much of the network's correction a forecaster keeps: the weight ``w`` in [0, 1] of
``base + w * correction``, chosen on held-out windows the training never saw and shrunk by its
sampling error, so that a correction that does not beat the base beyond chance is dropped."""

from __future__ import annotations

import torch


def correction_weight(out: torch.Tensor, target: torch.Tensor, horizon: int) -> float:
    """``w`` for the network's outputs ``out`` and the targets ``target`` (both ``(windows,
    H)``, the change from the base in the same units): the least-squares value, clipped to
    [0, 1], times :func:`significance`."""
    den = float((out * out).sum())
    w = min(1.0, max(0.0, float((out * target).sum()) / den)) if den > 0 else 0.0
    return w * significance(out, target, w, horizon) if w > 0 else 0.0


def significance(out: torch.Tensor, target: torch.Tensor, w: float, horizon: int) -> float:
    """The factor ``max(0, 1 - se^2 / w^2)`` that shrinks the least-squares ``w`` by its
    sampling error (positive-part James-Stein on one coefficient: a ``w`` one standard error
    from 0 becomes 0, one ten errors away keeps 99% of itself). ``se`` is the sandwich error
    over the windows, times the ``horizon`` consecutive windows that share targets (their
    errors are not independent); 0 with fewer than two windows."""
    a = (out * target).sum(1)
    b = (out * out).sum(1)
    k = len(a)
    if k < 2 or w <= 0:
        return 0.0
    var = float(((a - w * b) ** 2).sum()) / float(b.sum()) ** 2 * min(horizon, k)
    return max(0.0, 1.0 - var / (w * w))


def gain_significance(out: torch.Tensor, target: torch.Tensor, w: float,
                      groups: torch.Tensor) -> float:
    """The same factor ``max(0, 1 - 1 / z^2)`` for a ``w`` chosen by absolute error: ``z`` is
    the mean gain in absolute error of ``base + w * correction`` over the base alone, divided
    by its standard error. Windows of one series (equal ``groups``) count as one observation
    (their mean), since they share the series' errors; 0 with fewer than two series or no
    gain."""
    if w <= 0:
        return 0.0
    gain = (target.abs() - (target - w * out).abs()).mean(1)             # (windows,)
    series, inverse = torch.unique(groups, return_inverse=True)
    n = len(series)
    if n < 2:
        return 0.0
    per = torch.zeros(n, dtype=gain.dtype).index_add_(0, inverse, gain)
    per = per / torch.bincount(inverse, minlength=n).to(gain.dtype)
    mean, sd = float(per.mean()), float(per.std())
    if mean <= 0:
        return 0.0
    if sd == 0:
        return 1.0
    z2 = mean * mean / (sd * sd / n)
    return max(0.0, 1.0 - 1.0 / z2)
