"""Capture, measure and show the attention of real models.

* :func:`show`: one call from a model (or maps you have) to the interactive report, which
  renders inline in a notebook and saves as a standalone file; :func:`build` makes the same
  report's contents from a model's name or folder without displaying them;
* :func:`record`: the maps (and the vectors behind them) of every attention call of a model;
* :func:`census`: every head's statistics at every position without the maps (long context).
"""

from attnlab.inspect.capture import Recording, record
from attnlab.inspect.census import Census, census
from attnlab.inspect.importance import HeadImportance, head_gradients
from attnlab.inspect.run import Inspection
from attnlab.inspect.show import ShowOptions, build, from_attentions, show

__all__ = ["Census", "HeadImportance", "Inspection", "Recording", "ShowOptions", "build",
           "census", "from_attentions", "head_gradients", "record", "show"]
