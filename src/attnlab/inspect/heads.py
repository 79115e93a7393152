"""Causal-model head detectors, with their published definitions.

All three score a head by the attention mass it puts where a head of that kind would look,
averaged over the queries for which such a place exists (Olsson et al. 2022, "In-context
learning and induction heads", section 2 and appendix; the same scores as TransformerLens'
``detect_head``):

* **previous-token**: mass on key ``i - 1``;
* **duplicate-token**: mass on the earlier keys ``j < i`` holding the same token as ``i``;
* **induction (prefix matching)**: mass on the keys ``j < i`` whose *previous* token is the
  current one (``ids[j - 1] == ids[i]``): "find where I occurred before, look at what came
  next". On ``[BOS] A A`` with a random segment A of length L this is key ``i - L + 1``.

The **copying score** is Olsson et al.'s eigenvalue criterion for a head's OV circuit: with
``M = W_U W_O^h W_V^h W_E`` (vocabulary x vocabulary, the head's direct path, LayerNorm
ignored), ``sum(lambda) / sum(|lambda|)`` of M's eigenvalues -- near 1 when attending to a
token raises that token's logit.

Shapes: ``maps (L, H, N, N)`` for one sequence or ``(B, L, H, N, N)``; ``ids (N,)`` or
``(B, N)``. Scores are ``(L, H)``.
"""

from __future__ import annotations

import torch

INDUCTION = 0.5        # prefix-matching score that labels a head "induction" (attnlab's)
DUPLICATE = 0.5        # duplicate-token score that labels a head "duplicate token"


def _batched(maps: torch.Tensor, ids: torch.Tensor | None = None):
    if maps.dim() == 4:
        maps = maps.unsqueeze(0)
        ids = None if ids is None else ids.reshape(1, -1)
    if maps.dim() != 5 or maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f"maps must be (L, H, N, N) or (B, L, H, N, N) self-attention, got "
                         f"shape {tuple(maps.shape)}")
    if ids is not None and (ids.shape[0] != maps.shape[0] or ids.shape[-1] != maps.shape[-1]):
        raise ValueError(f"ids of shape {tuple(ids.shape)} do not match maps of shape "
                         f"{tuple(maps.shape)}: give the token ids of the same sequences")
    return maps.double(), ids


def _score(maps: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """``where (B, N, N)`` bool: the keys each query should look at; mean over the queries
    that have any of the summed mass there. A head with no such query scores 0."""
    w = where[:, None, None].to(maps.dtype)                   # (B, 1, 1, N, N)
    mass = (maps * w).sum(-1)                                # (B, L, H, N)
    has = where.any(-1)[:, None, None].to(maps.dtype)        # (B, 1, 1, N)
    count = has.sum((0, -1)).clamp_min(1)                    # (1, 1)
    return (mass * has).sum((0, -1)) / count                 # (L, H)


def previous_token_scores(maps: torch.Tensor) -> torch.Tensor:
    """Mean attention from each query ``i >= 1`` to key ``i - 1``, ``(L, H)``."""
    maps, _ = _batched(maps)
    n = maps.shape[-1]
    where = torch.zeros(maps.shape[0], n, n, dtype=torch.bool, device=maps.device)
    where[:, torch.arange(1, n), torch.arange(n - 1)] = True
    return _score(maps, where)


def duplicate_token_scores(maps: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean mass on the earlier occurrences of each query's own token, ``(L, H)``."""
    maps, ids = _batched(maps, ids)
    same = ids[:, :, None] == ids[:, None, :]                               # (B, N, N)
    earlier = torch.ones_like(same[0]).tril(-1)
    return _score(maps, same & earlier)


def induction_scores(maps: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Prefix-matching score: mean mass on the keys that follow an earlier occurrence of the
    query's token, ``(L, H)``."""
    maps, ids = _batched(maps, ids)
    prev = torch.roll(ids, 1, dims=-1)                   # prev[j] = ids[j - 1]
    match = ids[:, :, None] == prev[:, None, :]          # (B, N, N): ids[i] == ids[j - 1]
    match[:, :, 0] = False                               # key 0 has no previous token
    earlier = torch.ones_like(match[0]).tril(-1)
    return _score(maps, match & earlier)


def copying_score(ov: torch.Tensor) -> float:
    """``sum(lambda) / sum(|lambda|)`` of a square OV circuit ``(V, V)``, in [-1, 1]."""
    if ov.dim() != 2 or ov.shape[0] != ov.shape[1]:
        raise ValueError(f"ov must be a square (V, V) matrix, got shape {tuple(ov.shape)}")
    eig = torch.linalg.eigvals(ov.double())
    return float(eig.sum().real / eig.abs().sum().clamp_min(1e-300))
