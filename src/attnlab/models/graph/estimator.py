"""Node classification with graph attention: :class:`GATClassifier`. Graph input is in
:mod:`~attnlab.models.graph.data`, the karate-club study in :mod:`~attnlab.models.graph.study`,
the figures in :mod:`attnlab.plots.graph`.

The classifier is the two-layer GAT of Veličković et al. (2018) for transductive node
classification: ``GATConv(heads=8, concat) -> ELU -> GATConv(1 head) -> softmax``, dropout on
features and attention coefficients, trained full-batch on the labelled nodes (``train_mask``)
with the shared training loop (early stopping only when a ``val_mask`` is given).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from attnlab.models import io
from attnlab.models._params import FRACTION, POSITIVE_INT, TRAINING
from attnlab.models.graph.data import Graph, karate  # noqa: F401  (karate: the doctest's)
from attnlab.models.latex import Equations
from attnlab.models.training import (
    TrainConfig,
    TrainHistory,
    resolve_device,
    seeded,
    train,
)
from attnlab.nn.graph import GATConv, check_edge_index


class _GAT(nn.Module):
    def __init__(self, n_in, hidden, heads, n_out, dropout):
        super().__init__()
        self.dropout = dropout
        self.conv1 = GATConv(n_in, hidden, heads=heads, dropout=dropout)
        self.conv2 = GATConv(hidden * heads, n_out, heads=1, concat=False, dropout=dropout)

    def forward(self, x, edge_index, return_weights: bool = False):
        x = F.dropout(x, self.dropout, self.training)
        x, a1 = self.conv1(x, edge_index, return_attention_weights=True)
        x = F.dropout(F.elu(x), self.dropout, self.training)
        x, a2 = self.conv2(x, edge_index, return_attention_weights=True)
        return (x, a1, a2) if return_weights else x


class GATClassifier(io.SavedEstimator, BaseEstimator):
    """Two-layer GAT for transductive node classification (``BaseEstimator`` gives it
    ``get_params`` / ``set_params``; ``fit`` takes a graph and a mask, not scikit-learn's X, y).

    Args:
        hidden, heads: first layer's size per head and number of heads (8 x 8 in the paper).
        dropout: on input features, hidden features and attention coefficients.
        lr, weight_decay, max_epochs, patience, seed, device, verbose: the training loop.

    Example:
        >>> g = karate()
        >>> mask = torch.zeros(34, dtype=torch.bool); mask[[0, 1, 32, 33]] = True
        >>> clf = GATClassifier(max_epochs=50).fit(g, mask)
        >>> clf.predict().shape
        (34,)
    """

    _parameter_constraints: dict = {
        "hidden": POSITIVE_INT, "heads": POSITIVE_INT, "dropout": FRACTION,
        **{k: v for k, v in TRAINING.items() if k not in ("batch_size", "clip_norm")}}

    def __init__(self, hidden: int = 8, *, heads: int = 8, dropout: float = 0.6, lr: float = 0.005,
                 weight_decay: float = 5e-4, max_epochs: int = 200, patience: int = 100,
                 seed: int = 0, device: str = "auto", verbose: bool = False):
        self.hidden, self.heads, self.dropout = hidden, heads, dropout
        self.lr, self.weight_decay = lr, weight_decay
        self.max_epochs, self.patience = max_epochs, patience
        self.seed, self.device, self.verbose = seed, device, verbose

    def fit(self, graph: Graph, train_mask, val_mask=None) -> "GATClassifier":
        """Fit on the nodes of ``train_mask`` (bool, one per node) that have labels."""
        self._validate_params()
        if not isinstance(graph, Graph):
            raise TypeError(f"graph must be an attnlab.models.Graph (from_networkx, from_frames, "
                            f"from_csv or karate()), got {type(graph).__name__}")
        n = graph.num_nodes
        check_edge_index(graph.edge_index, n)
        train_mask = self._mask(train_mask, n, "train_mask")
        labelled = np.array([v is not None for v in graph.y])
        if (train_mask & ~labelled).any():
            raise ValueError("train_mask selects nodes without a label; label them or drop "
                             "them from the mask")
        classes = sorted({str(graph.y[i]) for i in np.flatnonzero(train_mask)})
        if len(classes) < 2:
            raise ValueError(f"the training nodes carry {len(classes)} class(es); a classifier "
                             "needs at least 2")
        self.classes_ = np.asarray(classes, dtype=object)
        self.device_ = resolve_device(self.device)
        lookup = {c: i for i, c in enumerate(classes)}
        y = torch.tensor([lookup.get(str(v), -1) if v is not None else -1 for v in graph.y],
                         device=self.device_)
        x, ei = graph.x.float().to(self.device_), graph.edge_index.to(self.device_)

        def loss_fn(model, idx):
            return F.cross_entropy(model(x, ei)[idx], y[idx])

        tr = torch.as_tensor(np.flatnonzero(train_mask), device=self.device_)
        val = None
        if val_mask is not None:
            val_mask = self._mask(val_mask, n, "val_mask") & labelled
            unknown = [str(graph.y[i]) for i in np.flatnonzero(val_mask) if str(graph.y[i])
                       not in lookup]
            if unknown:
                raise ValueError(f"val_mask has label {unknown[0]!r} not seen in training")
            val = (torch.as_tensor(np.flatnonzero(val_mask), device=self.device_),)
        config = TrainConfig(max_epochs=self.max_epochs, batch_size=max(1, len(tr)), lr=self.lr,
                             weight_decay=self.weight_decay, patience=self.patience,
                             clip_norm=0.0, seed=self.seed, verbose=self.verbose)
        with seeded(self.seed, self.device_):
            self.net_ = self._build(x.shape[1]).to(self.device_)
            self.history_: TrainHistory = train(self.net_, loss_fn, (tr,), val, config, "GAT")
        self.graph_ = graph
        return self

    def _build(self, n_features: int) -> _GAT:
        return _GAT(n_features, self.hidden, self.heads, len(self.classes_), self.dropout)

    @staticmethod
    def _mask(mask, n: int, name: str) -> np.ndarray:
        m = np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask)
        if m.dtype != bool or m.shape != (n,):
            raise ValueError(f"{name} must be a bool array with one entry per node ({n}), got "
                             f"dtype {m.dtype} and shape {m.shape}")
        return m

    def _check_fitted(self):
        check_is_fitted(self, "net_")

    @torch.no_grad()
    def predict_proba(self, graph: Graph | None = None) -> np.ndarray:
        """Class probabilities for every node of the fitted graph (or of ``graph``)."""
        self._check_fitted()
        g = graph or self.graph_
        self.net_.eval()
        out = self.net_(g.x.float().to(self.device_), g.edge_index.to(self.device_))
        return torch.softmax(out, -1).double().cpu().numpy()

    def predict(self, graph: Graph | None = None) -> np.ndarray:
        """The predicted class of every node of the fitted graph (or of ``graph``)."""
        proba = self.predict_proba(graph)
        return self.classes_[proba.argmax(1)]

    def score(self, mask, graph: Graph | None = None) -> float:
        """Accuracy on the labelled nodes of ``mask``."""
        g = graph or self.graph_
        m = self._mask(mask, g.num_nodes, "mask") & np.array([v is not None for v in g.y])
        pred = self.predict(g)
        return float(np.mean([pred[i] == str(g.y[i]) for i in np.flatnonzero(m)]))

    @torch.no_grad()
    def attention(self, layer: int = 1) -> tuple[torch.Tensor, np.ndarray]:
        """``(edge_index (2, E'), alpha (E', heads))`` of layer 1 or 2 on the fitted graph
        (self-loops included, duplicates merged)."""
        self._check_fitted()
        self.net_.eval()
        g = self.graph_
        _, a1, a2 = self.net_(g.x.float().to(self.device_), g.edge_index.to(self.device_),
                              return_weights=True)
        edges, alpha = a1 if layer == 1 else a2
        return edges.cpu(), alpha.double().cpu().numpy()

    def attention_matrix(self, layer: int = 1) -> np.ndarray:
        """Node-by-node attention ``(N, N)``: row i = target, column j = source, mean over
        heads; rows sum to 1 over each node's neighbourhood."""
        edges, alpha = self.attention(layer)
        n = self.graph_.num_nodes
        m = np.zeros((n, n))
        m[edges[1].numpy(), edges[0].numpy()] = alpha.mean(1)
        return m

    def equations(self) -> Equations:
        """The fitted model's equations and symbol table."""
        self._check_fitted()
        F_in, H, K, C = self.graph_.x.shape[1], self.hidden, self.heads, len(self.classes_)
        lines = [
            (r"e^{(k)}_{ij}", r"\mathrm{LeakyReLU}_{0.2}\left(\mathbf{a}^{(k)\top}_{\mathrm{src}}"
             r" \mathbf{W}^{(k)} \mathbf{x}_j + \mathbf{a}^{(k)\top}_{\mathrm{dst}} "
             r"\mathbf{W}^{(k)}"
             r" \mathbf{x}_i\right), \quad \mathbf{W}^{(k)} \in \mathbb{R}^{" + f"{H} \\times "
                                                                                f"{F_in}"
             + r"}, \quad j \in \mathcal{N}(i) \cup \{i\}"),
            (r"\alpha^{(k)}_{ij}", r"\frac{\exp(e^{(k)}_{ij})}{\sum_{l \in \mathcal{N}(i) \cup "
             r"\{i\}} \exp(e^{(k)}_{il})}"),
            (r"\mathbf{h}_i", r"\Vert_{k=1}^{" + str(K) + r"} \mathrm{ELU}\left(\sum_j "
             r"\alpha^{(k)}_{ij} \mathbf{W}^{(k)} \mathbf{x}_j + \mathbf{b}^{(k)}\right) \in "
             r"\mathbb{R}^{" + str(H * K) + "}"),
            (r"\hat{\mathbf{y}}_i", r"\mathrm{softmax}\left(\sum_j \beta_{ij} \mathbf{W}' "
             r"\mathbf{h}_j + \mathbf{b}'\right) \in \mathbb{R}^{" + str(C) + r"}, \quad "
             r"\mathbf{W}' \in \mathbb{R}^{" + f"{C} \\times {H * K}" + "}"),
        ]
        where = [(r"\beta_{ij}", "the second layer's attention, computed like alpha with one "
                  "head on h"),
                 (r"\Vert", f"concatenation over the {K} heads"),
                 (r"p", f"dropout {self.dropout} on features and attention coefficients"),
                 (r"\mathbf{x}_j", "the input features of node j"),
                 (r"\mathcal{N}(i)", "the neighbours of node i in the graph"),
                 (r"\mathbf{a}^{(k)}_{\mathrm{src}}, \mathbf{a}^{(k)}_{\mathrm{dst}}",
                  "the attention vectors of head k for the source and the destination node"),
                 (r"\mathbf{b}^{(k)}, \mathbf{b}'", "bias vectors")]
        return Equations(f"GATClassifier ({K} heads x {H}, 2 layers)", lines, where)

    def to_latex(self) -> str:
        """The equations as a LaTeX align fragment."""
        return self.equations().to_latex()

    def to_markdown(self) -> str:
        """The equations as Markdown with math."""
        return self.equations().to_markdown()

    def _saved(self) -> tuple[dict, dict]:
        g = self.graph_
        tensors = {"graph.x": g.x.float(), "graph.edge_index": g.edge_index}
        state = {"classes": [str(c) for c in self.classes_],
                 "labels": [None if v is None else str(v) for v in g.y], "names": g.names}
        return state, tensors

    def _restore(self, s: dict, tensors: dict):
        self.classes_ = np.asarray(s["classes"], dtype=object)
        self.graph_ = Graph(tensors["graph.x"], tensors["graph.edge_index"], list(s["labels"]),
                            list(s["names"]))
        return lambda: self._build(self.graph_.x.shape[1])
