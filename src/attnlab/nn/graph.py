"""Graph attention: GATConv (Veličković et al. 2018, "Graph Attention Networks", eqs. 1-6) and
GATv2Conv (Brody, Alon & Yahav 2022, "How Attentive are Graph Attention Networks?").

For node i with neighbourhood N(i) (edges j -> i, including i itself when self-loops are added),
per head h::

    z_j      = W_h x_j
    e_ij     = LeakyReLU_0.2( a_src,hᵀ z_j + a_dst,hᵀ z_i )       (the paper's aᵀ[W x_i ‖ W x_j])
    α_ij     = softmax over j in N(i) of e_ij
    x'_i     = Σ_j α_ij z_j        heads concatenated, or averaged (the paper's output layer)

The softmax runs over a variable number of neighbours per node, so it is computed with scatter
operations (``scatter_reduce`` for the per-node max, ``index_add_`` for sums) on the edge list,
in plain PyTorch. A node with no incoming edge (isolated, self-loops off) gets 0 before the
bias, never NaN.

Parameter names follow PyTorch Geometric's ``GATConv`` (``lin.weight``, ``att_src``,
``att_dst``, ``bias``), so its weights load one to one (the tests check equality).

GATv2 moves the nonlinearity inside: ``e_ij = a_hᵀ LeakyReLU(W_s x_j + W_t x_i)``, so the
ranking of neighbours can depend on the query node ("dynamic" attention), which GAT's
``a_srcᵀ z_j + a_dstᵀ z_i`` cannot express.

Edge features (``edge_dim``) add ``a_edgeᵀ W_e e_ij`` to GAT's logit (PyG's semantics) and
``W_e e_ij`` inside GATv2's nonlinearity; the self-loops get ``fill_value`` as their feature
('mean' of the node's incoming edge features by default). Bipartite input ``(x_src, x_dst)``
with ``size=(N_src, N_dst)`` attends from target nodes to source nodes.

Edge list convention: ``edge_index (2, E)``, row 0 = source j, row 1 = target i (messages flow
source -> target, as in PyTorch Geometric). Without edge features an edge list is a set:
duplicate edges are merged. With edge features every edge is its own message, as in PyG.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def check_edge_index(edge_index: torch.Tensor, num_nodes: int,
                     num_dst: int | None = None) -> torch.Tensor:
    """Validate ``edge_index (2, E)`` of integer node ids: sources in ``[0, num_nodes)``,
    targets in ``[0, num_dst)`` (default ``num_nodes``; bipartite graphs differ)."""
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(f"edge_index must be a tensor of shape (2, E), got "
                        f"{type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E) (row 0 = source, row 1 = target), "
                         f"got {tuple(edge_index.shape)}; transpose an (E, 2) list")
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise TypeError(f"edge_index must hold integer node ids, got dtype {edge_index.dtype}; "
                        "convert with edge_index.long()")
    num_dst = num_nodes if num_dst is None else num_dst
    for row, n, what in ((0, num_nodes, "source"), (1, num_dst, "target")):
        ids = edge_index[row]
        if ids.numel():
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                nodes = "nodes" if num_dst == num_nodes else f"{what} nodes"
                raise ValueError(f"edge_index refers to node {bad}, but there are {n} {nodes} "
                                 f"(ids 0..{n - 1}); renumber the nodes or pass all their "
                                 "features")
    return edge_index.long()


def prepare_edges(edge_index: torch.Tensor, num_nodes: int, self_loops: bool) -> torch.Tensor:
    """Merge duplicate edges; with ``self_loops``, replace existing self-loops by exactly one
    per node (so every node attends at least to itself). Sorted by (target, source)."""
    edge_index = check_edge_index(edge_index, num_nodes)
    src, dst = edge_index
    if self_loops:
        keep = src != dst
        loops = torch.arange(num_nodes, device=edge_index.device)
        src = torch.cat([src[keep], loops])
        dst = torch.cat([dst[keep], loops])
    key = torch.unique(dst * num_nodes + src)                   # sorted, duplicates merged
    return torch.stack([key % num_nodes, key // num_nodes])


def segment_softmax(scores: torch.Tensor, index: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Softmax of ``scores (E, H)`` within groups of equal ``index (E,)``; groups with no
    element are simply absent (no NaN)."""
    h = scores.shape[1]
    idx = index.view(-1, 1).expand(-1, h)
    m = torch.full((num_segments, h), float("-inf"), dtype=scores.dtype, device=scores.device)
    m = m.scatter_reduce(0, idx, scores, reduce="amax", include_self=True)
    p = (scores - m.detach()[index]).exp()                       # (E, H), <= 1
    s = torch.zeros(num_segments, h, dtype=scores.dtype, device=scores.device)
    s.index_add_(0, index, p)
    return p / s[index]


def _self_loops(src, dst, attr, n_loops: int, fill_value):
    """PyG's ``remove_self_loops`` then ``add_self_loops``: one loop per node below
    ``n_loops``, appended after the other edges; loop features from ``fill_value``."""
    keep = src != dst
    src, dst = src[keep], dst[keep]
    loops = torch.arange(n_loops, device=src.device)
    if attr is not None:
        attr = attr[keep]
        if isinstance(fill_value, str):
            reduce = {"mean": "mean", "add": "sum", "sum": "sum", "max": "amax",
                      "min": "amin", "mul": "prod"}.get(fill_value)
            if reduce is None:
                raise ValueError(f"fill_value must be a number, a tensor or one of 'mean', "
                                 f"'add', 'max', 'min', 'mul', got {fill_value!r}")
            idx = dst.view(-1, *([1] * (attr.dim() - 1))).expand_as(attr)
            base = torch.zeros(max(n_loops, int(dst.max()) + 1 if dst.numel() else 0),
                               *attr.shape[1:], dtype=attr.dtype, device=attr.device)
            fill = base.scatter_reduce(0, idx, attr, reduce=reduce, include_self=False)[:n_loops]
        else:
            fill = torch.as_tensor(fill_value, dtype=attr.dtype, device=attr.device)
            fill = fill.expand(n_loops, *attr.shape[1:])
        attr = torch.cat([attr, fill])
    return torch.cat([src, loops]), torch.cat([dst, loops]), attr


class _GraphAttention(nn.Module):
    """What GATConv and GATv2Conv share: arguments, edges, softmax, aggregation."""

    def _setup(self, in_channels, out_channels, heads, concat, negative_slope, dropout,
               add_self_loops, edge_dim, fill_value, bias, residual):
        for name, v in (("out_channels", out_channels), ("heads", heads)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        pair = in_channels if isinstance(in_channels, tuple) else (in_channels, in_channels)
        if len(pair) != 2 or not all(isinstance(v, int) and v >= 1 for v in pair):
            raise ValueError(f"in_channels must be an int >= 1 or a pair (source, target) of "
                             f"them, got {in_channels!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if edge_dim is not None and (not isinstance(edge_dim, int) or edge_dim < 1):
            raise ValueError(f"edge_dim must be an int >= 1 or None, got {edge_dim!r}")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.add_self_loops, self.edge_dim, self.fill_value = add_self_loops, edge_dim, fill_value
        self.residual = residual
        total = heads * out_channels if concat else out_channels
        self.res = nn.Linear(pair[1], total, bias=False) if residual else None
        self.lin_edge = nn.Linear(edge_dim, heads * out_channels, bias=False) \
            if edge_dim is not None else None
        self.bias = nn.Parameter(torch.empty(total)) if bias else None
        return pair

    def _inputs(self, x, edge_index, edge_attr, size):
        """Features, the edges used (with self-loops) and their features."""
        if isinstance(x, (tuple, list)):
            x_src, x_dst = x
        else:
            x_src = x_dst = x
        pair = self.in_channels if isinstance(self.in_channels, tuple) else (
            self.in_channels, self.in_channels)
        if x_dst is None:
            # PyG's bipartite call without target features: the scores use the sources only,
            # the number of targets comes from size (else the number of sources), no residual.
            return self._source_only(x_src, pair, edge_index, edge_attr, size)
        for name, t, c in (("x_src", x_src, pair[0]), ("x_dst", x_dst, pair[1])):
            if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[1] != c:
                raise ValueError(f"{name if x_src is not x_dst else 'x'} must have shape "
                                 f"(num_nodes, {c}), got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else t!r}")
        n_src, n_dst = x_src.shape[0], x_dst.shape[0]
        if size is not None:
            if tuple(size) != (n_src, n_dst):
                raise ValueError(f"size must be (N_src, N_dst) = {(n_src, n_dst)} for these "
                                 f"features, got {tuple(size)}")
        if edge_attr is not None:
            if self.lin_edge is None:
                raise ValueError("edge_attr was given but the layer was built without "
                                 "edge_dim; build it with edge_dim=edge_attr.shape[-1]")
            edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            if edge_attr.shape != (edge_index.shape[-1], self.edge_dim):
                raise ValueError(f"edge_attr must have shape (E, edge_dim) = "
                                 f"{(edge_index.shape[-1], self.edge_dim)}, got "
                                 f"{tuple(edge_attr.shape)}")
        bipartite = x_src is not x_dst
        if edge_attr is None and not bipartite:
            edges = prepare_edges(edge_index, n_src, self.add_self_loops).to(x_src.device)
            return x_src, x_dst, edges[0], edges[1], None
        ei = check_edge_index(edge_index, n_src, n_dst).to(x_src.device)
        src, dst = ei
        if self.add_self_loops:
            src, dst, edge_attr = _self_loops(src, dst, edge_attr, min(n_src, n_dst),
                                              self.fill_value)
        return x_src, x_dst, src, dst, edge_attr

    def _source_only(self, x_src, pair, edge_index, edge_attr, size):
        """``_inputs`` for ``(x_src, None)``: ``x_dst`` stays None and ``self._n_dst`` holds the
        number of targets."""
        if not isinstance(x_src, torch.Tensor) or x_src.dim() != 2 or x_src.shape[1] != pair[0]:
            got = tuple(x_src.shape) if isinstance(x_src, torch.Tensor) else repr(x_src)
            raise ValueError(f"x_src must have shape (num_nodes, {pair[0]}), got {got}")
        if edge_attr is not None:
            edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
        n_src = x_src.shape[0]
        if size is not None:
            if int(size[0]) != n_src:
                raise ValueError(f"size[0] must be the number of sources, {n_src}, got {size}")
            n_dst = int(size[1])
        else:
            n_dst = n_src                 # PyG's MessagePassing: size[1] defaults to size[0]
        ei = check_edge_index(edge_index, n_src, n_dst).to(x_src.device)
        src, dst = ei
        if self.add_self_loops:
            n_loops = min(size) if size is not None else n_src
            src, dst, edge_attr = _self_loops(src, dst, edge_attr, int(n_loops),
                                              self.fill_value)
        self._n_dst = n_dst
        return x_src, None, src, dst, edge_attr

    def _aggregate(self, e, msg, src, dst, n_dst, x_dst, return_attention_weights):
        """Softmax of logits ``e (E, H)`` per target, dropout, sum of messages, residual and
        bias. The returned coefficients are the ones applied (after dropout), as PyG returns
        them and as the core defines returned weights: out == sum_j alpha_ij z_j + bias."""
        alpha = segment_softmax(e, dst, n_dst)                           # (E, H)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        h, c = self.heads, self.out_channels
        out = msg.new_zeros(n_dst, h, c).index_add_(0, dst, msg[src] * alpha.unsqueeze(-1))
        out = out.reshape(n_dst, h * c) if self.concat else out.mean(dim=1)
        if self.res is not None and x_dst is not None:
            out = out + self.res(x_dst)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, (torch.stack([src, dst]), alpha)
        return out

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, "
                f"concat={self.concat}, dropout={self.dropout}, "
                f"add_self_loops={self.add_self_loops}, edge_dim={self.edge_dim}, "
                f"residual={self.residual}")


def _glorot(t: torch.Tensor) -> None:
    bound = math.sqrt(6.0 / (t.shape[-2] + t.shape[-1]))
    nn.init.uniform_(t, -bound, bound)


class GATConv(_GraphAttention):
    """Multi-head graph attention layer (GAT), PyTorch Geometric's ``GATConv`` semantics.

    Args:
        in_channels: feature size per node, or ``(source, target)`` sizes for bipartite
            graphs (then separate ``lin_src`` / ``lin_dst`` projections).
        out_channels: feature size per head.
        heads: number of attention heads.
        concat: concatenate heads (``heads * out_channels`` outputs) or average them.
        negative_slope: LeakyReLU slope (0.2 in the paper).
        dropout: dropout on the attention coefficients α during training.
        add_self_loops: give every node an edge to itself (existing self-loops are replaced
            by one).
        edge_dim: size of edge features, or None.
        fill_value: the self-loops' edge features: 'mean' (default), 'add', 'max', 'min',
            'mul' of the node's incoming ones, or a number / tensor.
        bias: learnable output bias.
        residual: add a linear projection of the (target) input to the output.

    Shapes: ``x (N, in_channels)`` or ``(x_src (N_s, F_s), x_dst (N_t, F_t))``,
    ``edge_index (2, E)``, ``edge_attr (E, edge_dim)`` -> ``(N_t, heads * out_channels)`` or
    ``(N_t, out_channels)``; with ``return_attention_weights=True`` also
    ``(edge_index_used (2, E'), alpha (E', heads))``.

    Example:
        >>> conv = GATConv(4, 8, heads=2)
        >>> x = torch.randn(5, 4); ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
        >>> out, (edges, alpha) = conv(x, ei, return_attention_weights=True)
        >>> out.shape, edges.shape, alpha.shape
        (torch.Size([5, 16]), torch.Size([2, 9]), torch.Size([9, 2]))
    """

    def __init__(self, in_channels: int | tuple[int, int], out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, edge_dim: int | None = None,
                 fill_value: float | torch.Tensor | str = "mean", bias: bool = True,
                 residual: bool = False):
        super().__init__()
        pair = self._setup(in_channels, out_channels, heads, concat, negative_slope, dropout,
                           add_self_loops, edge_dim, fill_value, bias, residual)
        hc = heads * out_channels
        if isinstance(in_channels, tuple):
            self.lin = None
            self.lin_src = nn.Linear(pair[0], hc, bias=False)
            self.lin_dst = nn.Linear(pair[1], hc, bias=False)
        else:
            self.lin = nn.Linear(in_channels, hc, bias=False)
            self.lin_src = self.lin_dst = None
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_edge = nn.Parameter(torch.empty(1, heads, out_channels)) \
            if edge_dim is not None else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights and attention vectors, zero bias (as in the paper's code)."""
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                nn.init.xavier_uniform_(lin.weight)
        for a in (self.att_src, self.att_dst, self.att_edge):
            if a is not None:
                _glorot(a)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x, edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None,
                size: tuple[int, int] | None = None, return_attention_weights: bool = False):
        """``x (N, F)`` (or a bipartite pair), ``edge_index (2, E)`` -> ``(N_t, heads * out)``; with
        ``return_attention_weights`` also the edges and their weights."""
        x_src, x_dst, src, dst, attr = self._inputs(x, edge_index, edge_attr, size)
        h, c = self.heads, self.out_channels
        lin_src = self.lin if self.lin is not None else self.lin_src
        lin_dst = self.lin if self.lin is not None else self.lin_dst
        z_src = lin_src(x_src).view(-1, h, c)                            # (N_s, H, C)
        e = (z_src * self.att_src).sum(-1)[src]                          # (E, H)
        if x_dst is not None:                                            # (x_src, None): none
            z_dst = z_src if x_dst is x_src else lin_dst(x_dst).view(-1, h, c)
            e = e + (z_dst * self.att_dst).sum(-1)[dst]
        if attr is not None:
            e = e + (self.lin_edge(attr).view(-1, h, c) * self.att_edge).sum(-1)
        e = F.leaky_relu(e, self.negative_slope)
        n_dst = self._n_dst if x_dst is None else x_dst.shape[0]
        return self._aggregate(e, z_src, src, dst, n_dst, x_dst, return_attention_weights)


class GATv2Conv(_GraphAttention):
    """GATv2 (Brody et al. 2022), PyTorch Geometric's ``GATv2Conv`` semantics:
    ``e_ij = a_hᵀ LeakyReLU(W_s x_j + W_t x_i [+ W_e e_ij])``, messages ``W_s x_j``.

    Args: as :class:`GATConv`, and ``share_weights`` (one matrix for source and target);
    ``lin_l`` / ``lin_r`` (source / target projections) carry a bias when ``bias`` is set, as
    in PyG.

    Example:
        >>> conv = GATv2Conv(4, 8, heads=2)
        >>> conv(torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([5, 16])
    """

    def __init__(self, in_channels: int | tuple[int, int], out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, edge_dim: int | None = None,
                 fill_value: float | torch.Tensor | str = "mean", bias: bool = True,
                 share_weights: bool = False, residual: bool = False):
        super().__init__()
        pair = self._setup(in_channels, out_channels, heads, concat, negative_slope, dropout,
                           add_self_loops, edge_dim, fill_value, bias, residual)
        hc = heads * out_channels
        self.share_weights = share_weights
        self.lin_l = nn.Linear(pair[0], hc, bias=bias)
        self.lin_r = self.lin_l if share_weights else nn.Linear(pair[1], hc, bias=bias)
        self.att = nn.Parameter(torch.empty(1, heads, out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot weights, zero biases (PyG's initialisation)."""
        for lin in (self.lin_l, self.lin_r, self.lin_edge, self.res):
            if lin is not None:
                nn.init.xavier_uniform_(lin.weight)
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)
        _glorot(self.att)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x, edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None,
                size: tuple[int, int] | None = None, return_attention_weights: bool = False):
        """GATv2 (dynamic attention): as :meth:`GATConv.forward`, scores ``a^T LeakyReLU(W [x_i ||
        x_j])``."""
        if isinstance(x, (tuple, list)) and x[1] is None:
            raise ValueError("GATv2Conv needs the target nodes' features, x = (x_src, x_dst): "
                             "its score a^T LeakyReLU(W_l x_j + W_r x_i) reads both ends (as "
                             "PyG's GATv2Conv); GATConv takes (x_src, None)")
        x_src, x_dst, src, dst, attr = self._inputs(x, edge_index, edge_attr, size)
        h, c = self.heads, self.out_channels
        z_l = self.lin_l(x_src).view(-1, h, c)                           # sources (N_s, H, C)
        s = z_l[src]                                                     # (E, H, C)
        if x_dst is not None:                                            # (x_src, None): none
            z_r = z_l if (self.share_weights and x_dst is x_src) else \
                self.lin_r(x_dst).view(-1, h, c)
            s = s + z_r[dst]
        if attr is not None:
            s = s + self.lin_edge(attr).view(-1, h, c)
        e = (F.leaky_relu(s, self.negative_slope) * self.att).sum(-1)    # (E, H)
        n_dst = self._n_dst if x_dst is None else x_dst.shape[0]
        return self._aggregate(e, z_l, src, dst, n_dst, x_dst, return_attention_weights)
