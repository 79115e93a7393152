"""Mask functions users compose (``from attnlab.masks import causal, and_masks``).

The public home of :mod:`attnlab.core.masks`: FlexAttention's ``mask_mod`` signature
``fn(b, h, q_idx, kv_idx) -> bool`` (True = may attend), the constructors, their combinations
and :func:`materialize`. See that module for the positions convention (bottom-right alignment
when N_q != N_k).
"""

from attnlab.core.masks import (
    MaskFn,
    and_masks,
    causal,
    dilated,
    full,
    global_tokens,
    key_padding,
    materialize,
    or_masks,
    segments,
    to_additive,
    varlen,
    window,
)

__all__ = ["MaskFn", "and_masks", "causal", "dilated", "full", "global_tokens", "key_padding",
           "materialize", "or_masks", "segments", "to_additive", "varlen", "window"]
