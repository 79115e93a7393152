"""Every figure attnlab draws, and the only package that imports matplotlib.

Figures are drawn on a ``matplotlib.figure.Figure`` with its own Agg canvas through
:func:`figure` (layout, atomic save, release): the user's matplotlib backend and global
settings are never touched, so importing attnlab in a notebook leaves its figures showing.

Modules: :mod:`~attnlab.plots.heatmap` (any matrix), :mod:`~attnlab.plots.inspect`,
:mod:`~attnlab.plots.explain`, :mod:`~attnlab.plots.forecast`, :mod:`~attnlab.plots.tabular`,
:mod:`~attnlab.plots.graph`, :mod:`~attnlab.plots.seq2seq`, :mod:`~attnlab.plots.bench`.
"""

from attnlab.plots._figure import figure, save_figure
from attnlab.plots.heatmap import heatmap

__all__ = ["figure", "heatmap", "save_figure"]
