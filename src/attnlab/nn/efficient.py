"""Modules that own the parameters of approximate attention (see :mod:`attnlab.core.approx`).

Both take per-head tensors ``q (B, H, N, D)``, ``k``, ``v`` like :func:`attnlab.attention`,
so they can replace it inside a layer.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from attnlab.core import approx as A


class LinformerProjection(nn.Module):
    """Linformer's learned sequence projections E, F ``(k_rank, seq_len)`` (Wang et al. 2020),
    shared across heads (the paper's "headwise sharing").

        out = softmax(Q (E K)ᵀ / sqrt(D)) (F V)        O(N · k_rank) instead of O(N²)

    The sequence length is fixed at construction (inputs must have exactly ``seq_len`` keys).
    """

    def __init__(self, seq_len: int, rank: int, share_ef: bool = False):
        super().__init__()
        if not 1 <= rank <= seq_len:
            raise ValueError(f"rank must be in 1..seq_len ({seq_len}), got {rank}")
        self.e = nn.Parameter(torch.empty(rank, seq_len))
        nn.init.xavier_normal_(self.e)
        if share_ef:
            self.f = self.e
        else:
            self.f = nn.Parameter(torch.empty(rank, seq_len))
            nn.init.xavier_normal_(self.f)
        self.seq_len, self.rank = seq_len, rank

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``k, v (B, H, N, D)`` projected along N to ``(B, H, k, D)`` by E and F."""
        return A.linformer_attention(q, k, v, self.e, self.f)


class PerformerAttention(nn.Module):
    """Performer FAVOR+ (Choromanski et al. 2021) with a feature matrix kept as a buffer.

    Features are drawn at construction and whenever :meth:`redraw_features` is called (the
    paper redraws periodically during training so the estimator's errors do not become a
    fixed bias the model learns around).

    Args:
        head_dim: D.
        num_features: m; the relative error falls like 1 / sqrt(m).
        causal: use the prefix-sum form (N_q == N_k).
    """

    def __init__(self, head_dim: int, num_features: int = 256, causal: bool = False,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.head_dim, self.num_features, self.causal = head_dim, num_features, causal
        self.register_buffer("features", A.orthogonal_gaussian(num_features, head_dim, generator))

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Draw a new set of orthogonal random features."""
        self.features.copy_(A.orthogonal_gaussian(self.num_features, self.head_dim, generator,
                                                  dtype=self.features.dtype,
                                                  device=self.features.device))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """FAVOR+ attention with the current random features (an approximation of softmax
        attention)."""
        return A.performer_attention(q, k, v, self.features.to(q.dtype), causal=self.causal)
