"""PyTorch's fused ``scaled_dot_product_attention`` wherever the request fits it.

Differences it hides:

* **Causal alignment.** SDPA's ``is_causal=True`` is *top-left* aligned (query i keeps keys
  j <= i). attnlab's causal is bottom-right aligned (j <= i + N_k - N_q). They agree only when
  N_q == N_k; otherwise we pass the bottom-right mask explicitly.
* **Temperature** is folded into SDPA's ``scale`` argument (scale / temperature).
* **Fully masked rows.** Some SDPA kernels (and older torch releases) return NaN there. We
  unmask such rows before the call and zero them after, so output and gradients are exactly 0.
* **Huge additive masks.** A float mask is shifted by each row's largest entry, so that torch's
  backward, which recomputes the probabilities from one log-sum-exp, never meets an lse that
  the mask rounded. Rows where every key carries a mask of magnitude >= 1 / eps (the dtype's
  minimum: transformers' left padding) are decided by the dtype's arithmetic, which rounds the
  scores away: they get the reference's answer (eager's: the mask's own softmax, a uniform
  average under ``finfo.min``) and its gradient, as every other backend does.

SDPA returns neither weights nor lse, and its dropout draws from torch's global generator, not
the caller's, so those requests go to other backends.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.core.backends.reference import absorbed_rows_by_formula
from attnlab.core.geometry import sdpa_needs_dense_mask
from attnlab.core.registry import Capabilities, register_backend
from attnlab.core.spec import AttentionOutput, AttentionSpec


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   spec: AttentionSpec) -> AttentionOutput:
    """The sdpa backend: torch's fused ``scaled_dot_product_attention`` with attnlab's contract.

    Bottom-right causal alignment and windows become an explicit bool mask, fully masked rows
    give exact zeros, and a float mask is shifted by each row's largest entry (the softmax is
    unchanged). Differs from the reference in torch's kernel's order of operations; returns
    neither weights nor lse."""
    gqa = {"enable_gqa": True} if spec.kv_groups > 1 else {}     # K/V heads shared, not copied
    if not sdpa_needs_dense_mask(spec):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal,
                                             scale=spec.score_scale, **gqa)
        return AttentionOutput(out=out)

    # bool, broadcastable to (..., N_q, N_k)
    keep = spec.dense_keep()
    bias = spec.float_bias()
    if bias is not None:
        bias = bias.to(q.dtype)
        if keep is not None:
            bias = bias.masked_fill(~keep, float("-inf"))
        # Each row's largest entry is subtracted (a constant per row: the softmax and the
        # formula's gradient are unchanged), so torch's backward, which recomputes P from one
        # lse, never meets an lse that a huge mask rounded (P = 1 instead of 1/N).
        top = bias.detach().amax(dim=-1, keepdim=True)            # (..., N_q, 1)
        empty = torch.isneginf(top)
        attn_mask = (bias - top.masked_fill(empty, 0.0)).masked_fill(empty, 0.0)
    else:
        empty = ~keep.any(dim=-1, keepdim=True)
        attn_mask = keep | empty
    # SDPA wants the batch dims of the mask to broadcast with q's: give it full rank.
    while attn_mask.dim() < q.dim():
        attn_mask = attn_mask.unsqueeze(0)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=spec.score_scale,
                                         **gqa)
    out = out.masked_fill(empty, 0.0)                         # (..., N_q, D_v)
    if bias is None:
        return AttentionOutput(out=out)
    # The shift keeps the scores of rows whose every key carries the dtype's minimum, where
    # the formula in that dtype (eager's) rounds them away: those rows get the reference's.
    return AttentionOutput(out=absorbed_rows_by_formula(q, k, v, spec, out, top=top))




def _sdpa_cost(spec: AttentionSpec) -> float:
    """Estimated microseconds, fitted on a 2-core CPU (B=1, H=8, D=64)."""
    per_score = 1.1e-3
    if spec.causal and not sdpa_needs_dense_mask(spec):
        per_score *= 0.5                                      # its kernels skip the upper triangle
    elif sdpa_needs_dense_mask(spec):
        per_score *= 1.4                                      # builds and reads an N_q x N_k mask
    return 50.0 + per_score * spec.entries


register_backend(
    "sdpa", sdpa_attention,
    Capabilities(exact=True, weights=False, lse=False, dropout=False, gqa=True, backward=True),
    description="torch.nn.functional.scaled_dot_product_attention (fused kernels)",
    cost=_sdpa_cost,
    linear_memory=lambda spec: not sdpa_needs_dense_mask(spec),   # else an N_q x N_k mask is built
)
