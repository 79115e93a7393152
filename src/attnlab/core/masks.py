"""Mask algebra: small mask functions, their combinations, and dense materialization.

A *mask function* has FlexAttention's ``mask_mod`` signature::

    mask_fn(b, h, q_idx, kv_idx) -> bool tensor   # True = query q_idx may attend key kv_idx

The four arguments are integer tensors that broadcast against each other; the function must be
elementwise (comparisons, arithmetic, indexing of small per-batch tensors). Functions written for
``torch.nn.attention.flex_attention`` work here unchanged, and the functions built here work there.

Positions. When N_q != N_k the core aligns query i with key position ``p = i + offset`` where
``offset = N_k - N_q`` (bottom-right alignment, see :mod:`attnlab.core.api`). Every constructor
that compares positions takes that ``offset`` (default 0, the usual square case)::

    causal(offset=2), N_q = 3, N_k = 5        window(1, 1), N_q = N_k = 5
          k0 k1 k2 k3 k4                            k0 k1 k2 k3 k4
      q0   x  x  x  .  .                        q0   x  x  .  .  .
      q1   x  x  x  x  .                        q1   x  x  x  .  .
      q2   x  x  x  x  x                        q2   .  x  x  x  .

Combine with :func:`and_masks` / :func:`or_masks`; turn into tensors with :func:`materialize`
(bool, True = keep) or :func:`to_additive` (0 / -inf bias).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# The band geometry lives in core.geometry; these names stay importable from here.
from attnlab.core.geometry import BandRange, band_range, tile_of  # noqa: F401

MaskFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

__all__ = [
    "MaskFn",
    "and_masks",
    "causal",
    "dilated",
    "full",
    "global_tokens",
    "key_padding",
    "materialize",
    "or_masks",
    "segments",
    "varlen",
    "to_additive",
    "window",
]


def _check_int(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}; pass a whole number")
    return value


def full() -> MaskFn:
    """Keep everything (the identity of :func:`and_masks`)."""

    def full_mask(b, h, q_idx, kv_idx):
        return (q_idx >= 0) & (kv_idx >= 0)

    return full_mask


def causal(offset: int = 0) -> MaskFn:
    """Keep key ``j`` for query ``i`` when ``j <= i + offset``.

    ``offset = N_k - N_q`` gives the core's bottom-right alignment (decoding with a cache).
    """
    offset = int(offset)

    def causal_mask(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return causal_mask


def window(left: int | None, right: int | None = 0, offset: int = 0) -> MaskFn:
    """Local attention: keep ``p - left <= j <= p + right`` with ``p = i + offset``.

    ``None`` on a side means unbounded on that side; ``window(w, 0)`` is causal local attention.
    """
    if left is not None:
        _check_int("left", left)
    if right is not None:
        _check_int("right", right)
    offset = int(offset)

    def window_mask(b, h, q_idx, kv_idx):
        p = q_idx + offset
        keep = kv_idx >= 0
        if left is not None:
            keep = keep & (kv_idx >= p - left)
        if right is not None:
            keep = keep & (kv_idx <= p + right)
        return keep

    return window_mask


def dilated(dilation: int, left: int | None = None, right: int | None = None,
            offset: int = 0) -> MaskFn:
    """Dilated local attention (Longformer, Beltagy et al. 2020): every ``dilation``-th key.

    Keeps key ``j`` when ``(p - j) % dilation == 0`` and, where given,
    ``p - left <= j <= p + right`` (``p = i + offset``). ``dilation=1`` is :func:`window`.
    """
    _check_int("dilation", dilation, minimum=1)
    band = window(left, right, offset)

    def dilated_mask(b, h, q_idx, kv_idx):
        return band(b, h, q_idx, kv_idx) & ((q_idx + offset - kv_idx) % dilation == 0)

    return dilated_mask


@dataclass(frozen=True)
class Lengths:
    """The rule of a :func:`key_padding` or :func:`varlen` mask, read by kernels that apply
    per-sequence lengths themselves (the Triton backend) instead of calling the function.

    ``q`` / ``kv``: ``(B,)`` real queries / keys per sequence (``q`` None: every query is real
    and the band, if any, is the request's own); ``band``: ``(left, right)`` aligned to each
    sequence's own lengths (:func:`varlen`), or None.
    """

    q: torch.Tensor | None
    kv: torch.Tensor
    band: tuple[int | None, int | None] | None


def key_padding(lengths: torch.Tensor | Sequence[int]) -> MaskFn:
    """Keep only real keys: key ``j`` of batch element ``b`` is kept when ``j < lengths[b]``.

    Note the polarity: this mask is True on *real* tokens. ``torch.nn.MultiheadAttention``'s
    ``key_padding_mask`` is True on *padding*; convert with ``lengths = (~pad).sum(-1)``.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths must be a 1-D integer tensor of shape (B,), got dtype {lengths.dtype} and "
            f"shape {tuple(lengths.shape)}; pass the number of real tokens per batch element"
        )

    def key_padding_mask(b, h, q_idx, kv_idx):
        return kv_idx < lengths.to(kv_idx.device)[b]

    # What the rule is, for kernels that apply lengths themselves instead of calling it
    key_padding_mask.lengths = Lengths(None, lengths, None)
    return key_padding_mask


def varlen(q_lengths: torch.Tensor, kv_lengths: torch.Tensor, *, causal: bool = False,
           window: int | tuple[int | None, int | None] | None = None) -> MaskFn:
    """Per-sequence lengths in a right-padded batch, with causal / window aligned to each
    sequence's own lengths (FlashAttention's varlen semantics).

    Sequence b has ``q_lengths[b]`` real queries and ``kv_lengths[b]`` real keys, at the start
    of its rows. Query i of b sits at key position ``p = i + kv_lengths[b] - q_lengths[b]``
    (bottom-right alignment per sequence, not for the padded lengths); causal keeps
    ``j <= p``, ``window=(left, right)`` keeps ``p - left <= j <= p + right``. Padding queries
    and keys are masked, so padding rows give output 0. ``window=w`` means ``(w, w)``.

    Example:
        >>> fn = varlen(torch.tensor([5, 9]), torch.tensor([7, 9]), causal=True)
        >>> out = attnlab.attention(q, k, v, mask=fn)          # doctest: +SKIP
    """
    if isinstance(window, int) and not isinstance(window, bool):
        window = (_check_int("window", window), window)
    ql, kl = torch.as_tensor(q_lengths), torch.as_tensor(kv_lengths)
    for name, t in (("q_lengths", ql), ("kv_lengths", kl)):
        if t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ValueError(f"{name} must be a 1-D integer tensor (B,) of real tokens per "
                             f"sequence, got dtype {t.dtype} and shape {tuple(t.shape)}")
        if (t < 0).any():
            raise ValueError(f"{name} must be >= 0, got {t.tolist()}")
    if ql.shape != kl.shape:
        raise ValueError(f"q_lengths and kv_lengths need one entry per sequence each, got "
                         f"{tuple(ql.shape)} and {tuple(kl.shape)}")
    left, right = window if window is not None else (None, None)
    if causal:
        right = 0 if right is None else min(right, 0)

    def varlen_mask(b, h, q_idx, kv_idx):
        qb, kb = ql.to(q_idx.device)[b], kl.to(q_idx.device)[b]
        keep = (q_idx < qb) & (kv_idx < kb)
        p = q_idx + (kb - qb)                                   # aligned per sequence
        if left is not None:
            keep = keep & (kv_idx >= p - left)
        if right is not None:
            keep = keep & (kv_idx <= p + right)
        return keep

    varlen_mask.lengths = Lengths(ql, kl, None if left is None and right is None
                                  else (left, right))
    return varlen_mask


def segments(q_segments: torch.Tensor, kv_segments: torch.Tensor | None = None) -> MaskFn:
    """Block-diagonal (document) masking: attend only within the same segment id.

    ``q_segments`` has shape ``(B, N_q)`` or ``(N_q,)``; ``kv_segments`` likewise for keys and
    defaults to ``q_segments`` (self-attention over packed sequences).
    """
    q_seg = torch.as_tensor(q_segments)
    kv_seg = q_seg if kv_segments is None else torch.as_tensor(kv_segments)
    for name, seg in (("q_segments", q_seg), ("kv_segments", kv_seg)):
        if seg.dim() not in (1, 2) or seg.dtype.is_floating_point:
            raise ValueError(
                f"{name} must be an integer tensor of shape (B, N) or (N,), got dtype "
                f"{seg.dtype} and shape {tuple(seg.shape)}; pass one segment id per token"
            )
    if q_seg.dim() == 1:
        q_seg = q_seg[None]
    if kv_seg.dim() == 1:
        kv_seg = kv_seg[None]

    def segment_mask(b, h, q_idx, kv_idx):
        qs, ks = q_seg.to(q_idx.device), kv_seg.to(q_idx.device)
        b_q = b if qs.shape[0] > 1 else torch.zeros_like(b)
        b_k = b if ks.shape[0] > 1 else torch.zeros_like(b)
        return qs[b_q, q_idx] == ks[b_k, kv_idx]

    segment_mask.segments = (q_seg, kv_seg)      # (B or 1, N): read by the packed backend
    return segment_mask


def global_tokens(positions: int | Sequence[int], offset: int = 0) -> MaskFn:
    """Global tokens (Longformer / BigBird): they attend everywhere and are attended by all.

    ``positions`` is a count ``n`` (the first ``n`` positions) or a list of key positions.
    Usually combined with a local pattern: ``or_masks(window(64, 64), global_tokens(1))``.
    """
    if isinstance(positions, int):
        _check_int("positions", positions)
        pos = torch.arange(positions)
    else:
        pos = torch.as_tensor(list(positions), dtype=torch.long)

    def global_mask(b, h, q_idx, kv_idx):
        g = pos.to(q_idx.device)
        return torch.isin(q_idx + offset, g) | torch.isin(kv_idx, g)

    return global_mask


def and_masks(*fns: MaskFn) -> MaskFn:
    """Keep an entry only where every mask function keeps it (intersection)."""
    if not fns:
        return full()

    def and_mask(b, h, q_idx, kv_idx):
        keep = fns[0](b, h, q_idx, kv_idx)
        for fn in fns[1:]:
            keep = keep & fn(b, h, q_idx, kv_idx)
        return keep

    return and_mask


def or_masks(*fns: MaskFn) -> MaskFn:
    """Keep an entry where any mask function keeps it (union)."""
    if not fns:
        raise ValueError("or_masks needs at least one mask function; pass e.g. or_masks(causal())")

    def or_mask(b, h, q_idx, kv_idx):
        keep = fns[0](b, h, q_idx, kv_idx)
        for fn in fns[1:]:
            keep = keep | fn(b, h, q_idx, kv_idx)
        return keep

    return or_mask


def materialize(mask_fn: MaskFn, n_q: int, n_k: int, batch: int = 1, heads: int = 1,
                device: torch.device | str | None = None,
                q_range: tuple[int, int] | None = None,
                kv_range: tuple[int, int] | None = None) -> torch.Tensor:
    """Evaluate a mask function on the grid. Returns bool ``(batch, heads, N_q, N_k)``.

    ``q_range`` / ``kv_range`` (start, stop) evaluate one tile only, for backends that work
    block by block; the result then has the tile's shape.
    """
    q0, q1 = q_range if q_range is not None else (0, n_q)
    k0, k1 = kv_range if kv_range is not None else (0, n_k)
    b = torch.arange(batch, device=device).view(batch, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, heads, 1, 1)
    q_idx = torch.arange(q0, q1, device=device).view(1, 1, q1 - q0, 1)
    kv_idx = torch.arange(k0, k1, device=device).view(1, 1, 1, k1 - k0)
    keep = mask_fn(b, h, q_idx, kv_idx)
    if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool:
        raise TypeError(
            f"mask function {getattr(mask_fn, '__name__', mask_fn)!r} must return a bool tensor, "
            f"got {type(keep).__name__}"
            f"{'' if not isinstance(keep, torch.Tensor) else ' ' + str(keep.dtype)}; "
            "build it from comparisons such as kv_idx <= q_idx"
        )
    return keep.expand(batch, heads, q1 - q0, k1 - k0)


def to_additive(keep: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Bool keep-mask -> additive bias: 0 where kept, -inf where masked."""
    if keep.dtype != torch.bool:
        raise TypeError(f"keep must be a bool tensor (True = may attend), got {keep.dtype}")
    bias = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
    return bias.masked_fill_(~keep, float("-inf"))
