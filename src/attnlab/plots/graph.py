"""Figures of a fitted :class:`~attnlab.models.graph.GATClassifier`: the graph with edges drawn
by attention, and the node-by-node attention matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.plots._figure import figure
from attnlab.plots.heatmap import draw_heatmap, save_heatmap

PALETTE = ["#2f6db3", "#e0812b", "#3a9d5d", "#c23b3b", "#8a5fbf"]


def draw_graph(clf, ax, train_mask=None, title: str | None = None):
    """The graph into ``ax``, edge width by layer-1 attention (mean over heads and both
    directions), nodes coloured by predicted class, training nodes outlined."""
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
    return ax


def save_graph(clf, path, train_mask=None, title: str | None = None) -> Path:
    """:func:`draw_graph` written to ``path``."""
    with figure(path, figsize=(8, 6.5)) as fig:
        draw_graph(clf, fig.add_subplot(), train_mask, title)
    return Path(path)


def draw_attention_matrix(clf, ax, title: str | None = None):
    """Layer-1 attention into ``ax``, target nodes (rows) by source nodes (columns); non-edges
    hatched."""
    m = clf.attention_matrix(1)
    m = np.where(m > 0, m, -np.inf)                    # non-edges drawn as masked
    names = clf.graph_.names
    return draw_heatmap(m, ax, title=title or "GAT layer-1 attention (mean over heads)",
                        row_labels=names, col_labels=names, xlabel="source node j",
                        ylabel="target node i", colorbar_label="α_ij", annotate=False)


def save_attention_matrix(clf, path, title: str | None = None) -> Path:
    """:func:`draw_attention_matrix` written to ``path``."""
    n = clf.graph_.num_nodes
    return save_heatmap(np.zeros((n, n)), path,
                        figsize=(min(13.0, 0.25 * n + 3.5), min(12.0, 0.25 * n + 2.5)),
                        draw=lambda m, ax: draw_attention_matrix(clf, ax, title))


