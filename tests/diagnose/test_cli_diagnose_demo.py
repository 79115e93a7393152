"""attnlab diagnose --demo end to end: the short experiments and their figures (slow tier: make
check)."""

from __future__ import annotations

import pytest

from attnlab.cli import main

pytestmark = pytest.mark.slow


def test_diagnose_demo_runs_the_short_experiments(capsys, tmp_path):
    # over 5 s: the only run of `diagnose --demo`, whose short trainings are the pitfalls shown
    # happening
    assert main(["diagnose", "--demo", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "why 1/√d_k" in out and "temperature at d_k = 64" in out
    assert "unscaled" in out and (tmp_path / "why_sqrt_d.png").stat().st_size > 20_000
