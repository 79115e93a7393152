"""The karate-club study: a two-layer GAT against harmonic label propagation and a spectral
baseline when only a few members per faction are labelled (the numbers of docs/applied.md).

Both baselines assume homophily: that linked members tend to share a label. Label propagation
averages labels along edges; the spectral baseline places members by the smoothest
eigenvectors of the normalised Laplacian, which change little across an edge."""

from __future__ import annotations

import numpy as np

from attnlab.models.graph import GATClassifier
from attnlab.models.graph.data import Graph, karate


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


def spectral(graph: Graph, train_mask, k: int = 4) -> np.ndarray:
    """Baseline: the ``k`` eigenvectors of the normalised Laplacian
    ``I - D^-1/2 A D^-1/2`` with the smallest eigenvalues after the first (a spectral embedding,
    Belkin & Niyogi 2003; networkx builds the matrix) as node features, and scikit-learn's
    logistic regression fitted on the labelled nodes. Returns a label per node."""
    import networkx as nx
    from sklearn.linear_model import LogisticRegression

    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from((int(s), int(d)) for s, d in graph.edge_index.T if int(s) != int(d))
    lap = nx.normalized_laplacian_matrix(g, nodelist=range(graph.num_nodes)).toarray()
    _, vecs = np.linalg.eigh(lap)
    feats = vecs[:, 1:k + 1]
    mask = np.asarray(train_mask, dtype=bool)
    y = np.asarray(graph.y, dtype=object)
    clf = LogisticRegression(max_iter=1000).fit(feats[mask], y[mask].astype(str))
    return np.asarray(clf.predict(feats), dtype=object)


def karate_study(n_seeds: int = 20, per_class: int = 2, **params) -> dict:
    """Accuracy on the unlabelled karate-club members over ``n_seeds`` random choices of
    ``per_class`` labelled members per faction: GAT against label propagation and the spectral
    baseline."""
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
        sp = float(np.mean(spectral(g, mask)[test] == y[test].astype(str)))
        rows.append({"seed": seed, "train_nodes": np.flatnonzero(mask).tolist(), "gat": gat,
                     "label_propagation": lp, "spectral": sp})
    gat = np.array([r["gat"] for r in rows])
    lp = np.array([r["label_propagation"] for r in rows])
    sp = np.array([r["spectral"] for r in rows])
    return {"rows": rows, "per_class": per_class,
            "gat_mean": float(gat.mean()), "gat_std": float(gat.std()),
            "lp_mean": float(lp.mean()), "lp_std": float(lp.std()),
            "spectral_mean": float(sp.mean()), "spectral_std": float(sp.std()),
            "gat_wins": int((gat > lp).sum()), "ties": int((gat == lp).sum()),
            "gat_wins_spectral": int((gat > sp).sum())}


def holdout_study(graph: Graph, labelled, folds: int = 5, seed: int = 0, **params) -> dict:
    """A held-out estimate for a user's graph: the labelled nodes in ``folds`` folds; each
    fold is predicted from the others by the GAT, by label propagation and by the majority
    class of the training labels."""
    y = np.asarray(graph.y, dtype=object)
    idx = np.flatnonzero(np.asarray(labelled))
    folds = min(folds, len(idx))
    if folds < 3:
        return {"folds": 0, "note": f"{len(idx)} labelled nodes are too few for a held-out "
                "estimate (3 or more are needed)"}
    rng = np.random.default_rng(seed)
    order = rng.permutation(idx)
    scores = {"gat": [], "label_propagation": [], "majority": []}
    for k in range(folds):
        test = order[k::folds]
        train = np.zeros(graph.num_nodes, dtype=bool)
        train[np.setdiff1d(idx, test)] = True
        if len(set(y[train])) < 2:
            continue                                  # a fold left one class: nothing to learn
        clf = GATClassifier(seed=seed + k, **params).fit(graph, train)
        scores["gat"].append(float(np.mean(clf.predict()[test] == y[test])))
        scores["label_propagation"].append(
            float(np.mean(label_propagation(graph, train)[test] == y[test])))
        values, counts = np.unique(y[train].astype(str), return_counts=True)
        scores["majority"].append(float(np.mean(y[test].astype(str) == values[counts.argmax()])))
    if not scores["gat"]:
        return {"folds": 0, "note": "every fold left one class in training: label more nodes "
                "of each class for a held-out estimate"}
    return {"folds": len(scores["gat"]), **{f"{k}_mean": float(np.mean(v)) for k, v in
                                             scores.items()},
            **{f"{k}_std": float(np.std(v)) for k, v in scores.items()}}
