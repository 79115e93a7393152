"""Every step of attention on real numbers, checked against the code: numbers and checks, no
printing (``attnlab explain`` prints them, :mod:`attnlab.plots.explain` draws them).

* :func:`walk` / :func:`example`: one attention call on a small example or given Q, K, V;
* :func:`model_walk` / :func:`heads_walk`: a real head, and a real multi-head layer, of a
  BERT model (the embedded all-MiniLM-L6-v2 by default);
* :func:`additive_walk`: additive (Bahdanau) scoring on the same Q and K.
"""

from attnlab.explain.additive import AdditiveWalk, additive_walk
from attnlab.explain.model import HeadsWalk, heads_walk, model_walk
from attnlab.explain.walk import Check, Walkthrough, example, unscaled_note, walk

__all__ = ["AdditiveWalk", "Check", "HeadsWalk", "Walkthrough", "additive_walk", "example",
           "heads_walk", "model_walk", "unscaled_note", "walk"]
