"""Figures of a fitted :class:`~attnlab.models.graph.GATClassifier`: the graph with edges drawn
by attention, and the node-by-node attention matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.plots._figure import figure
from attnlab.plots.heatmap import heatmap

PALETTE = ["#2f6db3", "#e0812b", "#3a9d5d", "#c23b3b", "#8a5fbf"]


def plot_graph(clf, path, train_mask=None, title: str | None = None) -> Path:
    """The graph with edge width by layer-1 attention (mean over heads and both directions),
    nodes coloured by predicted class, training nodes outlined."""
    import networkx as nx

    g = clf.graph_
    att = clf.attention_matrix(1)
    G = nx.Graph()
    G.add_nodes_from(range(g.num_nodes))
    und = {}
    for s, d in g.edge_index.T.tolist():
        if s != d:
            key = (min(s, d), max(s, d))
            und[key] = max(und.get(key, 0.0), (att[d, s] + att[s, d]) / 2)
    G.add_edges_from(und)
    pos = nx.spring_layout(G, seed=0)
    pred = clf.predict()
    colors = [PALETTE[list(clf.classes_).index(p) % len(PALETTE)] for p in pred]
    top = max(und.values(), default=1.0) or 1.0
    widths = [0.4 + 5.0 * und[e] / top for e in G.edges]       # widest edge = largest α
    with figure(path, figsize=(8, 6.5)) as fig:
        ax = fig.add_subplot()
        nx.draw_networkx_edges(G, pos, width=widths, edge_color="#555555", alpha=0.7, ax=ax)
        edge = ["black" if train_mask is not None and train_mask[i] else "white"
                for i in range(g.num_nodes)]
        nx.draw_networkx_nodes(G, pos, node_color=colors, edgecolors=edge, linewidths=2.5,
                               node_size=320, ax=ax)
        nx.draw_networkx_labels(G, pos, {i: g.names[i] for i in range(g.num_nodes)},
                                font_size=7, font_color="white", ax=ax)
        for c, col in zip(clf.classes_, PALETTE):
            ax.scatter([], [], color=col, label=f"predicted: {c}")
        if train_mask is not None:
            ax.scatter([], [], facecolor="white", edgecolor="black", linewidth=2,
                       label="labelled (training)")
        ax.legend(loc="lower left", fontsize=8)
        ax.set_title(title or "GAT: edge width = attention α (layer 1, mean over heads, "
                     "scaled to the largest)")
        ax.axis("off")
    return Path(path)


def plot_attention_matrix(clf, path, title: str | None = None) -> Path:
    """Layer-1 attention, target nodes (rows) by source nodes (columns); non-edges hatched."""
    m = clf.attention_matrix(1)
    m = np.where(m > 0, m, -np.inf)                    # non-edges drawn as masked
    n = len(m)
    names = clf.graph_.names
    return heatmap(m, path, title=title or "GAT layer-1 attention (mean over heads)",
                   row_labels=names, col_labels=names, xlabel="source node j",
                   ylabel="target node i", colorbar_label="α_ij", annotate=False,
                   figsize=(min(13.0, 0.25 * n + 3.5), min(12.0, 0.25 * n + 2.5)))
