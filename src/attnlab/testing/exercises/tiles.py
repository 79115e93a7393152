"""Chapter 3's checks: the online softmax's rescale factor, the running maximum over tiles, and
attention computed over chunks of keys."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.testing.exercises._verdict import Verdict, conformance, dtype_name, tolerance


def _rescale(fn: Callable) -> Verdict:
    """``fn(m, m_new)``: the factor that moves sums taken relative to m to m_new, also where
    the maxima themselves are far beyond what ``exp`` can hold (scores of 800)."""
    for m, m_new in ((1.0, 2.5), (0.3, 0.3), (-2.0, 4.0), (-math.inf, 1.0), (800.0, 801.0),
                     (-800.0, -799.0)):
        want = math.exp(m - m_new)
        answer = None
        try:
            answer = fn(m, m_new)
            got = float(answer)
        except (OverflowError, ZeroDivisionError):      # e^800 in Python; 0 / 0 below e^-745
            got = math.nan
        if math.isfinite(m) and abs(m) > 700 and not (math.isfinite(got) and got > 0):
            return Verdict("3.1", False, f"from m = {m} to m' = {m_new} the factor is "
                           f"{want:.4g}, you said {got:.4g}: e^{m:g} is beyond float64 (it "
                           "holds e^-745 to e^709), so a result built from it is lost")
        if not math.isclose(got, want, rel_tol=tolerance(answer), abs_tol=1e-300):
            hint = " (yours equals e^(m' - m))" if m > -math.inf and \
                math.isclose(got, math.exp(m_new - m), rel_tol=1e-9) and m != m_new else ""
            return Verdict("3.1", False, f"from m = {m} to m' = {m_new} the factor is "
                           f"{want:.10g}, you said {got:.10g} ({dtype_name(answer)}){hint}")
    return Verdict("3.1", True, "including the first tile (m = -inf)")


def _running_max(fn: Callable) -> Verdict:
    """``fn(scores, tile)``: the running maximum after each tile of a row of scores."""
    g = torch.Generator().manual_seed(18)
    for n, tile in ((64, 16), (50, 8), (40, 8)):
        scores = torch.randn(n, generator=g, dtype=torch.float64) * 2 + \
            torch.linspace(0, 4, n, dtype=torch.float64)         # maxima that rise
        if n == 40:             # each tile's maximum on its last key, just below the next's first
            scores = torch.arange(n, dtype=torch.float64) * 0.5
        per_tile = torch.tensor([float(scores[i:i + tile].max()) for i in range(0, n, tile)],
                                dtype=torch.float64)
        want = per_tile.cummax(0).values.tolist()
        got = [float(x) for x in fn(scores, tile)]
        # an answer may have gone through float32 (torch.tensor's default): equal within its
        # rounding, 2^-24 of the value, is right
        if len(got) != len(want):
            return Verdict("3.2", False, f"{n} scores in tiles of {tile} make {len(want)} "
                           f"tiles, one running max each; you gave {len(got)} numbers")
        bad = [i for i, (a, b) in enumerate(zip(got, want)) if abs(a - b) > 1e-6 * max(1, abs(b))]
        if bad:
            i = bad[0]
            fell = any(b < a for a, b in zip(got, got[1:]))
            return Verdict("3.2", False, f"{n} scores in tiles of {tile}: after tile {i + 1} "
                           f"the running max is {want[i]:.4f}, you said {got[i]:.4f}"
                           + (" (yours falls from one tile to the next)" if fell else ""))
    return Verdict("3.2", True, "two rows, an uneven last tile included")


def _chunked(fn: Callable) -> Verdict:
    """``fn(q, k, v, scale=None)``: attention over chunks of keys, through
    :func:`attnlab.testing.check_attention` in float64 and float32, holding at most 16 keys'
    scores at once (every tensor the code creates is watched on 5 queries and 96 keys)."""
    from attnlab.testing.exercises.efficient import _Largest

    g = torch.Generator().manual_seed(33)
    q, k, v = (torch.randn(1, 1, n, 4, generator=g, dtype=torch.float64) for n in (5, 96, 96))
    with _Largest() as watch:
        fn(q, k, v)
    if watch.largest >= 5 * 96:
        return Verdict("3.3", False, f"on 5 queries and 96 keys your code created a tensor of "
                       f"{watch.largest:,} elements, as many as all 96 keys' scores (5 x 96 = "
                       "480); the exercise holds at most 16 keys' scores at once")
    if watch.widest > 16:
        return Verdict("3.3", False, f"on 5 queries and 96 keys your code computed a tensor "
                       f"{watch.widest} wide, {watch.widest} keys' scores for one query; the "
                       "exercise holds at most 16 keys' scores at once")
    return conformance("3.3", fn)


CHECKS = {"3.1": _rescale, "3.2": _running_max, "3.3": _chunked}
