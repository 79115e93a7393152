"""Learned scoring functions: additive (Bahdanau), bilinear (Luong "general"), cosine.

Each module computes scores ``s(q_i, k_j)`` its own way and hands them to the core
(:func:`attnlab.attend` or :func:`attnlab.attention`), so masking, fully masked rows, dropout
and the typed ``(out, weights)`` result follow the core's contract. Masks here use the core's
polarity: **bool True = may attend**, float = added to the scores.

Shapes: query ``(..., N_q, D_q)``, keys ``(..., N_k, D_k)``, values ``(..., N_k, D_v)``
-> output ``(..., N_q, D_v)``; with ``return_weights=True`` an
:class:`~attnlab.core.spec.AttentionOutput` with ``weights (..., N_q, N_k)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnlab.core import attend, attention


class AdditiveAttention(nn.Module):
    """Additive attention (Bahdanau, Cho & Bengio 2015, eq. 6 and appendix A.1.2).

        s_ij = vᵀ tanh(W_q q_i + W_k k_j + b)        A = softmax_j(s_ij)        O = A V

    Query and key dims may differ; both are projected to ``hidden_dim``. Memory is
    ``O(N_q · N_k · hidden_dim)`` for the tanh features, as in the paper's formulation.

    Args:
        query_dim, key_dim: input dims D_q and D_k.
        hidden_dim: width of the tanh layer (default: key_dim).
        dropout: dropout on the weights in training mode.

    Example:
        >>> att = AdditiveAttention(query_dim=8, key_dim=6, hidden_dim=10)
        >>> q, k = torch.randn(2, 3, 8), torch.randn(2, 5, 6)
        >>> att(q, k, k).shape
        torch.Size([2, 3, 6])
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int | None = None,
                 dropout: float = 0.0):
        super().__init__()
        hidden_dim = key_dim if hidden_dim is None else hidden_dim
        self.w_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.w_k = nn.Linear(key_dim, hidden_dim, bias=True)      # its bias is b
        self.v = nn.Linear(hidden_dim, 1, bias=False)
        self.dropout = dropout
        self.query_dim, self.key_dim = query_dim, key_dim

    def scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """``s (..., N_q, N_k)``."""
        _check_last_dim("query", query, self.query_dim, "query_dim")
        _check_last_dim("key", key, self.key_dim, "key_dim")
        hq = self.w_q(query).unsqueeze(-2)                # (..., N_q, 1, hidden)
        hk = self.w_k(key).unsqueeze(-3)                  # (..., 1, N_k, hidden)
        return self.v(torch.tanh(hq + hk)).squeeze(-1)    # (..., N_q, N_k)

    def forward(self, query, key, value, mask=None, return_weights: bool = False):
        """Bahdanau attention: ``s_ij = v^T tanh(W_q q_i + W_k k_j)``, softmax over keys, ``A
        V``."""
        return attend(self.scores(query, key), value, mask=mask,
                      dropout_p=self.dropout if self.training else 0.0,
                      return_weights=return_weights)


class GeneralAttention(nn.Module):
    """Bilinear ("general") attention (Luong, Pham & Manning 2015, eq. 8).

        s_ij = q_iᵀ W k_j        A = softmax_j(s_ij)        O = A V

    Computed as a dot product between ``q W`` and ``k``, so it runs on the core's exact backends
    with ``scale = 1`` (Luong's scores are unscaled).

    Example:
        >>> att = GeneralAttention(query_dim=8, key_dim=6)
        >>> att(torch.randn(3, 8), torch.randn(5, 6), torch.randn(5, 2)).shape
        torch.Size([3, 2])
    """

    def __init__(self, query_dim: int, key_dim: int, dropout: float = 0.0, backend: str = "auto"):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(query_dim, key_dim))
        nn.init.xavier_uniform_(self.weight)
        self.query_dim, self.key_dim = query_dim, key_dim
        self.dropout, self.backend = dropout, backend

    def forward(self, query, key, value, mask=None, return_weights: bool = False):
        """Luong's general score ``s_ij = q_i^T W k_j``, softmax over keys, ``A V``."""
        _check_last_dim("query", query, self.query_dim, "query_dim")
        _check_last_dim("key", key, self.key_dim, "key_dim")
        qw = query @ self.weight                                      # (..., N_q, D_k)
        return attention(qw, key, value, mask=mask, scale=1.0, backend=self.backend,
                         dropout_p=self.dropout if self.training else 0.0,
                         return_weights=return_weights)


class CosineAttention(nn.Module):
    """Cosine-similarity attention with a temperature tau, fixed or learned.

        s_ij = cos(q_i, k_j) / tau        A = softmax_j(s_ij)        O = A V

    Scores are bounded in [-1/tau, 1/tau], which keeps attention from collapsing onto one key
    when q and k grow in norm (used e.g. in Swin Transformer v2, Liu et al. 2022, with a learned
    tau). A learned tau is parametrized by its log so it stays positive.

    Args:
        temperature: initial (or fixed) tau > 0.
        learn_temperature: make tau a parameter.
    """

    def __init__(self, temperature: float = 0.1, learn_temperature: bool = True,
                 dropout: float = 0.0, backend: str = "auto"):
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        log_tau = torch.tensor(math.log(temperature))
        if learn_temperature:
            self.log_tau = nn.Parameter(log_tau)
        else:
            self.register_buffer("log_tau", log_tau)
        self.dropout, self.backend = dropout, backend

    @property
    def temperature(self) -> torch.Tensor:
        """The learned temperature ``exp(log_t)``."""
        return self.log_tau.exp()

    def forward(self, query, key, value, mask=None, return_weights: bool = False):
        """Cosine similarity of q and k divided by the learned temperature, softmax, ``A V``."""
        q = F.normalize(query, dim=-1) / self.temperature            # (..., N_q, D), tau folded in
        k = F.normalize(key, dim=-1)                                 # (..., N_k, D)
        return attention(q, k, value, mask=mask, scale=1.0, backend=self.backend,
                         dropout_p=self.dropout if self.training else 0.0,
                         return_weights=return_weights)


def _check_last_dim(name: str, t: torch.Tensor, want: int, arg: str) -> None:
    if t.shape[-1] != want:
        raise ValueError(f"{name} has last dim {t.shape[-1]} but the module was built with "
                         f"{arg}={want}; build it with {arg}={t.shape[-1]}")
