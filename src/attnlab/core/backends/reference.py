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


def absorbed_rows_by_formula(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             spec: AttentionSpec, out: torch.Tensor,
                             top: torch.Tensor | None = None) -> torch.Tensor:
    """``out`` with the rows the input dtype's arithmetic decides replaced by the formula's.

    A row whose every key carries a float mask of magnitude >= 1 / eps of q's dtype (the
    dtype's minimum: transformers' left padding) has its scores rounded away by ``S + m``:
    the formula in that dtype (eager attention, this reference) gives such a row the mask's
    own softmax, a uniform average under ``finfo.min``. A backend that shifts the mask or adds
    it in a wider dtype keeps the scores instead; it calls this with its ``out`` to give those
    rows the reference's answer and gradient. Only the union of such rows over the batch is
    computed, ``(..., R, N_k)``. Requests with a score_mod or dropout are returned unchanged
    (their rows depend on positions this does not carry over). ``top``: each row's largest
    mask entry ``(..., N_q, 1)`` in q's dtype, when the caller has it (not computed twice)."""
    bias = spec.float_bias()
    if bias is None or spec.score_mod is not None or spec.dropout_p > 0:
        return out
    bias = bias.to(q.dtype)
    if top is None:
        top = bias.detach().amax(dim=-1, keepdim=True)             # (..., N_q or 1, 1)
    absorbed = (top <= -1.0 / torch.finfo(q.dtype).eps) & ~torch.isneginf(top)
    if not bool(absorbed.any()):
        return out
    n_q, n_k = spec.n_q, spec.n_k
    absorbed = absorbed.expand(*absorbed.shape[:-2], n_q, 1)
    rows = absorbed.reshape(-1, n_q).any(0).nonzero().squeeze(1)
    sub_bias = bias.expand(*bias.shape[:-2], n_q, n_k).index_select(-2, rows)
    r0, r1 = int(rows[0]), int(rows[-1]) + 1
    keep = spec.structure_tile((r0, r1), (0, n_k))               # causal / window of those rows
    if keep is not None:
        sub_bias = sub_bias.masked_fill(~keep.index_select(-2, rows - r0), float("-inf"))
    q_r = q.index_select(-2, rows)
    from attnlab.core.spec import build_spec

    sub = build_spec(q_r, k, v, mask=sub_bias, scale=spec.score_scale, softcap=spec.softcap,
                     enable_gqa=spec.kv_groups > 1)
    ref = reference_attention(q_r, k, v, sub).out                 # (..., R, D_v)
    mine = out.index_select(-2, rows)
    return out.index_copy(-2, rows, torch.where(absorbed.index_select(-2, rows), ref, mine))


register_backend(
    "reference", reference_attention,
    Capabilities(exact=True, weights=True, lse=True, dropout=True, softcap=True, gqa=True,
                 score_mod=True, backward=True),
    description="the formula written out; materializes N_q x N_k; the specification",
    # Estimated microseconds, fitted on a 2-core CPU (B=1, H=8, D=64): low fixed cost, but it
    # writes several N_q x N_k tensors, so it only wins on tiny inputs.
    cost=lambda spec: 100.0 + 6.5e-3 * spec.entries,
)
