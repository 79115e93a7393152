"""Graph attention (Veličković et al. 2018, "Graph Attention Networks", eqs. 1-6).

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

Edge list convention: ``edge_index (2, E)``, row 0 = source j, row 1 = target i (messages flow
source -> target, as in PyTorch Geometric). An edge list is a set: duplicate edges are merged.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def check_edge_index(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Validate ``edge_index (2, E)`` of integer node ids in ``[0, num_nodes)``."""
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(f"edge_index must be a tensor of shape (2, E), got "
                        f"{type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E) (row 0 = source, row 1 = target), "
                         f"got {tuple(edge_index.shape)}; transpose an (E, 2) list")
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise TypeError(f"edge_index must hold integer node ids, got dtype {edge_index.dtype}; "
                        "convert with edge_index.long()")
    if edge_index.numel():
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            bad = lo if lo < 0 else hi
            raise ValueError(f"edge_index refers to node {bad}, but there are {num_nodes} nodes "
                             f"(ids 0..{num_nodes - 1}); renumber the nodes or pass all their "
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
    s = torch.zeros(num_segments, h, dtype=scores.dtype, device=scores.device).index_add_(0, index, p)
    return p / s[index]


class GATConv(nn.Module):
    """Multi-head graph attention layer.

    Args:
        in_channels, out_channels: feature sizes per node (out per head).
        heads: number of attention heads.
        concat: concatenate heads (``heads * out_channels`` outputs) or average them.
        negative_slope: LeakyReLU slope (0.2 in the paper).
        dropout: dropout on the attention coefficients α during training.
        add_self_loops: give every node an edge to itself (existing self-loops are replaced
            by one).
        bias: learnable output bias.

    Shapes: ``x (N, in_channels)``, ``edge_index (2, E)`` -> ``(N, heads * out_channels)`` or
    ``(N, out_channels)``; with ``return_attention_weights=True`` also
    ``(edge_index_used (2, E'), alpha (E', heads))``.

    Example:
        >>> conv = GATConv(4, 8, heads=2)
        >>> x = torch.randn(5, 4); ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
        >>> out, (edges, alpha) = conv(x, ei, return_attention_weights=True)
        >>> out.shape, edges.shape, alpha.shape
        (torch.Size([5, 16]), torch.Size([2, 9]), torch.Size([9, 2]))
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 bias: bool = True):
        super().__init__()
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels),
                        ("heads", heads)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.add_self_loops = add_self_loops
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.empty(heads * out_channels if concat else out_channels)) \
            if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights and attention vectors, zero bias (as in the paper's code)."""
        nn.init.xavier_uniform_(self.lin.weight)
        for a in (self.att_src, self.att_dst):
            bound = math.sqrt(6.0 / (a.shape[-2] + a.shape[-1]))
            nn.init.uniform_(a, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                return_attention_weights: bool = False):
        if x.dim() != 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"x must have shape (num_nodes, {self.in_channels}), got "
                             f"{tuple(x.shape)}")
        n, h, c = x.shape[0], self.heads, self.out_channels
        edges = prepare_edges(edge_index, n, self.add_self_loops).to(x.device)
        src, dst = edges
        z = self.lin(x).view(n, h, c)                                    # (N, H, C)
        a_src = (z * self.att_src).sum(-1)                               # (N, H)
        a_dst = (z * self.att_dst).sum(-1)                               # (N, H)
        e = F.leaky_relu(a_src[src] + a_dst[dst], self.negative_slope)  # (E, H)
        alpha = segment_softmax(e, dst, n)                               # (E, H)
        # The returned coefficients are the ones applied (after dropout), as PyG returns them
        # and as attnlab's core defines returned weights: out == sum_j alpha_ij z_j + bias.
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        a = alpha
        out = torch.zeros(n, h, c, dtype=z.dtype, device=z.device)
        out.index_add_(0, dst, z[src] * a.unsqueeze(-1))                 # (N, H, C)
        out = out.reshape(n, h * c) if self.concat else out.mean(dim=1)
        if self.bias is not None:
            out = out + self.bias
        return (out, (edges, alpha)) if return_attention_weights else out

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, "
                f"concat={self.concat}, dropout={self.dropout}, "
                f"add_self_loops={self.add_self_loops}")
