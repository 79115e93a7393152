"""The reference backend: the formula, written out. It is the specification.

    S = Q K^T * scale / temperature            (..., N_q, N_k)
    S = S + bias;  S[~keep] = -inf               float mask adds, bool mask / causal / window cut
    A = softmax(S)  (0 on rows with no key)      (..., N_q, N_k)
    O = dropout(A) V                             (..., N_q, D_v)

It runs in the dtype it is given (float64 for the gold standard in tests; float32 or bfloat16 to
measure the error a plain computation makes in that precision) and materializes the
N_q x N_k matrices, so it is O(N^2) in memory. Other backends differ from it only in the order of
floating-point operations.
"""

from __future__ import annotations

import torch

from attnlab.core.dropout import keep_mask
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.softmax import masked_softmax
from attnlab.core.spec import AttentionOutput, AttentionSpec


def dropout_keep_dense(spec: AttentionSpec) -> torch.Tensor:
    """The dropout keep-mask for the whole request, ``batch_shape + (N_q, N_k)``."""
    n_bh = 1
    for d in spec.batch_shape:
        n_bh *= d
    dev = spec.device
    keep = keep_mask(spec.dropout_seed, spec.dropout_p,
                     torch.arange(n_bh, device=dev).view(n_bh, 1, 1),
                     torch.arange(spec.n_q, device=dev).view(1, spec.n_q, 1),
                     torch.arange(spec.n_k, device=dev).view(1, 1, spec.n_k),
                     spec.n_q, spec.n_k)                           # (BH, N_q, N_k)
    return keep.view(*spec.batch_shape, spec.n_q, spec.n_k)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        spec: AttentionSpec) -> AttentionOutput:
    s = (q @ k.transpose(-2, -1)) * spec.score_scale          # (..., N_q, N_k)
    return weigh_values(s, v, spec)


def weigh_values(s: torch.Tensor, v: torch.Tensor, spec: AttentionSpec) -> AttentionOutput:
    """Everything after the scores: mask, softmax, dropout, A V. Shared with learned scoring
    functions (:func:`attnlab.core.api.attend`), so they follow the same contract."""
    bias = spec.float_bias()
    if bias is not None:
        s = s + bias.to(s.dtype)
    keep = spec.dense_keep()
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    a, lse = masked_softmax(s)                                 # (..., N_q, N_k), (..., N_q)
    if spec.dropout_p > 0:
        a = a * dropout_keep_dense(spec) / (1.0 - spec.dropout_p)
    out = a @ v                                                # (..., N_q, D_v)
    return AttentionOutput(out=out, weights=a if spec.need_weights else None,
                           lse=lse if spec.need_lse else None)


register_backend(
    "reference", reference_attention,
    Capabilities(exact=True, weights=True, lse=True, dropout=True, backward=True),
    description="the formula written out; materializes N_q x N_k; the specification",
    # Estimated microseconds, fitted on a 2-core CPU (B=1, H=8, D=64): low fixed cost, but it
    # writes several N_q x N_k tensors, so it only wins on tiny inputs.
    cost=lambda spec: 100.0 + 6.5e-3 * spec.entries,
)
