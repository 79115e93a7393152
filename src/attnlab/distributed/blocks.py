"""Ring attention's blocks: which (query piece, key piece) blocks a band leaves, and each
block's forward and backward through the single-process core.

A block is a contiguous global query range against a contiguous global key range. The global
band (causal and window, bottom-right aligned on the whole sequences) becomes the block's own
``window`` after trimming the block to the rows and keys the band leaves in it; where the shift
cannot be written as a window it becomes a mask function. The user's mask function is shifted
to global indices, a key mask is sliced with its keys. Used by :mod:`attnlab.distributed.ring`
(each rank's blocks as the shards arrive) and by :func:`~attnlab.distributed.simulate_ring`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core import geometry as G
from attnlab.core import masks as M
from attnlab.core.api import attention, no_dispatch
from attnlab.core.engine.eager.loop import block_backward
from attnlab.core.softmax import merge_partials
from attnlab.core.spec import build_spec, compute_dtype
from attnlab.distributed import layout as L
from attnlab.distributed._checks import DTYPES


@dataclass(frozen=True)
class Options:
    """What every block call gets: the global band, the user's mask function, the rest."""

    band: tuple[int | None, int | None] | None     # causal folded in (right = 0)
    offset: int                                    # N_k - N_q of the whole sequences
    mask_fn: object
    scale: float | None
    softcap: float | None
    gqa: bool
    backend: str
    block_dtype: torch.dtype | None = None          # the dtype blocks are computed in


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype partial results merge in and gradients accumulate in: float64 for float32 and
    float64 inputs, float32 for half precision. A float32 merge over P partials rounds the lse
    and the output once per partial, and with large logits that error grew with P (dq x3 at
    P = 4); in float64 it does not (docs/distributed.md has the measurement)."""
    return torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32


def band_of(causal: bool, window) -> tuple[int | None, int | None] | None:
    """Causal and window folded into one (left, right) band, None when unbounded."""
    return G.fold_band(causal, G.validate_window(window))


def plan_steps(q_ranges, k_ranges, band, offset: int, mask_fn) -> int:
    """Rotations needed: the largest t at which some rank's queries see the shard of rank r-t
    (all P-1 when a mask function may keep anything)."""
    world = len(q_ranges)
    if mask_fn is not None or band is None:
        return world - 1
    need = 0
    for t in range(1, world):
        for r in range(world):
            src = (r - t) % world
            if any(G.visible(band, offset, qr, kr) for qr in q_ranges[r] for kr in k_ranges[src]):
                need = t
    return need


def _piece_options(key_mask, gq: tuple[int, int], gk: tuple[int, int], opts: Options) -> dict:
    """The core's keyword arguments for one (query piece, key piece) block at global ranges
    ``gq``, ``gk``: the global band as the block's own window, the mask function shifted to
    global indices, the key mask."""
    q0, k0 = gq[0], gk[0]
    fns: list = []
    window = None
    kind, value = G.block_band(opts.band, opts.offset, gq, gk)
    if kind == "window":
        window = value
    elif kind == "shift":                               # an alignment no window expresses
        left, right = opts.band

        def band_fn(b, h, qi, ki, d=value, left=left, right=right):
            keep = torch.ones_like(qi + ki, dtype=torch.bool)
            if left is not None:
                keep = keep & (ki >= qi + d - left)
            if right is not None:
                keep = keep & (ki <= qi + d + right)
            return keep
        fns.append(band_fn)
    if opts.mask_fn is not None:
        fn = opts.mask_fn
        fns.append(lambda b, h, qi, ki, fn=fn: fn(b, h, qi + q0, ki + k0))
    mask = None
    if key_mask is not None:
        if fns:
            km = key_mask[:, None, None, :]               # (B, 1, 1, n_k), indexed per tile
            fns.append(lambda b, h, qi, ki, km=km: km.index_select(-1, ki.reshape(-1)))
        else:
            mask = key_mask[:, None, None, :]             # (B, 1, 1, n_k)
    if fns:
        mask = fns[0] if len(fns) == 1 else M.and_masks(*fns)
    return dict(mask=mask, window=window, scale=opts.scale, softcap=opts.softcap,
                enable_gqa=opts.gqa)


def _in_block_dtype(opts: Options, *ts):
    if opts.block_dtype is None or ts[0].dtype == opts.block_dtype:
        return ts
    return tuple(t.to(opts.block_dtype) for t in ts)


def _piece_call(q, k, v, key_mask, gq, gk, opts: Options):
    """One block through the single-process core: ``(out, lse)``."""
    q, k, v = _in_block_dtype(opts, q, k, v)
    with no_dispatch():
        res = attention(q, k, v, backend=opts.backend, return_lse=True,
                        **_piece_options(key_mask, gq, gk, opts))
    return res.out, res.lse


def pieces(q_ranges, k_ranges, opts: Options):
    """The visible (local q slice, global q range, local k slice, global k range) blocks, each
    trimmed to the rows and keys the band leaves in it (so that the block's own window can
    express the band and the backends skip what it excludes)."""
    for lq0, _, gq0, gq1 in L.local_slices(q_ranges):
        for lk0, _, gk0, gk1 in L.local_slices(k_ranges):
            trimmed = G.trim(opts.band, opts.offset, (gq0, gq1), (gk0, gk1))
            if trimmed is None:
                continue
            (a0, a1), (b0, b1) = trimmed
            yield ((lq0 + a0 - gq0, lq0 + a1 - gq0), (a0, a1),
                   (lk0 + b0 - gk0, lk0 + b1 - gk0), (b0, b1))


def accumulate(acc_o, acc_l, q, q_ranges, k, v, key_mask, k_ranges, opts: Options) -> int:
    """Merge the partials of local queries against one K/V shard into ``(acc_o, acc_l)``
    (in place). Returns the number of (query, key) pairs computed, the block's work."""
    work = 0
    for (lq0, lq1), gq, (lk0, lk1), gk in pieces(q_ranges, k_ranges, opts):
        km = None if key_mask is None else key_mask[:, lk0:lk1]
        o, lse = _piece_call(q[..., lq0:lq1, :], k[..., lk0:lk1, :], v[..., lk0:lk1, :], km,
                             gq, gk, opts)
        merged = merge_partials(acc_o[..., lq0:lq1, :], acc_l[..., lq0:lq1],
                                o.to(acc_o.dtype), lse.to(acc_l.dtype))
        acc_o[..., lq0:lq1, :], acc_l[..., lq0:lq1] = merged
        work += (lq1 - lq0) * (lk1 - lk0)
    return work


def block_grads(q, q_ranges, k, v, key_mask, k_ranges, opts: Options, out, lse, d_out, d_lse,
                dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> None:
    """Add the gradients of local queries against one K/V shard to ``dq``, ``dk``, ``dv`` (in
    place, accumulator dtype): each block's tile backward against the merged ``(out, lse)``
    (:func:`attnlab.core.engine.eager.loop.block_backward`), which recomputes the block's
    probabilities from the global lse, so the blocks' gradients sum to the whole's. Nothing
    gradient-sized is allocated: every tile adds into the accumulators."""
    for (lq0, lq1), gq, (lk0, lk1), gk in pieces(q_ranges, k_ranges, opts):
        qp, kp, vp = _in_block_dtype(opts, q[..., lq0:lq1, :], k[..., lk0:lk1, :],
                                     v[..., lk0:lk1, :])
        km = None if key_mask is None else key_mask[:, lk0:lk1]
        spec = build_spec(qp, kp, vp, return_lse=True, **_piece_options(km, gq, gk, opts))
        block_backward(qp, kp, vp, out[..., lq0:lq1, :], lse[..., lq0:lq1],
                       d_out[..., lq0:lq1, :], None if d_lse is None else d_lse[..., lq0:lq1],
                       spec, into=(dq[..., lq0:lq1, :], dk[..., lk0:lk1, :],
                                   dv[..., lk0:lk1, :]))


def block_dtype_for(dtype: torch.dtype, given: torch.dtype | None) -> torch.dtype | None:
    """The dtype blocks are computed in: the given one (checked), or float32 for half inputs."""
    if given is not None:
        if given not in DTYPES:
            raise TypeError(f"block_dtype must be one of {DTYPES} or None, got {given!r}")
        return given
    compute = compute_dtype(dtype)
    return compute if compute != dtype else None
