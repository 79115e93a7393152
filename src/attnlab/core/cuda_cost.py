"""What ``backend="auto"`` believes each backend costs on a CUDA GPU: measured, not guessed.

The CPU cost models of the backends are fitted on a 2-core CPU; on a GPU the order is
different (the Python tile loops of ``tiled`` and ``blocksparse`` launch thousands of small
kernels, the Triton kernels fuse the loop). The table below holds picoseconds per *computed*
score, bfloat16, B=4, H=16, on one NVIDIA H200 (torch 2.11, Triton 3.6, cuDNN 9.19), from
``python scripts/gpu_check.py --sections timing`` (``benchmarks/results/gpu/``), regenerated
with ``python scripts/gpu_check.py --costs-from benchmarks/results/gpu/timings_h200.jsonl``.

``rate[(backend, kind)][head_dim][N] = (forward, forward + backward)``; ``kind`` is ``dense``
(no band), ``causal`` or ``window`` (a band). A request's cost in microseconds is the rate,
interpolated in log N and linearly in the head dim, times the scores the backend computes:
every one for SDPA with a dense mask (it cannot skip), the band's for the tiled kernels. The
forward rate is used when no gradient is needed. Backends absent from the table (the
float64 ``reference``) keep their CPU model, which prices them above every measured one.
"""

from __future__ import annotations

import math

from attnlab.core.geometry import sdpa_needs_dense_mask
from attnlab.core.spec import AttentionSpec

# (backend, kind) -> head dim -> N -> (fwd ps, fwd+bwd ps) per computed score
RATES: dict[tuple[str, str], dict[int, dict[int, tuple[float, float]]]] = {
    ('blocksparse', 'causal'): {
        64: {4096: (35.826, 108.629)},
        128: {4096: (50.026, 166.657)},
    },
    ('blocksparse', 'window'): {
        64: {4096: (77.156, 210.041)},
        128: {4096: (88.423, 199.133)},
    },
    ('sdpa', 'causal'): {
        64: {4096: (0.852, 2.754)},
        128: {4096: (1.086, 3.798)},
    },
    ('sdpa', 'dense'): {
        64: {4096: (0.6, 2.164)},
        128: {4096: (0.855, 3.147)},
    },
    ('sdpa', 'masked'): {
        64: {4096: (1.539, 4.15)},
        128: {4096: (2.052, 6.528)},
    },
    ('tiled', 'causal'): {
        64: {4096: (29.012, 80.074)},
        128: {4096: (34.826, 98.926)},
    },
    ('tiled', 'dense'): {
        64: {4096: (16.526, 53.026)},
        128: {4096: (20.956, 71.261)},
    },
    ('tiled', 'window'): {
        64: {4096: (115.203, 255.528)},
        128: {4096: (95.452, 311.51)},
    },
    ('triton', 'causal'): {
        64: {4096: (1.88, 6.001), 16384: (1.008, 4.46), 32768: (0.972, 4.245)},
        128: {4096: (2.005, 9.751), 16384: (1.397, 7.923), 32768: (1.543, 7.725)},
    },
    ('triton', 'dense'): {
        64: {4096: (1.237, 4.493), 16384: (0.86, 3.947), 32768: (0.871, 3.863)},
        128: {4096: (1.473, 8.502), 16384: (1.301, 7.497), 32768: (1.302, 7.438)},
    },
    ('triton', 'window'): {
        64: {4096: (3.21, 11.031), 16384: (1.88, 7.829), 32768: (1.512, 7.409)},
        128: {4096: (4.255, 16.862), 16384: (2.333, 14.186)},
    },
    ('triton_blocksparse', 'causal'): {
        64: {4096: (2.649, 7.099), 16384: (1.768, 5.608), 32768: (1.732, 5.456)},
        128: {4096: (4.365, 15.584), 16384: (3.277, 13.338), 32768: (3.254, 13.17)},
    },
    ('triton_blocksparse', 'window'): {
        64: {4096: (3.743, 12.502), 16384: (2.555, 9.528), 32768: (2.43, 9.287)},
        128: {4096: (6.467, 23.374), 16384: (5.218, 21.546)},
    },
}
# Measured kinds a backend falls back on for requests the table has no row for: the dense
# kernels price a padding or varlen mask as dense work, the block-sparse ones any layout as
# a window's per-score rate over the tiles it keeps.
_FALLBACK = {"triton": "dense", "tiled": "dense", "triton_blocksparse": "window",
             "blocksparse": "window"}


def _interp(points: dict[int, tuple[float, float]], n: float, which: int) -> float:
    xs = sorted(points)
    if n <= xs[0]:
        return points[xs[0]][which]
    if n >= xs[-1]:
        return points[xs[-1]][which]
    for lo, hi in zip(xs, xs[1:]):
        if lo <= n <= hi:
            t = (math.log(n) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return (1 - t) * points[lo][which] + t * points[hi][which]
    raise AssertionError("unreachable")


def _rate(table: dict[int, dict[int, tuple[float, float]]], d: int, n: float, which: int
          ) -> float:
    dims = sorted(table)
    if d <= dims[0]:
        return _interp(table[dims[0]], n, which) * max(d, 16) / dims[0]
    if d >= dims[-1]:
        return _interp(table[dims[-1]], n, which) * d / dims[-1]
    lo, hi = dims[0], dims[-1]
    t = (d - lo) / (hi - lo)
    return (1 - t) * _interp(table[lo], n, which) + t * _interp(table[hi], n, which)


def _kind(name: str, spec: AttentionSpec) -> str:
    band = spec.band
    if name == "sdpa":
        if sdpa_needs_dense_mask(spec):
            return "masked"
        return "causal" if spec.causal else "dense"
    if band is None:
        return "dense" if spec.mask_fn is None and spec.mask is None else _FALLBACK.get(name, "")
    left, right = band
    return "causal" if left is None and right == 0 else "window"


def _pairs_below(c: int, n_q: int, n_k: int) -> int:
    """Pairs (i, j), 0 <= i < n_q, 0 <= j < n_k, with j <= i + c: the sum over i of
    clamp(i + c + 1, 0, n_k), in closed form."""
    def cum(x: int) -> int:                      # sum of clamp(y, 0, n_k) for y = 0 .. x
        if x < 0:
            return 0
        if x <= n_k:
            return x * (x + 1) // 2
        return n_k * (n_k + 1) // 2 + (x - n_k) * n_k

    t = c + 1
    return cum(t + n_q - 1) - cum(t - 1) if t >= 0 else cum(t + n_q - 1)


def _computed(spec: AttentionSpec, kind: str) -> float:
    """Scores the backend computes: all of them, or those inside the band."""
    if kind in ("dense", "masked") or spec.band is None:
        return float(spec.entries)
    left, right = spec.band
    n_q, n_k, off = spec.n_q, spec.n_k, spec.offset
    hi = n_k if right is None else right          # key j kept when p - left <= j <= p + right
    lo = n_q + n_k if left is None else left
    kept = _pairs_below(off + hi, n_q, n_k) - _pairs_below(off - lo - 1, n_q, n_k)
    return float(kept) * spec.entries / max(n_q * n_k, 1)


def cuda_cost(name: str, spec: AttentionSpec) -> float | None:
    """Estimated microseconds of backend ``name`` serving ``spec`` on a CUDA GPU, or None if
    the table has no row for it (its CPU model applies)."""
    kind = _kind(name, spec)
    table = RATES.get((name, kind))
    if table is None:
        return None
    which = 1 if spec.requires_grad else 0
    n = math.sqrt(max(spec.n_q * spec.n_k, 1))
    d = max(spec.d_k, spec.d_v)
    return 10.0 + _rate(table, d, n, which) * _computed(spec, kind) * 1e-6
