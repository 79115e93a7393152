"""Head taxonomy: a label per head from its metrics, and flags for degenerate heads.

Thresholds, with their source:

* positional (previous / next / self token): more than 50% of the attention on that token
  on average (Clark et al. 2019, section 4.1 and figure 2, use 50% of attention to the previous
  or next token), or that token is the argmax for at least 90% of the queries (Voita et al. 2019,
  section 4.2: "attends to a specific relative position at least 90% of the time").
* sink (first token / [CLS]) and special-token ([SEP], "." and ","): more than 50% of the
  attention on them (attnlab's threshold; Clark et al. 2019, section 3, report that over half
  of the attention of BERT-base's layers 6-10 goes to [SEP], and count heads with over 60% on
  one token type). These are the "vertical" pattern of Kovaleva et al. (2019).
* block: at least 90% of the attention within the query's own sentence of a pair (Kovaleva et
  al. 2019 describe the pattern; the 90% threshold is attnlab's).
* broad: entropy of at least 80% of the uniform entropy ln n (attnlab's threshold, so that it
  means the same at any length; Clark et al. 2019, section 3.3, describe broad heads by an
  average entropy above 3.8 nats on their 128-token segments, 78% of ln 128), near-uniform
  (flagged as degenerate) at 95%.
* near-duplicate heads (flagged): Jensen-Shannon distance below 0.1 (attnlab's threshold).
* induction and duplicate token (causal models, scores from :mod:`attnlab.inspect.heads`
  when given): a prefix-matching or duplicate-token score above 0.5 (attnlab's threshold;
  Olsson et al. 2022 rank heads by the score without a cut-off). They take precedence over
  the positional labels: an induction head is also "off by one" from the duplicate.
* heterogeneous: none of the above.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.inspect.metrics import HeadMetrics

MASS = 0.5            # Clark et al. 2019
ARGMAX = 0.9          # Voita et al. 2019
BLOCK = 0.9
BROAD = 0.8
NEAR_UNIFORM = 0.95
DUPLICATE = 0.1

LABELS = ("previous token", "next token", "self", "sink", "special token", "block", "broad",
          "heterogeneous", "induction", "duplicate token")
LABEL_COLORS = dict(zip(LABELS, ["#1f77b4", "#17becf", "#9467bd", "#d62728", "#ff7f0e",
                                 "#8c564b", "#2ca02c", "#7f7f7f", "#e377c2", "#bcbd22"]),
                    cross="#444444")        # cross-attention heads: no positional class


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


def label_heads(m: HeadMetrics, dist: torch.Tensor | None = None, *,
                induction: torch.Tensor | None = None,
                duplicate: torch.Tensor | None = None) -> Taxonomy:
    """Label every head of ``m`` (``(L, H)`` metrics); ``dist`` is the JS distance matrix;
    ``induction`` / ``duplicate`` the ``(L, H)`` detector scores of a causal model."""
    from attnlab.inspect.heads import DUPLICATE as DUP_SCORE
    from attnlab.inspect.heads import INDUCTION
    n_layers, n_heads = m.entropy.shape
    labels = []
    for layer in range(n_layers):
        row = []
        for head in range(n_heads):
            g = (layer, head)

            def v(t, g=g):
                return float(t[g])

            if induction is not None and float(induction[g]) > INDUCTION:
                label = "induction"
            elif duplicate is not None and float(duplicate[g]) > DUP_SCORE:
                label = "duplicate token"
            elif v(m.prev) > MASS or v(m.prev_argmax) >= ARGMAX:
                label = "previous token"
            elif v(m.next) > MASS or v(m.next_argmax) >= ARGMAX:
                label = "next token"
            elif v(m.self) > MASS or v(m.self_argmax) >= ARGMAX:
                label = "self"
            elif v(m.first) > MASS or v(m.cls) > MASS:
                label = "sink"
            elif v(m.sep) + v(m.punct) > MASS:
                label = "special token"
            elif m.within_segment is not None and v(m.within_segment) >= BLOCK:
                label = "block"
            elif v(m.entropy_ratio) >= BROAD:
                label = "broad"
            else:
                label = "heterogeneous"
            row.append(label)
        labels.append(row)
    uniform = [(i, j) for i in range(n_layers) for j in range(n_heads)
               if float(m.entropy_ratio[i, j]) >= NEAR_UNIFORM]
    dups = []
    if dist is not None:
        idx = torch.triu_indices(dist.shape[0], dist.shape[0], offset=1)
        for a, b in idx.T.tolist():
            if float(dist[a, b]) < DUPLICATE:
                dups.append((divmod(a, n_heads), divmod(b, n_heads), float(dist[a, b])))
    return Taxonomy(labels, uniform, dups)
