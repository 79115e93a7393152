"""Checks for the tutorials' exercises (docs/tutorials/): each takes what the reader wrote and
says, in one line, whether it is right and, if not, what is off.

    from attnlab.testing.exercises import check
    check("7.1", dot_form)          # prints "exercise 7.1 passed" or "exercise 7.1 FAIL: ..."
    hint("7.1")                     # a nudge; hint("7.1", 2), ... up to the full explanation

A failure says what differs and where (which entry, which dtype, which input), never the fix:
the fix is in the hints, which the reader asks for.

Every check is tested against three correct answers written different ways (the solution, one
in another dtype, one another way) and against the wrong answers a reader plausibly writes
(tests/testing/test_exercises.py). Expected values are computed in float64 and compared within
the rounding of the dtype the answer came in.
"""

from __future__ import annotations

from attnlab.testing.exercises import (
    basics,
    blocks,
    decoding,
    efficient,
    heads,
    matters,
    pitfalls,
    pooling,
    positions,
    reading,
    scale,
    seq2seq,
    sets,
    tiles,
    transformer,
)
from attnlab.testing.exercises._verdict import Verdict
from attnlab.testing.exercises.hints import HINTS, hint
from attnlab.testing.exercises.pooling import gaussian_weights, loo_mse, nadaraya_watson

__all__ = ["HINTS", "Verdict", "check", "gaussian_weights", "hint", "loo_mse",
           "nadaraya_watson"]

# the modules in the chapters' order: 1-2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
CHAPTERS = (basics, tiles, blocks, reading, pitfalls, pooling, decoding, seq2seq, transformer,
            positions, sets, efficient, scale, heads, matters)
_CHECKS = {name: fn for module in CHAPTERS for name, fn in module.CHECKS.items()}


def check(exercise: str, answer, *args, **kwargs) -> Verdict:
    """Check ``answer`` to ``exercise`` (e.g. ``"7.1"``) and print the one-line verdict."""
    if exercise not in _CHECKS:
        raise ValueError(f"exercise must be one of {', '.join(_CHECKS)}, got {exercise!r}")
    try:
        verdict = _CHECKS[exercise](answer, *args, **kwargs)
    except NotImplementedError:
        verdict = Verdict(exercise, False, "not written yet (the cell still raises "
                          "NotImplementedError)")
    except Exception as err:                      # the reader's code failed: say how
        verdict = Verdict(exercise, False, f"your code raised {type(err).__name__}: {err}")
    print(verdict)
    return verdict
