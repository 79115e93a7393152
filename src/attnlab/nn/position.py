"""Positional information: sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention itself is permutation-equivariant: without positions, "dog bites man" and
"man bites dog" give the same multiset of outputs. These are the four standard remedies.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def sinusoidal_table(n: int, d_model: int, base: float = 10000.0,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The fixed encodings of Vaswani et al. (2017), section 3.5. Returns ``(n, d_model)``::

        PE(pos, 2i)   = sin(pos / base^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / base^(2i / d_model))

    Each pair of dims is a rotation at its own frequency, so PE(pos + k) is a fixed linear
    function of PE(pos) for every offset k.
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even for sin/cos pairs, got {d_model}")
    pos = torch.arange(n, dtype=torch.float64)[:, None]                     # (n, 1)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d/2,)
    angles = pos * inv_freq                                                 # (n, d/2)
    pe = torch.empty(n, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds :func:`sinusoidal_table` to ``x (B, N, d_model)`` (batch_first) then dropout.

    Args:
        d_model: feature size.
        max_len: longest sequence (keyword only, as in every positional module here).
        dropout: applied after the addition. Default 0.
        batch_first: ``x`` is ``(B, N, d)``; False for ``(N, B, d)``. Default True.
    """

    def __init__(self, d_model: int, *, max_len: int = 5000, dropout: float = 0.0,
                 batch_first: bool = True):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.batch_first = batch_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (B, N, E)`` plus the sinusoidal encodings of positions ``offset .. offset + N -
        1``."""
        n = x.shape[1] if self.batch_first else x.shape[0]
        if n > self.pe.shape[0]:
            raise ValueError(f"sequence length {n} exceeds max_len={self.pe.shape[0]}; build the "
                             f"module with max_len >= {n}")
        pe = self.pe[:n].to(x.dtype)                                         # (N, d)
        return self.dropout(x + (pe if self.batch_first else pe[:, None]))


class LearnedPositionalEncoding(nn.Module):
    """A trained embedding per position (as in BERT and GPT), added to ``x (B, N, d_model)``.

    Args:
        d_model: feature size (first, as for :class:`SinusoidalPositionalEncoding`).
        max_len: number of positions (keyword only: an older ``(max_len, d_model)`` positional
            call fails loudly instead of swapping the two).
        dropout: applied after the addition. Default 0.
    """

    def __init__(self, d_model: int, *, max_len: int, dropout: float = 0.0):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (B, N, E)`` plus the learned embeddings of its positions."""
        n = x.shape[1]
        if n > self.embedding.num_embeddings:
            raise ValueError(f"sequence length {n} exceeds max_len={self.embedding.num_embeddings}")
        return self.dropout(x + self.embedding(torch.arange(n, device=x.device)))


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, RoPE (Su et al. 2021, RoFormer).

    Rotates each pair of dims of q and k by an angle proportional to the position,
    ``theta_i = pos * base^(-2i/D)``. Then ``<R(m) q, R(n) k> = <q, R(n - m) k>``: the score
    depends on the positions only through their difference.

    Args:
        dim: head dim D (even).
        interleaved: pair dims (0, 1), (2, 3), ... as in the paper; False pairs (i, i + D/2),
            the "rotate half" layout of GPT-NeoX and LLaMA checkpoints.

    Shapes: ``x (..., N, D)``; ``positions (N,)`` default ``arange(N)``. ``rope(q, k)``
    rotates both and returns ``(q, k)``; with N_q < N_k (decoding with a cache) the queries are
    the last N_q positions of the keys', as attnlab's bottom-right causal alignment.

    Example:
        >>> rope = RotaryEmbedding(8)
        >>> q = torch.randn(2, 4, 10, 8)
        >>> rope(q).shape
        torch.Size([2, 4, 10, 8])
        >>> q, k = rope(q, torch.randn(2, 4, 10, 8))
    """

    def __init__(self, dim: int, base: float = 10000.0, interleaved: bool = False):
        super().__init__()
        if dim % 2:
            raise ValueError(f"dim must be even (dims rotate in pairs), got {dim}")
        self.dim, self.base, self.interleaved = dim, base, interleaved
        inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, k: torch.Tensor | None = None, *,
                positions: torch.Tensor | None = None):
        """q and k ``(..., N, D)`` rotated by their positions (RoPE, Su et al. 2021)."""
        if k is not None:
            if not isinstance(k, torch.Tensor) or not k.is_floating_point():
                raise TypeError("the second argument is the keys, a float tensor (..., N_k, D); "
                                "pass positions as positions=")
            n_q, n_k = x.shape[-2], k.shape[-2]
            if n_q > n_k:
                raise ValueError(f"q has {n_q} positions and k {n_k}; queries are the last "
                                 "positions of the keys (N_q <= N_k)")
            kpos = (torch.arange(n_k, device=k.device) if positions is None
                    else positions.to(k.device))
            return self._rotate(x, kpos[n_k - n_q:]), self._rotate(k, kpos)
        return self._rotate(x, positions)

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has last dim {x.shape[-1]}, expected dim={self.dim}")
        n = x.shape[-2]
        pos = torch.arange(n, device=x.device) if positions is None else positions.to(x.device)
        angles = pos.to(torch.float64)[:, None] * self.inv_freq.to(x.device)   # (N, D/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if self.interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]                               # (..., N, D/2)
            out = torch.empty_like(x)
            out[..., 0::2] = x1 * cos - x2 * sin
            out[..., 1::2] = x1 * sin + x2 * cos
            return out
        x1, x2 = x[..., : self.dim // 2], x[..., self.dim // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def alibi_slopes(num_heads: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Head slopes of ALiBi (Press, Smith & Lewis 2022, section 3), in ``dtype`` (default:
    torch's default dtype, float32, as the scores they are added to: a float64 table captured
    by a ``score_mod`` would promote every tile of a float32 call to float64).

    For n heads, a power of 2, the slopes are the geometric sequence starting at 2^(-8/n) with
    that ratio: 1/2, 1/4, ..., 1/256 for 8 heads. Otherwise the paper takes the slopes of the
    closest smaller power of 2 and adds every other slope of the next power of 2.
    """
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")

    def power_of_2(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        return torch.tensor(power_of_2(num_heads), dtype=dtype)
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = power_of_2(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(power_of_2(closest) + extra, dtype=dtype)


def alibi_bias(num_heads: int, n_q: int, n_k: int | None = None, causal: bool = True,
               dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """ALiBi's additive bias ``(H, N_q, N_k)``: ``-m_h * (p - j)`` for key j and query position
    ``p = i + N_k - N_q`` (bottom-right aligned, like the core's causal mask).

    With ``causal=True`` keys after the query get ``-inf`` (pass the result as the core's float
    mask and nothing else is needed); with ``causal=False`` the distance is ``|p - j|``, the usual
    bidirectional variant.
    """
    n_k = n_q if n_k is None else n_k
    m = alibi_slopes(num_heads, torch.float64).to(device)                    # (H,)
    p = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)              # (N_q, 1)
    j = torch.arange(n_k, device=device)[None, :]                            # (1, N_k)
    dist = (p - j).to(torch.float64)                                         # (N_q, N_k)
    bias = -m[:, None, None] * (dist.abs() if not causal else dist)          # (H, N_q, N_k)
    if causal:
        bias = bias.masked_fill(dist[None] < 0, float("-inf"))
    return bias.to(dtype)
