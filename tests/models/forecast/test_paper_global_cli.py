"""attnlab paper --id end to end on a long CSV (slow tier: make check)."""

import pandas as pd
import pytest

from tests.models.forecast.test_paper_global import (
    _panel,  # noqa: F401  (fixtures and helpers)
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("paper_global")]


def test_the_paper_command_on_a_long_csv(tmp_path):
    # the only end-to-end run of `attnlab paper --id` (the global model's paper)
    from attnlab.cli import main

    rows = [(uid, d.strftime("%Y-%m-%d"), v) for uid, y in _panel(k=8, n=40).items()
            for d, v in y.items()]
    pd.DataFrame(rows, columns=["store", "month", "sales"]).to_csv(tmp_path / "p.csv",
                                                                  index=False)
    assert main(["paper", "--csv", str(tmp_path / "p.csv"), "--target", "sales", "--time",
                 "month", "--id", "store", "--horizon", "6", "--quick", "--no-compile",
                 "--out", str(tmp_path / "p")]) == 0
    tex = (tmp_path / "p" / "paper.tex").read_text()
    assert "one attention network across 8 series" in tex and "DRAFT" in tex
    assert main(["paper", "--csv", str(tmp_path / "p.csv"), "--target", "sales", "--id",
                 "store", "--origins", "3"]) == 2
