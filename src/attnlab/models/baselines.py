"""Moved to :mod:`attnlab.models.forecast.baselines`; this path warns and is removed in 0.2.0."""

from attnlab.models._moved import forward

__getattr__ = forward(__name__, "attnlab.models.forecast.baselines",
                      "attnlab.models.tabular.baselines")
