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

Everything is accumulated with the online-softmax rescaling over key tiles: running row max m and
:math:`\sum e^{k(s - m)}` for k = 1, 2, 3, and :math:`\sum e^{s-m} s`. Memory is one tile of
scores, ``(B, H, block_q, block_k)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from attnlab.core._geometry import tile_of
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


def attention_stats(q: torch.Tensor, k: torch.Tensor, *, scale: float | None = None,
                    temperature: float = 1.0, softcap: float | None = None, mask=None,
                    causal: bool = False, window=None, block_q: int = 256,
                    block_k: int = 1024) -> HeadStats:
    """Statistics of ``softmax(q k^T * scale / temperature + mask)`` per head, without
    building the ``N_q x N_k`` matrix.

    Args:
        q: ``(B, H, N_q, D_k)``; k: ``(B, H_kv, N_k, D_k)`` (``H`` a multiple of ``H_kv``).
        scale, temperature, softcap, mask, causal, window: as :func:`attnlab.attention`
            (a float mask is added to the scores; a bool mask or mask function keeps keys).
        block_q, block_k: the tile computed at a time.
    """
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be (B, H, N, D), got {tuple(q.shape)} and {tuple(k.shape)}")
    h, h_kv = q.shape[1], k.shape[1]
    if h % h_kv:
        raise ValueError(f"q's {h} heads are not a multiple of k's {h_kv}")
    if h_kv != h:
        k = k.repeat_interleave(h // h_kv, dim=1)
    spec = build_spec(q, k, k, mask=mask, causal=causal, window=window, scale=scale,
                      temperature=temperature, softcap=softcap)
    b, n_q, n_k, d = q.shape[0], q.shape[2], k.shape[2], q.shape[3]
    c = spec.scale / spec.temperature
    # tiles in float32 (float64 inputs stay float64); every sum is accumulated in float64
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qf, kf = q.detach().to(work), k.detach().to(work)
    neg = float("-inf")
    row = lambda fill: torch.full((b, h, n_q), fill, dtype=torch.float64, device=q.device)  # noqa: E731
    m, l1, l2, l3, t1 = row(neg), row(0.0), row(0.0), row(0.0), row(0.0)
    kept, s0 = row(0.0), row(neg)
    tot, tot2, smax = (torch.zeros(b, h, dtype=torch.float64, device=q.device),
                       torch.zeros(b, h, dtype=torch.float64, device=q.device),
                       torch.full((b, h), neg, dtype=torch.float64, device=q.device))
    count = torch.zeros(b, h, dtype=torch.float64, device=q.device)
    float_mask = spec.mask if spec.mask is not None and spec.mask.dtype != torch.bool else None
    bool_mask = spec.mask if spec.mask is not None and spec.mask.dtype == torch.bool else None
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        qs = qf[:, :, i0:i1]
        for j0 in range(0, n_k, block_k):
            j1 = min(j0 + block_k, n_k)
            s = torch.matmul(qs, kf[:, :, j0:j1].transpose(-1, -2)) * c     # (B, H, bq, bk)
            if spec.softcap is not None:
                s = spec.softcap * torch.tanh(s / spec.softcap)
            if float_mask is not None:
                s = s + tile_of(float_mask, (i0, i1), (j0, j1)).to(work)
            keep = torch.isfinite(s)
            structure = spec.structure_tile((i0, i1), (j0, j1))
            if structure is not None:
                keep = keep & structure
            if bool_mask is not None:
                keep = keep & tile_of(bool_mask, (i0, i1), (j0, j1))
            s = s.masked_fill(~keep, neg)
            sk = torch.where(keep, s, 0.0)
            tot += sk.sum(dim=(-1, -2)).double()
            tot2 += (sk * sk).sum(dim=(-1, -2)).double()
            count += keep.sum(dim=(-1, -2))
            smax = torch.maximum(smax, s.amax(dim=(-1, -2)).double())
            if j0 == 0:
                s0[:, :, i0:i1] = s[..., 0].double()
            kept[:, :, i0:i1] += keep.sum(dim=-1)
            m_new = torch.maximum(m[:, :, i0:i1], s.amax(dim=-1).double())
            m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
            shift = torch.where(torch.isneginf(m[:, :, i0:i1]), 0.0,
                                torch.exp(m[:, :, i0:i1] - m_safe))
            e = torch.exp(s - m_safe.unsqueeze(-1).to(work))                 # 0 where masked
            e2 = e * e
            f64 = torch.float64
            l1[:, :, i0:i1] = l1[:, :, i0:i1] * shift + e.sum(-1).to(f64)
            l2[:, :, i0:i1] = l2[:, :, i0:i1] * shift ** 2 + e2.sum(-1).to(f64)
            l3[:, :, i0:i1] = l3[:, :, i0:i1] * shift ** 3 + (e2 * e).sum(-1).to(f64)
            t1[:, :, i0:i1] = t1[:, :, i0:i1] * shift + (e * sk).sum(-1).to(f64)
            m[:, :, i0:i1] = m_new
    live = l1 > 0                                                            # rows with a key
    l_safe = torch.where(live, l1, 1.0)
    lse = torch.where(live, m + torch.log(l_safe), neg)
    entropy = torch.where(live, torch.log(l_safe) + m - t1 / l_safe, 0.0)
    sp2, sp3 = l2 / l_safe ** 2, l3 / l_safe ** 3
    jac = torch.sqrt(torch.clamp(sp2 - 2 * sp3 + sp2 ** 2, min=0.0))
    ln_n = torch.log(torch.clamp(kept, min=1.0))
    ratio = torch.where(kept > 1, entropy / torch.where(kept > 1, ln_n, 1.0), 0.0)
    sink = torch.where(live & torch.isfinite(s0), torch.exp(s0 - torch.where(live, lse, 0.0)), 0.0)
    rows = live.sum(dim=(0, 2)).clamp(min=1).double()                        # (H,)

    def per_head(x):                                                         # mean over live rows
        return (torch.where(live, x, 0.0).sum(dim=(0, 2)) / rows).float()
    n_entries = count.sum(0).clamp(min=1)
    mean = tot.sum(0) / n_entries
    var = (tot2.sum(0) / n_entries - mean ** 2).clamp(min=0)
    q64, k64 = qf.double(), kf.double()
    var_q = q64.var(dim=2, unbiased=False).mean(0)                           # (H, D)
    var_k = k64.var(dim=2, unbiased=False).mean(0)
    mean_q, mean_k = q64.mean(dim=2).mean(0), k64.mean(dim=2).mean(0)
    # Var(q.k) for independent q, k: sum_d (var_q var_k + var_q mu_k^2 + mu_q^2 var_k)
    expected = c * torch.sqrt((var_q * var_k + var_q * mean_k ** 2 + mean_q ** 2 * var_k).sum(-1))
    return HeadStats(
        score_mean=mean.float(), score_std=var.sqrt().float(), score_max=smax.amax(0).float(),
        predicted_std=float(spec.scale * math.sqrt(d) / spec.temperature),
        expected_std=expected.float(),
        saturation=per_head((1.0 / l_safe > SATURATED).double()),
        entropy=per_head(entropy), entropy_ratio=per_head(ratio),
        jacobian_norm=per_head(jac), sink_mass=per_head(sink), n_keys=n_k, d_k=d)
