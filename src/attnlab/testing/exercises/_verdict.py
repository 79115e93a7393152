"""The one-line verdict every exercise check returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Verdict:
    """One exercise's verdict: ``passed``, and what was off when it did not."""

    exercise: str
    passed: bool
    detail: str

    def __str__(self) -> str:
        if self.passed:
            return f"exercise {self.exercise} passed ({self.detail})"
        return f"exercise {self.exercise} FAIL: {self.detail}"
