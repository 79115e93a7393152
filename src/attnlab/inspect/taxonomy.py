"""Head taxonomy of full maps: a label per head from its metrics, by the one rule table of
:mod:`attnlab.inspect.labels` (its docstring gives every threshold and its source), and flags
for degenerate heads: near-uniform (entropy ratio at least 0.95) and near-duplicate pairs
(Jensen-Shannon distance below 0.1, attnlab's threshold).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from attnlab.inspect import labels as table
from attnlab.inspect.labels import LABEL_COLORS, LABELS  # noqa: F401  (the report's palette)
from attnlab.inspect.metrics import HeadMetrics

DUPLICATE = 0.1


@dataclass
class Taxonomy:
    """A label per head, with the near-uniform and near-duplicate heads flagged."""
    labels: list[list[str]]                       # [layer][head]
    near_uniform: list[tuple[int, int]]
    duplicates: list[tuple[tuple[int, int], tuple[int, int], float]]

    def counts(self) -> dict[str, int]:
        """How many heads carry each label."""
        out = {label: 0 for label in LABELS}
        for row in self.labels:
            for label in row:
                out[label] += 1
        return out


def label_heads(m: HeadMetrics, dist: torch.Tensor | None = None) -> Taxonomy:
    """Label every head of ``m`` (``(L, H)`` metrics; the induction and duplicate-token scores
    of a causal model in ``m.match_mass`` / ``m.duplicate`` where measured); ``dist`` is the
    JS distance matrix."""
    summary = {f.name: getattr(m, f.name) for f in fields(m)
               if isinstance(getattr(m, f.name), torch.Tensor) and f.name != "baselines"}
    if m.baselines is not None:
        summary |= {k: v for k, v in zip(table.BASELINE_KEYS, m.baselines)
                    if not bool(torch.isnan(v).all())}
    n_heads = m.entropy.shape[1]
    dups = []
    if dist is not None:
        idx = torch.triu_indices(dist.shape[0], dist.shape[0], offset=1)
        for a, b in idx.T.tolist():
            if float(dist[a, b]) < DUPLICATE:
                dups.append((divmod(a, n_heads), divmod(b, n_heads), float(dist[a, b])))
    return Taxonomy(table.label_heads(summary), table.near_uniform(m.entropy_ratio), dups)
