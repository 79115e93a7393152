"""Every figure attnlab draws, and the only package that imports matplotlib.

One convention, as scikit-learn's Display objects: every figure is a pair

* ``draw_<what>(obj, ax, ...) -> Axes`` draws into a caller's Axes (or ``axes``, a sequence,
  for a figure of several panels): a subplot of your own figure, a notebook's inline figure;
* ``save_<what>(obj, path, ...) -> Path`` makes a figure of its own, draws it and writes it
  atomically to ``path`` (or to several paths, one per format).

Saved figures live on a ``matplotlib.figure.Figure`` with its own Agg canvas (:func:`figure`:
layout, atomic save, release): the user's matplotlib backend and global settings are never
touched, so importing attnlab in a notebook leaves its figures showing.

Modules: :mod:`~attnlab.plots.heatmap` (any matrix), :mod:`~attnlab.plots.inspect`,
:mod:`~attnlab.plots.explain`, :mod:`~attnlab.plots.forecast`, :mod:`~attnlab.plots.tabular`,
:mod:`~attnlab.plots.graph`, :mod:`~attnlab.plots.seq2seq`, :mod:`~attnlab.plots.bench`,
:mod:`~attnlab.plots.diagnose`, :mod:`~attnlab.plots.distributed`, :mod:`~attnlab.plots.kernels`.
"""

from attnlab.plots._figure import figure, save_figure
from attnlab.plots.heatmap import draw_heatmap, save_heatmap

__all__ = ["draw_heatmap", "figure", "save_figure", "save_heatmap"]
