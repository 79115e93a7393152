"""Every monthly series from 3 to 80 points gets a forecast and a paper from the command line:
the network's where it can train, else the base's with a note; a backtest where the series
holds an origin, else a note that the error is not measured (and the paper says the same).

The lengths where the behaviour changes (one observation more than the drift base needs, two
seasons, one backtest origin at horizon 12, the network's 58, its first backtest origin at 70)
run in ``make check``'s end-to-end tier; every other length from 3 to 80 in ``make sweeps``
(test_every_length_sweep.py; CI runs both)."""

import json

import numpy as np
import pandas as pd
import pytest

from attnlab.cli import main

pytestmark = pytest.mark.slow

BOUNDARIES = (3, 5, 13, 25, 35, 36, 57, 58, 70)


def _run(n: int, tmp_path, capsys):
    rng = np.random.default_rng(n)
    t = np.arange(n)
    y = 100 + 10 * np.sin(2 * np.pi * t / 12) + 0.5 * t + rng.normal(0, 2, n)
    csv = tmp_path / "m.csv"
    pd.DataFrame({"month": pd.date_range("2020-01-01", periods=n, freq="MS")
                  .strftime("%Y-%m-%d"), "sales": y.round(2)}).to_csv(csv, index=False)
    args = ["--csv", str(csv), "--target", "sales", "--time", "month"]
    assert main(["fit", "forecast", *args, "--max-epochs", "1", "--out",
                 str(tmp_path / "f")]) == 0, capsys.readouterr().out
    said = capsys.readouterr().out
    m = json.loads((tmp_path / "f" / "metrics.json").read_text())
    fc = pd.read_csv(tmp_path / "f" / "forecast.csv")
    # the user's column names, twelve finite steps dated after the last month
    assert list(fc.columns[:3]) == ["step", "month", "sales"] and len(fc) == 12
    assert np.isfinite(fc["sales"]).all()
    last = pd.Timestamp("2020-01-01") + pd.DateOffset(months=n - 1)
    assert pd.Timestamp(fc["month"].iloc[0]) == last + pd.DateOffset(months=1)
    assert "base:" in said and "network weight w =" in said
    for name in ("forecast.png", "model.tex", "model.md", "model", "paper/paper.tex"):
        assert (tmp_path / "f" / name).exists(), name
    if n < 36:                                   # no backtest origin at horizon 12
        assert m["backtest"] == {} and "not measured" in m["backtest_note"]
        assert "no backtest" in said
    else:
        assert "attention" in m["backtest"] and (tmp_path / "f" / "backtest.png").exists()
    if n < 58:                                   # too short for the network
        assert not m["network_in_use"] and "the base's alone" in said
    assert main(["paper", *args, "--quick", "--no-compile", "--seeds", "1", "--out",
                 str(tmp_path / "p")]) == 0, capsys.readouterr().out
    tex = (tmp_path / "p" / "paper.tex").read_text()
    assert ("not measured out of sample" in tex) == (n < 36)
    capsys.readouterr()


@pytest.mark.parametrize("n", BOUNDARIES)
def test_a_monthly_series_of_any_length_gets_a_forecast_and_a_paper(n, tmp_path, capsys):
    _run(n, tmp_path, capsys)


