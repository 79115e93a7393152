"""Packed documents: a block-diagonal segment mask served one document at a time.

Sequences packed into one row (``masks.segments(ids)``, transformers' ``cu_seq_lens`` or
packed ``position_ids``) attend only within their own document. When every document is one
contiguous run of positions, shared by queries and keys, the attention of the row *is* the
attention of each document alone::

    ids  0 0 0 1 1 2 2 2 2       ->   attention(q[0:3], k[0:3], v[0:3]) | ... | (q[5:9], ...)

with causal masks and windows unchanged (they are relative to the diagonal, which each
document keeps). Each document runs on the cheapest exact backend for its own length (SDPA's
fused kernels where they fit), so the work is the sum of the documents' squares, never the
row's, and no mask is built or read. Autograd runs through the slices, so gradients are those
of the backends that serve the documents.

Not served here (other backends take them): score modifiers (they see positions), dropout
(its mask is drawn per position of the row), weights, segment ids that differ across the batch
or between queries and keys, and a document split into several runs.
"""

from __future__ import annotations

import dataclasses

import torch

from attnlab.core.registry import Capabilities, register_backend, select_backend
from attnlab.core.spec import AttentionOutput, AttentionSpec

PER_DOCUMENT_US = 40.0      # the call overhead of one document (a slice and a backend call)


def documents(spec: AttentionSpec) -> list[tuple[int, int]] | None:
    """``[(start, end), ...]`` covering ``0..N`` when spec's mask is a segment mask of contiguous
    documents shared by queries and keys (and nothing else masks), else None."""
    seg = getattr(spec.mask_fn, "segments", None)
    if seg is None or spec.mask is not None or spec.n_q != spec.n_k:
        return None
    q_seg, kv_seg = seg
    if q_seg.shape[-1] != spec.n_q or kv_seg.shape[-1] != spec.n_k:
        return None
    ids = q_seg[0]
    if bool((q_seg != ids).any()) or not torch.equal(kv_seg.expand_as(q_seg), q_seg):
        return None                                     # differs per batch row, or q from k
    ids = ids.to("cpu")
    cut = torch.nonzero(ids[1:] != ids[:-1]).flatten() + 1
    bounds = [0, *cut.tolist(), spec.n_q]
    runs = ids[torch.tensor(bounds[:-1])]
    if runs.unique().numel() != runs.numel():
        return None                                     # a document in several pieces
    return list(zip(bounds[:-1], bounds[1:]))


def _part(spec: AttentionSpec, n: int) -> AttentionSpec:
    return dataclasses.replace(spec, n_q=n, n_k=n, mask_fn=None)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     spec: AttentionSpec) -> AttentionOutput:
    """The packed backend: each document attended alone on the cheapest exact backend for it,
    the outputs (and lse) concatenated in place of the row's. Differs from the reference only
    where the documents' backends do (their order of operations)."""
    outs, lses = [], []
    for a, b in documents(spec):
        part = _part(spec, b - a)
        res = select_backend("auto", part).fn(q[..., a:b, :], k[..., a:b, :], v[..., a:b, :],
                                              part)
        outs.append(res.out)
        lses.append(res.lse)
    lse = torch.cat(lses, dim=-1) if spec.need_lse else None
    return AttentionOutput(out=torch.cat(outs, dim=-2), lse=lse)


def _check(spec: AttentionSpec) -> str | None:
    if documents(spec) is None:
        return ("it needs a segment mask (masks.segments) of contiguous documents, the same "
                "for queries, keys and every batch row, and no other mask tensor")
    return None


def _cost(spec: AttentionSpec) -> float:
    """The documents' own costs on their cheapest backends, plus a call each."""
    total = 0.0
    for a, b in documents(spec):
        part = _part(spec, b - a)
        best = select_backend("auto", part)
        total += best.cost(part) + PER_DOCUMENT_US
    return total


register_backend(
    "packed", packed_attention,
    Capabilities(exact=True, weights=False, lse=True, dropout=False, softcap=True, gqa=True,
                 score_mod=False, backward=True),
    description="packed documents (a segment mask): each document on its own best backend",
    cost=_cost, check=_check,
    linear_memory=lambda spec: all(
        (b := select_backend("auto", _part(spec, e - s))).linear_memory is not None
        and b.linear_memory(_part(spec, e - s)) for s, e in documents(spec)),
)
