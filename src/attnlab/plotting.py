"""Deprecated: the figures moved to :mod:`attnlab.plots` (``heatmap``, ``save_figure``)."""

import warnings

from attnlab.plots import heatmap, save_figure

warnings.warn("attnlab.plotting is deprecated; import heatmap and save_figure from "
              "attnlab.plots", DeprecationWarning, stacklevel=2)

__all__ = ["heatmap", "save_figure"]
