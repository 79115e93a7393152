"""The networks inside :class:`~attnlab.models.forecast.AttentionForecaster`: a recurrent or
Transformer encoder over the input window, then attention pooling over its time steps."""

from __future__ import annotations

import torch
import torch.nn as nn

from attnlab.core.api import attention
from attnlab.nn.position import sinusoidal_table
from attnlab.nn.transformer import Encoder, EncoderLayer


class AttentionPool(nn.Module):
    """Attention pooling over time: query from the last state, keys/values from every state.
    ``n_future`` known-future values (the covariates of the H forecast steps, flattened) join
    the pooled state and the last state at the output layer."""

    def __init__(self, d: int, horizon: int, dropout: float, mode: str = "attention",
                 n_future: int = 0):
        super().__init__()
        self.mode = mode              # "mean": the ablation's uniform weights instead
        self.w_q = nn.Linear(d, d)
        self.w_k = nn.Linear(d, d)
        self.head = nn.Sequential(nn.Linear(2 * d + n_future, d), nn.GELU(),
                                  nn.Dropout(dropout), nn.Linear(d, horizon))
        # Start from the reference forecast (seasonal naive): the output layer begins at 0,
        # so training only moves away from it as far as the data supports.
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, h: torch.Tensor, future: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``h (B, L, d)`` (and ``future (B, n_future)``) -> the correction ``(B, horizon)``
        and the weights ``(B, L)`` over the steps."""
        last = h[:, -1]                                                    # (B, d)
        extra = [] if future is None else [future]
        if self.mode == "mean":
            weights = torch.full(h.shape[:2], 1.0 / h.shape[1], dtype=h.dtype, device=h.device)
            return self.head(torch.cat([h.mean(dim=1), last, *extra], dim=-1)), weights
        res = attention(self.w_q(last)[:, None], self.w_k(h), h, return_weights=True)
        context = res.out[:, 0]                                            # (B, d)
        return self.head(torch.cat([context, last, *extra], dim=-1)), res.weights[:, 0]


class RecurrentNet(nn.Module):
    """A GRU or LSTM encoder over the window, pooled by attention (or the mean), and an output
    layer."""
    def __init__(self, n_in: int, hidden: int, layers: int, cell: str, horizon: int,
                 dropout: float, pool: str = "attention", n_future: int = 0):
        super().__init__()
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn(n_in, hidden, layers, batch_first=True,
                       dropout=dropout if layers > 1 else 0.0)
        self.pool = AttentionPool(hidden, horizon, dropout, pool, n_future)

    def forward(self, x, future=None):
        """``x (B, L, F)`` (and the known-future values ``(B, n_future)``) -> the correction
        ``(B, H)`` and the pooling weights ``(B, L)``."""
        h, _ = self.rnn(x)                                                 # (B, L, hidden)
        return self.pool(h, future)


class TransformerNet(nn.Module):
    """A Transformer encoder over the window, pooled by attention (or the mean), and an output
    layer."""
    def __init__(self, n_in: int, d_model: int, layers: int, nhead: int, horizon: int,
                 dropout: float, lookback: int, pool: str = "attention", n_future: int = 0):
        super().__init__()
        self.inp = nn.Linear(n_in, d_model)
        self.register_buffer("pos", sinusoidal_table(lookback, d_model))
        layer = EncoderLayer(d_model, nhead, 2 * d_model, dropout, activation="gelu",
                             batch_first=True, norm_first=True)
        self.encoder = Encoder(layer, layers, norm=nn.LayerNorm(d_model))
        self.pool = AttentionPool(d_model, horizon, dropout, pool, n_future)

    def forward(self, x, future=None):
        """``x (B, L, F)`` (and the known-future values ``(B, n_future)``) -> the correction
        ``(B, H)`` and the pooling weights ``(B, L)``."""
        h = self.encoder(self.inp(x) + self.pos)                           # (B, L, d_model)
        return self.pool(h, future)
