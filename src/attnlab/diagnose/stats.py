r"""Health statistics of attention, computed block by block from the scores (no N x N matrix).

For each query row, with scores :math:`s_j` over its kept keys, :math:`L = \log\sum_j e^{s_j}`
and :math:`p_j = e^{s_j - L}`:

* the scores themselves: mean, standard deviation and maximum over every kept (query, key);
  with unit-variance, independent q and k the scaled dot product has standard deviation
  ``scale * sqrt(D_k)``, 1 under the usual ``1/sqrt(D_k)`` (``predicted_std``); from the actual
  per-dimension variances it is ``scale * sqrt(sum_d var(q_d) var(k_d))`` (``expected_std``);
* saturation: the share of rows whose largest weight exceeds 0.99 (``max_j p_j = 1 / sum_j
  e^{s_j - m}`` with m the row max);
* entropy :math:`H = L - \sum_j p_j s_j` and its ratio to ln(number of kept keys) (1: uniform,
  0: one key);
* the softmax Jacobian :math:`J = \mathrm{diag}(p) - p p^\top`, whose Frobenius norm
  :math:`\|J\|_F^2 = \sum p^2 - 2\sum p^3 + (\sum p^2)^2` is how much gradient the softmax lets
  through (0 for a one-hot row);
* sink mass: the weight on key 0.

Every per-row quantity comes from :func:`attnlab.core.stats.attention_stats` (``health=True``:
the kept scores' sums and maxima, the Jacobian's terms, entropy, largest weight, sink mass),
which walks the tiles once in linear memory; this module only reduces the rows to heads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from attnlab.core.spec import build_spec

SATURATED = 0.99        # a row whose largest weight exceeds this counts as saturated


@dataclass
class HeadStats:
    """Per-head statistics ``(H,)`` (averaged over batch and rows) of one attention call."""

    score_mean: torch.Tensor
    score_std: torch.Tensor
    score_max: torch.Tensor
    predicted_std: float
    expected_std: torch.Tensor
    saturation: torch.Tensor
    entropy: torch.Tensor
    entropy_ratio: torch.Tensor
    jacobian_norm: torch.Tensor
    sink_mass: torch.Tensor
    n_keys: int
    d_k: int

    def to_dict(self) -> dict:
        """The statistics as plain floats (JSON-ready)."""
        return {k: (v.tolist() if isinstance(v, torch.Tensor) else v)
                for k, v in asdict(self).items()}


def head_health(q: torch.Tensor, k: torch.Tensor, *, scale: float | None = None,
                temperature: float = 1.0, softcap: float | None = None, mask=None,
                causal: bool = False, window=None, block_q: int = 256,
                block_k: int = 1024) -> HeadStats:
    """Statistics of ``softmax(q k^T * scale / temperature + mask)`` per head, without
    building the ``N_q x N_k`` matrix: a reduction over rows of
    :func:`attnlab.core.stats.attention_stats`.

    Args:
        q: ``(B, H, N_q, D_k)``; k: ``(B, H_kv, N_k, D_k)`` (``H`` a multiple of ``H_kv``).
        scale, temperature, softcap, mask, causal, window: as :func:`attnlab.attention`
            (a float mask is added to the scores; a bool mask or mask function keeps keys).
        block_q, block_k: the tile computed at a time.
    """
    from attnlab.core.stats import attention_stats

    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be (B, H, N, D), got {tuple(q.shape)} and {tuple(k.shape)}")
    h, h_kv = q.shape[1], k.shape[1]
    if h % h_kv:
        raise ValueError(f"q's {h} heads are not a multiple of k's {h_kv}")
    spec = build_spec(q, k, k, mask=mask, causal=causal, window=window, scale=scale,
                      temperature=temperature, softcap=softcap, enable_gqa=h_kv != h)
    d = q.shape[3]
    c = spec.scale / spec.temperature
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qf, kf = q.detach().to(work), k.detach().to(work)
    st = attention_stats(qf, kf, mask=mask, causal=causal, window=window, scale=scale,
                         temperature=temperature, softcap=softcap, enable_gqa=h_kv != h,
                         columns=False, health=True, block=(block_q, block_k))
    live = torch.isfinite(st.lse)                                        # rows with a key
    rows = live.sum(dim=(0, 2)).clamp(min=1).double()                     # (H,)

    def per_head(x):                                                      # mean over live rows
        return (torch.where(live, x.double(), 0.0).sum(dim=(0, 2)) / rows).float()

    kept = st.kept.double()
    n_entries = kept.sum(dim=(0, 2)).clamp(min=1)
    mean = st.score_sum.double().sum(dim=(0, 2)) / n_entries
    var = (st.score_sq.double().sum(dim=(0, 2)) / n_entries - mean ** 2).clamp(min=0)
    p2, p3 = st.p2.double(), st.p3.double()
    jac = torch.sqrt(torch.clamp(p2 - 2 * p3 + p2 ** 2, min=0.0))
    ratio = torch.where(kept > 1, st.entropy.double() / torch.log(kept.clamp(min=2.0)), 0.0)
    q64, k64 = qf.double(), kf.double()
    if h_kv != h:
        k64 = k64.repeat_interleave(h // h_kv, dim=1)
    var_q = q64.var(dim=2, unbiased=False).mean(0)                           # (H, D)
    var_k = k64.var(dim=2, unbiased=False).mean(0)
    mean_q, mean_k = q64.mean(dim=2).mean(0), k64.mean(dim=2).mean(0)
    # Var(q.k) for independent q, k: sum_d (var_q var_k + var_q mu_k^2 + mu_q^2 var_k)
    expected = c * torch.sqrt((var_q * var_k + var_q * mean_k ** 2 + mean_q ** 2 * var_k).sum(-1))
    return HeadStats(
        score_mean=mean.float(), score_std=var.sqrt().float(),
        score_max=st.score_max.double().amax(dim=(0, 2)).float(),
        predicted_std=float(spec.scale * math.sqrt(d) / spec.temperature),
        expected_std=expected.float(),
        saturation=per_head((st.max_weight > SATURATED).double()),
        entropy=per_head(st.entropy), entropy_ratio=per_head(ratio),
        jacobian_norm=per_head(jac), sink_mass=per_head(st.sink_mass), n_keys=k.shape[2],
        d_k=d)
