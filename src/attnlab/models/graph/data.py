"""Graph input for the graph-attention models: :class:`Graph` (features, edges, labels), built
from networkx, from pandas DataFrames or CSV files, or the bundled karate club."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch


class GraphInputError(ValueError):
    """A problem in one of the graph's inputs; ``source`` is ``"edges"``, ``"features"`` or
    ``"labels"`` (the argument of :func:`from_frames` / :func:`from_csv`)."""

    def __init__(self, source: str, message: str):
        super().__init__(message)
        self.source = source


@dataclass
class Graph:
    """Nodes with features ``x (N, F)``, edges ``edge_index (2, E)`` (source, target), labels
    ``y`` (one per node; ``None`` where unknown) and node names."""

    x: torch.Tensor
    edge_index: torch.Tensor
    y: list
    names: list[str] = field(default_factory=list)

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self.x.shape[0]


def from_networkx(g, label: str | None = None, features: str | None = None) -> Graph:
    """A networkx graph -> :class:`Graph`. Undirected edges become two directed ones. Node
    features from the attribute ``features`` (a sequence per node) or, without it, one-hot node
    ids (the usual choice for featureless graphs); labels from the attribute ``label``."""
    nodes = list(g.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    pairs = [(index[u], index[v]) for u, v in g.edges]
    if not g.is_directed():
        pairs += [(v, u) for u, v in pairs]
    ei = torch.tensor(pairs, dtype=torch.long).T if pairs else torch.zeros(2, 0, dtype=torch.long)
    if features is None:
        x = torch.eye(len(nodes))
    else:
        x = torch.tensor([list(g.nodes[n][features]) for n in nodes], dtype=torch.float32)
    y = [g.nodes[n].get(label) for n in nodes] if label else [None] * len(nodes)
    return Graph(x, ei, y, [str(n) for n in nodes])


def karate() -> Graph:
    """Zachary's karate club (34 members, 78 friendships; networkx), labelled by the faction
    each member joined after the split ("Mr. Hi" or "Officer")."""
    import networkx as nx

    return from_networkx(nx.karate_club_graph(), label="club")


def _check_typos(ends: list[str]) -> None:
    """Without a node file the edge list defines the nodes, so a misspelt id would silently be
    a new node: refuse a node named once whose id differs from another's only in case or
    spaces, or (ids of 4+ letters) by one edit."""
    import difflib
    from collections import Counter

    count = Counter(ends)
    norm: dict[str, str] = {}
    for n in count:
        key = " ".join(n.split()).casefold()
        if key in norm and norm[key] != n:
            rare, other = sorted((n, norm[key]), key=lambda m: count[m])
            raise GraphInputError("edges", f"nodes {rare!r} and {other!r} differ only in case or "
                                  "spaces; write one id for one node")
        norm[key] = n
    words = [n for n in count if len(n) >= 4 and not n.replace(".", "").isdigit()]
    for n in words:
        if count[n] == 1:
            close = difflib.get_close_matches(n, [m for m in words if m != n and count[m] > 1],
                                              n=1, cutoff=0.8)
            if close and _one_edit(n, close[0]):
                raise GraphInputError("edges", f"node {n!r} appears in one edge only and is one "
                                      f"letter from {close[0]!r} (a typo?); fix the id, or give "
                                      "a node file (features) that lists every node")


def _one_edit(a: str, b: str) -> bool:
    """Levenshtein distance at most 1, or one swap of neighbouring letters."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) <= 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def from_frames(edges, features=None, labels=None) -> Graph:
    """A :class:`Graph` from DataFrames: ``edges`` (first two columns: source, target),
    optional ``features`` (first column: node id, the rest numeric features) and ``labels``
    (node id, label; empty cells = unknown). Without features, the nodes are those of the edge
    list with one-hot features. Node ids are compared as strings.

    Raises:
        GraphInputError: naming the argument (``source``) and what is wrong in it.
    """
    import pandas as pd

    if edges.shape[1] < 2:
        raise GraphInputError("edges", "the edge list needs two columns (source, target), got "
                              f"{list(edges.columns)}")
    if edges.shape[1] > 2:
        extra = ", ".join(map(repr, map(str, edges.columns[2:])))
        raise GraphInputError("edges", f"the edge list has extra column(s) {extra}: the GAT "
                              "learns its own weight for every edge and reads no edge "
                              "attribute; drop the column(s)")
    src = edges.iloc[:, 0].astype(str).tolist()
    dst = edges.iloc[:, 1].astype(str).tolist()
    if features is not None:
        names = features.iloc[:, 0].astype(str).tolist()
        if len(set(names)) != len(names):
            raise GraphInputError("features", "node ids in the first column of the node "
                                  "features must be unique")
        try:
            x = torch.tensor(features.iloc[:, 1:].to_numpy(dtype=float), dtype=torch.float32)
        except ValueError as err:
            raise GraphInputError("features", f"feature columns must be numeric ({err})"
                                  ) from None
        if x.shape[1] == 0 or not torch.isfinite(x).all():
            raise GraphInputError("features", "need at least one numeric feature column with "
                                  "no empty cells")
    else:
        names = list(dict.fromkeys(src + dst))
        x = torch.eye(len(names))
    index = {n: i for i, n in enumerate(names)}
    unknown = [n for n in src + dst if n not in index]
    if unknown:
        raise GraphInputError("edges", f"the edge list refers to node {unknown[0]!r}, which is "
                              f"not among the {len(names)} nodes of the features; add it there "
                              "or drop the edge")
    ei = torch.tensor([[index[s] for s in src], [index[d] for d in dst]], dtype=torch.long)
    y = [None] * len(names)
    if features is None:
        _check_typos(src + dst)
    if labels is not None:
        for node, value in zip(labels.iloc[:, 0].astype(str), labels.iloc[:, 1]):
            if node not in index:
                raise GraphInputError("labels", f"the labels name node {node!r}, which is not "
                                      "in the graph")
            y[index[node]] = None if pd.isna(value) else str(value)
    return Graph(x, ei, y, names)


def from_csv(edges: str | Path, features: str | Path | None = None,
             labels: str | Path | None = None) -> Graph:
    """:func:`from_frames` on CSV files (each with a header row)."""
    import pandas as pd

    frames = {}
    for name, path in (("edges", edges), ("features", features), ("labels", labels)):
        if path is None:
            frames[name] = None
            continue
        try:
            frames[name] = pd.read_csv(path)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError,
                UnicodeDecodeError) as err:
            raise GraphInputError(name, f"{name}={str(path)!r} is not a readable CSV ({err})"
                                  ) from None
    return from_frames(frames["edges"], frames["features"], frames["labels"])
