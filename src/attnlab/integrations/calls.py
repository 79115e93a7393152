"""What a transformers attention call means in attnlab's terms: its ``causal`` and ``window``
(the rule both bridges share), the sequences packed along a padding-free row, and the mask
functions registered beside each name (None where the flags say it all).

Refusals of what attnlab does not compute are :class:`UnsupportedAttentionOption`.
"""

from __future__ import annotations

import torch


class UnsupportedAttentionOption(ValueError):
    """transformers asked attnlab's attention for something attnlab cannot reproduce."""


def causal_and_window(module, is_causal, sliding_window, n_q: int,
                      masked: bool = False) -> tuple[bool, tuple[int, int] | None]:
    """The one rule both bridges to transformers (this module and
    :mod:`attnlab.distributed.hf`) turn a call's flags into ``causal`` and ``window`` by.

    Causal: transformers' rule of its sdpa implementation, the call's ``is_causal``, else the
    module's, True when the module has none; only without a mask and for more than one query
    (one query attends to every cached key). Window: only without a mask (a mask already
    holds it); ``sliding_window`` keys up to the query, ``(w - 1, 0)``, for a causal module,
    and ``w - 1`` on each side for a bidirectional one, as flash-attn's ``window_size``."""
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    causal = bool(is_causal) and not masked and n_q > 1
    window = None
    if sliding_window is not None and not masked:
        w = int(sliding_window) - 1
        window = (w, 0 if is_causal else w)
    return causal, window


def packed_segments(module, kwargs, n_q: int, n_k: int):
    """Sequence ids ``(N_q,), (N_k,)`` of a padding-free batch (``cu_seq_lens_q`` /
    ``cu_seq_lens_k``: cumulative lengths of the sequences packed along the row), or None."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None and cu_k is None:
        return None
    cu_q = cu_k if cu_q is None else cu_q
    cu_k = cu_q if cu_k is None else cu_k
    if cu_q.shape != cu_k.shape or (n_q == n_k and not torch.equal(cu_q, cu_k)):
        raise UnsupportedAttentionOption(
            f"{type(module).__name__} passed cu_seq_lens_q {cu_q.tolist()} and cu_seq_lens_k "
            f"{cu_k.tolist()}: attnlab takes packed self-attention, where both delimit the same "
            "sequences; pass a padded batch with an attention_mask for anything else")
    if int(cu_q[-1]) > n_q or int(cu_k[-1]) > n_k:
        raise UnsupportedAttentionOption(
            f"{type(module).__name__} passed cu_seq_lens ending at {int(cu_q[-1])} / "
            f"{int(cu_k[-1])} for {n_q} queries and {n_k} keys: the packed lengths must fit "
            "the row (batch size 1, as transformers' DataCollatorWithFlattening makes it)")
    # position p belongs to sequence s when cu[s] <= p < cu[s + 1]; tokens past the last end
    # (padding of the packed row) form a sequence of their own
    seg_q = torch.searchsorted(cu_q[1:].contiguous(), torch.arange(n_q, device=cu_q.device),
                               right=True)
    seg_k = torch.searchsorted(cu_k[1:].contiguous(), torch.arange(n_k, device=cu_k.device),
                               right=True)
    return seg_q, seg_k


def make_mask(style: str):
    """A mask function for transformers' ``AttentionMaskInterface``: None where the backend
    can take causal / window flags instead (no padding, transformers' plain causal or
    sliding-window mask, the last query aligned with the last key), else the mask built by
    transformers' own ``sdpa_mask`` (bool, True = may attend) or ``eager_mask`` (float)."""
    from transformers.masking_utils import (
        _ignore_causal_mask_sdpa,
        eager_mask,
        prepare_padding_mask,
        sdpa_mask,
    )

    def attnlab_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
                     attention_mask=None, local_size=None, allow_is_causal_skip=True,
                     allow_is_bidirectional_skip=False, **kwargs):
        if allow_is_causal_skip:
            padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
            plain = padding is None or bool(padding.all())
            aligned = (not isinstance(q_offset, torch.Tensor)
                       and not isinstance(kv_offset, torch.Tensor)
                       and int(q_offset) + q_length == int(kv_offset) + kv_length)
            if plain and aligned:
                return None          # causal (and a window) from the flags: no N x N mask
            if local_size is None and _ignore_causal_mask_sdpa(padding, q_length, kv_length,
                                                               q_offset, kv_offset):
                return None          # transformers' own case: an empty static cache
        build = sdpa_mask if style == "bool" else eager_mask
        return build(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                     q_offset=q_offset, kv_offset=kv_offset, attention_mask=attention_mask,
                     local_size=local_size, allow_is_causal_skip=False,
                     allow_is_bidirectional_skip=allow_is_bidirectional_skip, **kwargs)

    attnlab_mask.__name__ = f"attnlab_{style}_mask"
    return attnlab_mask
