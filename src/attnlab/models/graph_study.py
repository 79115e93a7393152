"""The karate-club study: a two-layer GAT against harmonic label propagation when only a few
members per faction are labelled (the numbers of docs/applied.md)."""

from __future__ import annotations

import numpy as np

from attnlab.models.graph import GATClassifier
from attnlab.models.graph_data import Graph, karate


def label_propagation(graph: Graph, train_mask) -> np.ndarray:
    """Baseline: harmonic-function label propagation on the graph (Zhu, Ghahramani & Lafferty
    2003; networkx ``node_classification.harmonic_function``) from the labels of
    ``train_mask``. Returns a label per node."""
    import networkx as nx
    from networkx.algorithms import node_classification

    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from((int(s), int(d)) for s, d in graph.edge_index.T if int(s) != int(d))
    for i in np.flatnonzero(np.asarray(train_mask)):
        g.nodes[int(i)]["label"] = str(graph.y[i])
    return np.asarray(node_classification.harmonic_function(g, label_name="label"), dtype=object)


def karate_study(n_seeds: int = 20, per_class: int = 2, **params) -> dict:
    """Accuracy on the unlabelled karate-club members over ``n_seeds`` random choices of
    ``per_class`` labelled members per faction: GAT against label propagation."""
    g = karate()
    y = np.asarray(g.y, dtype=object)
    rows = []
    for seed in range(n_seeds):
        rng = np.random.default_rng(seed)
        mask = np.zeros(g.num_nodes, dtype=bool)
        for c in sorted(set(y)):
            mask[rng.choice(np.flatnonzero(y == c), per_class, replace=False)] = True
        clf = GATClassifier(seed=seed, **params).fit(g, mask)
        test = ~mask
        gat = float(np.mean(clf.predict()[test] == y[test]))
        lp = float(np.mean(label_propagation(g, mask)[test] == y[test]))
        rows.append({"seed": seed, "train_nodes": np.flatnonzero(mask).tolist(), "gat": gat,
                     "label_propagation": lp})
    gat = np.array([r["gat"] for r in rows])
    lp = np.array([r["label_propagation"] for r in rows])
    return {"rows": rows, "gat_mean": float(gat.mean()), "gat_std": float(gat.std()),
            "lp_mean": float(lp.mean()), "lp_std": float(lp.std()),
            "gat_wins": int((gat > lp).sum()), "ties": int((gat == lp).sum())}
