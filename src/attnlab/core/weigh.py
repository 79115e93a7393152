"""Everything after the scores, written once: mask, softmax, dropout, ``A V``.

Shared by the reference backend (``S = Q K^T * scale``) and by learned scoring functions
(:func:`attnlab.core.api.attend`), so both follow the same contract.
"""

from __future__ import annotations

import math

import torch

from attnlab.core.dropout import keep_mask
from attnlab.core.softmax import masked_softmax
from attnlab.core.spec import AttentionOutput, AttentionSpec


def dropout_keep_dense(spec: AttentionSpec) -> torch.Tensor:
    """The dropout keep-mask for the whole request, ``batch_shape + (N_q, N_k)``."""
    n_bh = math.prod(spec.batch_shape)
    dev = spec.device
    keep = keep_mask(spec.dropout_seed, spec.dropout_p,
                     torch.arange(n_bh, device=dev).view(n_bh, 1, 1),
                     torch.arange(spec.n_q, device=dev).view(1, spec.n_q, 1),
                     torch.arange(spec.n_k, device=dev).view(1, 1, spec.n_k),
                     spec.n_q, spec.n_k)                           # (BH, N_q, N_k)
    return keep.view(*spec.batch_shape, spec.n_q, spec.n_k)


def grouped(t: torch.Tensor, groups: int) -> torch.Tensor:
    """Query-side ``(..., H_q, N, X)`` as ``(..., H_kv, G, N, X)`` (a view): query head
    ``h = kv * G + g``, so each K/V head broadcasts over its G query heads."""
    return t.unflatten(-3, (t.shape[-3] // groups, groups))


def weigh_values(s: torch.Tensor, v: torch.Tensor, spec: AttentionSpec) -> AttentionOutput:
    """``s (..., N_q, N_k)`` scaled scores -> mask, softmax, dropout, ``A V``."""
    bias = spec.float_bias()
    if bias is not None:
        s = s + bias.to(s.dtype)
    keep = spec.dense_keep()
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    a, lse = masked_softmax(s)                                 # (..., N_q, N_k), (..., N_q)
    if spec.dropout_p > 0:
        a = a * dropout_keep_dense(spec) / (1.0 - spec.dropout_p)
    if spec.kv_groups > 1:                                     # v (..., H_kv, N_k, D_v)
        out = (grouped(a, spec.kv_groups) @ v.unsqueeze(-3)).flatten(-4, -3)
    else:
        out = a @ v                                            # (..., N_q, D_v)
    return AttentionOutput(out=out, weights=a if spec.need_weights else None,
                           lse=lse if spec.need_lse else None)
