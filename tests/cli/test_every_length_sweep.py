"""Every monthly length from 3 to 80 that is not a boundary, through fit forecast and paper
(the sweep: make sweeps)."""

import pytest

from tests.cli.test_every_length import BOUNDARIES, _run

pytestmark = pytest.mark.sweep


@pytest.mark.parametrize("n", [n for n in range(3, 81) if n not in BOUNDARIES])
def test_every_other_length_from_3_to_80(n, tmp_path, capsys):
    _run(n, tmp_path, capsys)
