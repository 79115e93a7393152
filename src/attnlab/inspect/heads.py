"""Causal-model head detectors, with their published definitions.

The masses come from :func:`attnlab.core.stats.reference_stats` (``prev_mass``,
``dup_mass``, ``match_mass``: the definitions the census uses); this module keeps what is its
own, the batched detector scores and the OV copying score.

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


def _rows(maps: torch.Tensor, ids: torch.Tensor | None) -> list:
    """Each sequence's row statistics ``(L, H, N)`` from :func:`attnlab.core.stats.reference_stats`
    (one definition of the masses, shared with the census)."""
    from attnlab.core.stats import reference_stats

    return [reference_stats(maps[b], ids=None if ids is None else ids[b])
            for b in range(maps.shape[0])]


def _mean_over(values: list[torch.Tensor], where: list[torch.Tensor]) -> torch.Tensor:
    """Mean of ``values[b] (L, H, N)`` over the queries ``where[b] (N,)`` of every sequence."""
    total = sum((v * w.to(v.dtype)).sum(-1) for v, w in zip(values, where))
    count = sum(int(w.sum()) for w in where)
    return total / max(count, 1)


def previous_token_scores(maps: torch.Tensor) -> torch.Tensor:
    """Mean attention from each query ``i >= 1`` to key ``i - 1``, ``(L, H)``."""
    maps, _ = _batched(maps)
    n = maps.shape[-1]
    where = torch.arange(n, device=maps.device) >= 1
    return _mean_over([s.prev_mass for s in _rows(maps, None)], [where] * maps.shape[0])


def duplicate_token_scores(maps: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean mass on the earlier occurrences of each query's own token (``dup_mass`` of
    :func:`attnlab.core.stats.reference_stats`), over the queries that have one, ``(L, H)``."""
    from attnlab.inspect.labels import earlier_copy

    maps, ids = _batched(maps, ids)
    return _mean_over([s.dup_mass for s in _rows(maps, ids)],
                      [earlier_copy(ids[b]) for b in range(maps.shape[0])])


def induction_scores(maps: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Prefix-matching score: mean mass on the keys that follow an earlier occurrence of the
    query's token (``match_mass`` of :func:`attnlab.core.stats.reference_stats`), over the
    queries that have one, ``(L, H)``."""
    from attnlab.inspect.labels import earlier_match

    maps, ids = _batched(maps, ids)
    return _mean_over([s.match_mass for s in _rows(maps, ids)],
                      [earlier_match(ids[b]) for b in range(maps.shape[0])])


def copying_score(ov: torch.Tensor) -> float:
    """``sum(lambda) / sum(|lambda|)`` of a square OV circuit ``(V, V)``, in [-1, 1]."""
    if ov.dim() != 2 or ov.shape[0] != ov.shape[1]:
        raise ValueError(f"ov must be a square (V, V) matrix, got shape {tuple(ov.shape)}")
    eig = torch.linalg.eigvals(ov.double())
    return float(eig.sum().real / eig.abs().sum().clamp_min(1e-300))
