"""Moved to :mod:`attnlab.models.graph.data`; this path warns and is removed in 0.2.0."""

from attnlab.models._moved import forward

__getattr__ = forward(__name__, "attnlab.models.graph.data")
