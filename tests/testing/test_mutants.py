"""Every exercise against the catalogue of mutants (tests/testing/mutants.py): each operator
that applies to an exercise turns its reference answer into a wrong one, and the exercise's
check must fail every one. At least 6 apply to each exercise; the count is the catalogue's
report (exercises x mutants, all failing). Chapter 15's and 16's exercises on SmolLM2 (15.2,
15.3, 16.2) have their hand-written wrong answers in the slow tier
(tests/testing/test_exercises_smollm2.py)."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch

from attnlab.testing.exercises import _CHECKS, check
from tests.testing import test_exercises as answers
from tests.testing.mutants import OPERATORS, run_catalogue, tracked

MIN_MUTANTS = 6
# a verdict says what differs, never the fix (the hints hold it)
FIX_PHRASES = ("wrong way round", "you should", "you need", "instead of", "try ", "swap ",
               "the fix", "use torch", "subtract the max", "transpose it")
ON_SMOLLM2 = {"15.2", "15.3", "16.2"}


def _cases():
    """``{exercise: (reference answer, the check's other arguments, is the answer a value)}``."""
    out = {ex: (fns[0], (), False) for ex, fns in answers.RIGHT.items()}
    out["15.1"] = (answers._stats_online, (), False)
    x, y, target = answers._loo_data()
    out["7.3"] = (lambda: answers._loo_grid(x, y), (x, y, target), True)
    from attnlab.nn import RotaryEmbedding

    out["11.3"] = (answers._rope_from_module, (RotaryEmbedding(8),), False)
    return out


CASES = _cases()


def test_every_exercise_is_in_the_catalogue():
    assert set(CASES) | ON_SMOLLM2 == set(_CHECKS)


@pytest.mark.parametrize("exercise", sorted(CASES, key=lambda e: tuple(map(int,
                                                                            e.split(".")))))
def test_every_mutant_of_the_exercise_fails_its_check(exercise):
    reference, extra, is_value = CASES[exercise]
    applied, passed = run_catalogue(exercise, reference, extra, value=is_value)
    assert not passed, f"{exercise}: these mutants pass its check: {passed}"
    assert len(applied) >= MIN_MUTANTS, (exercise, [name for name, _ in applied])
    for name, detail in applied:
        said = [p for p in FIX_PHRASES if p in detail.lower()]
        assert not said, f"{exercise} {name}: the verdict states a fix ({said}): {detail}"


def test_the_catalogue_catches_a_planted_weak_check(monkeypatch):
    """A check loosened to accept anything close within 10% lets mutants through, and the
    test above would name them: the catalogue can fail."""
    from attnlab.testing.exercises import _verdict

    def loose(got, want, scale=1.0, ulps=64.0, rtol=1e-5, atol=1e-8):
        a, b = torch.as_tensor(got).double(), torch.as_tensor(want).double()
        return a.shape == b.shape and bool(((a - b).abs() <= 0.1 * b.abs() + 0.1).all())

    import attnlab.testing.exercises.sets as sets

    monkeypatch.setattr(sets, "close", loose)
    assert _verdict.close is not loose
    reference = answers.RIGHT["12.3"][0]
    with contextlib.redirect_stdout(io.StringIO()):
        v = check("12.3", tracked(OPERATORS["in_bfloat16"], reference))
    assert v.passed                                   # the loosened check misses it
