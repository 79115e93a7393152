"""The reference backend: the formula, written out. It is the specification.

    S = Q K^T * scale / temperature            (..., N_q, N_k)
    S = c tanh(S / c)                            with softcap=c (Gemma 2), before any mask
    S_ij = score_mod(S_ij, b, h, i, j)           with a score_mod (FlexAttention's signature)
    S = S + bias;  S[~keep] = -inf               float mask adds, bool mask / causal / window cut
    A = softmax(S)  (0 on rows with no key)      (..., N_q, N_k)
    O = dropout(A) V                             (..., N_q, D_v)

It runs in the dtype it is given (float64 for the gold standard in tests; float32 or bfloat16 to
measure the error a plain computation makes in that precision) and materializes the
N_q x N_k matrices, so it is O(N^2) in memory. Other backends differ from it only in the order of
floating-point operations.
"""

from __future__ import annotations

import math

import torch

from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.score_mod import apply as apply_score_mod
from attnlab.core.spec import AttentionOutput, AttentionSpec
from attnlab.core.weigh import grouped, weigh_values


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        spec: AttentionSpec) -> AttentionOutput:
    """The reference backend, the specification: the formula written out on the whole score
    matrix, ``S = Q K^T * scale / T``, softcap, score_mod, masks, softmax, dropout, ``O = A V``.

    Returns out, weights and lse in the input dtype (low precision stays low: it is the
    baseline every backend's tolerance is measured against). q ``(..., N_q, D_k)``, k
    ``(..., N_k, D_k)``, v ``(..., N_k, D_v)``; weights ``(..., N_q, N_k)``."""
    if spec.kv_groups > 1:                                     # k (..., H_kv, N_k, D_k)
        s = (grouped(q, spec.kv_groups) @ k.unsqueeze(-3).transpose(-2, -1)).flatten(-4, -3)
        s = s * spec.score_scale                               # (..., H_q, N_q, N_k)
    else:
        s = (q @ k.transpose(-2, -1)) * spec.score_scale      # (..., N_q, N_k)
    if spec.softcap is not None:                               # c tanh(s / c), Gemma 2
        s = spec.softcap * torch.tanh(s / spec.softcap)
    # by position; autograd differentiates
    if spec.score_mod is not None:
        bh = torch.arange(math.prod(spec.batch_shape), device=s.device)
        b, h = spec.head_index(bh.view(*spec.batch_shape, 1, 1))
        q_idx = torch.arange(spec.n_q, device=s.device).view(-1, 1)
        kv_idx = torch.arange(spec.n_k, device=s.device).view(1, -1)
        s = apply_score_mod(spec.score_mod, s, b, h, q_idx, kv_idx)
    return weigh_values(s, v, spec)


register_backend(
    "reference", reference_attention,
    Capabilities(exact=True, weights=True, lse=True, dropout=True, softcap=True, gqa=True,
                 score_mod=True, backward=True),
    description="the formula written out; materializes N_q x N_k; the specification",
    # Estimated microseconds, fitted on a 2-core CPU (B=1, H=8, D=64): low fixed cost, but it
    # writes several N_q x N_k tensors, so it only wins on tiny inputs.
    cost=lambda spec: 100.0 + 6.5e-3 * spec.entries,
)
