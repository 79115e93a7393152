"""Every step of attention on real numbers, checked against the code: numbers and checks, no
printing (``attnlab explain`` prints them, :mod:`attnlab.plots.explain` draws them).

* :func:`walk` / :func:`example` / :func:`embedded_example`: one attention call on a small
  example (token vectors X from the embedded model, projected by W_Q, W_K, W_V) or given Q, K, V;
* :func:`saturation`: the scaled and unscaled softmax where the unscaled one saturates;
* :func:`model_walk` / :func:`heads_walk`: a real head, and a real multi-head layer, of a
  BERT model (the embedded all-MiniLM-L6-v2 by default);
* :func:`additive_walk`: additive (Bahdanau) scoring on the same Q and K.
"""

from attnlab.explain.additive import AdditiveWalk, additive_walk
from attnlab.explain.model import HeadsWalk, heads_walk, model_walk
from attnlab.explain.walk import (
    Check,
    Inputs,
    Saturation,
    Walkthrough,
    embedded_example,
    example,
    inputs_for,
    random_example,
    saturation,
    softmax_jacobian_norm,
    unscaled_note,
    walk,
)

__all__ = ["AdditiveWalk", "Check", "HeadsWalk", "Inputs", "Saturation", "Walkthrough",
           "additive_walk", "embedded_example", "example", "heads_walk", "inputs_for",
           "model_walk", "random_example", "saturation", "softmax_jacobian_norm",
           "unscaled_note", "walk"]
