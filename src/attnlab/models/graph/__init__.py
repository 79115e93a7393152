"""Graphs: node classification with graph attention (GAT).

* ``data``: :class:`Graph` and its readers (networkx, data frames, CSV), the karate club;
* ``estimator``: :class:`GATClassifier`;
* ``study``: label propagation and spectral baselines, the karate-club and hold-out studies.
"""

from attnlab.models.graph.data import (
    Graph,
    GraphInputError,
    from_csv,
    from_frames,
    from_networkx,
    karate,
)
from attnlab.models.graph.estimator import GATClassifier

__all__ = ["GATClassifier", "Graph", "GraphInputError", "from_csv", "from_frames",
           "from_networkx", "karate"]
