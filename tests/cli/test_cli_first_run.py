"""A new user's first runs of the forecasting and table commands, on data of their own: ten
years of monthly values with the defaults, a later history to forecast from, a holiday known
in advance, a table with an identifier column. Each run works or stops at once in one line;
none is silently wrong."""

import json

import numpy as np
import pandas as pd
import pytest

from attnlab.cli import main

# one worker builds the fitted folder
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("first-run")]

SEASON = np.array([0, 2, 5, 9, 4, 1, -1, -3, -8, -4, -2, -1.0])


def _monthly(n, start="2010-01-01", seed=0):
    t = np.arange(n)
    y = 50 + 0.1 * t + SEASON[t % 12] + 0.3 * np.random.default_rng(seed).normal(size=n)
    return pd.DataFrame({"month": pd.date_range(start, periods=n, freq="MS").strftime(
        "%Y-%m-%d"), "sales": y})


@pytest.fixture(scope="module")
def ten_years(tmp_path_factory):
    """Ten years of monthly data fitted with the defaults (the run a new user makes first),
    and --force-model so that the forecast is the 2-epoch network's whatever the backtest
    says; built once for the module's three tests (over 5 s: a backtest against six
    baselines)."""
    d = tmp_path_factory.mktemp("ten_years")
    _monthly(120).to_csv(d / "s.csv", index=False)
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["fit", "forecast", "--csv", str(d / "s.csv"), "--target", "sales", "--time",
                     "month", "--max-epochs", "2", "--force-model", "--out", str(d / "fc")])
    return d, code, buf.getvalue()


def test_ten_years_of_monthly_data_fit_with_the_default_origins(ten_years):
    d, code, text = ten_years
    assert code == 0, text
    m = json.loads((d / "fc" / "metrics.json").read_text())
    # 120 months with horizon 12 and a 36-month window hold 5 origins: said, with the flag
    assert m["n_origins"] == 5
    assert "backtest over 5 origin(s), not the default 10" in " ".join(text.split())
    assert "--origins" in text
    assert m["forecast"]["time"][0] == "2020-01-01"
    # the base and w are on the console and in metrics.json; a baseline that beat the model
    # on the backtest is named, and --force-model kept the model
    assert f"base: {m['base_final']}, network weight w = {m['network_weight_w']:.2f}" in text
    won = m["baseline_won"]
    if won is not None:
        assert won["forced_model"] and "--force-model keeps the model" in " ".join(text.split())


def test_an_unbounded_interval_is_explained_where_it_appears(ten_years):
    d, _, text = ten_years
    m = json.loads((d / "fc" / "metrics.json").read_text())
    (note,) = m["interval_notes"]              # 12 held-out windows: 80% bounded, 95% not
    assert note.startswith("the 95% interval is unbounded") and "needs at least 19" in note
    assert "the 95% interval is unbounded" in " ".join(text.split())
    fc = pd.read_csv(d / "fc" / "forecast.csv")
    assert np.isfinite(fc["lower_80"]).all() and np.isinf(fc["upper_95"]).all()


def test_a_later_history_is_forecast_on_its_own_calendar(ten_years, tmp_path, capsys):
    d, _, _ = ten_years
    full = _monthly(150)
    truth = full["sales"].to_numpy()[137:149]
    full.iloc[29:137].to_csv(tmp_path / "later.csv", index=False)  # June 2012 to May 2021
    assert main(["predict", "--model", str(d / "fc" / "model"), "--csv",
                 str(tmp_path / "later.csv"), "--target", "sales", "--time", "month",
                 "--out", str(tmp_path / "p.csv")]) == 0
    p = pd.read_csv(tmp_path / "p.csv")
    assert p["month"].iloc[0] == "2021-06-01"        # the month after the history's last
    assert np.abs(p["sales"].to_numpy() - truth).max() < 2.0
    # predict writes the intervals too
    assert list(p.columns) == ["step", "month", "sales", "lower_80", "upper_80", "lower_95",
                               "upper_95"]                # the input's column names
    assert (p["lower_80"] < p["sales"]).all() and (p["sales"] < p["upper_80"]).all()
    assert "95% interval is unbounded" in " ".join(capsys.readouterr().out.split())
    # without --time: said, and no dates borrowed from the fitted series
    assert main(["predict", "--model", str(d / "fc" / "model"), "--csv",
                 str(tmp_path / "later.csv"), "--target", "sales",
                 "--out", str(tmp_path / "q.csv")]) == 0
    assert "without --time" in " ".join(capsys.readouterr().out.split())
    assert pd.read_csv(tmp_path / "q.csv")["time"].isna().all()


def _daily_with_holidays(n=200, ahead=7, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n + ahead)
    holiday = (t % 17 == 5).astype(float)                 # known in advance, irregular in weeks
    y = 20 + 3 * np.sin(2 * np.pi * t / 7) + 8 * holiday + rng.normal(size=n + ahead)
    df = pd.DataFrame({"day": pd.date_range("2024-01-01", periods=n + ahead, freq="D")
                       .strftime("%Y-%m-%d"), "visits": y, "holiday": holiday})
    df.loc[n:, "visits"] = np.nan                          # the days to forecast
    return df


def test_a_holiday_known_in_advance_is_a_future_covariate_from_the_cli(tmp_path, capsys):
    # about 5 s: the only CLI fit and predict with known-future covariates
    df = _daily_with_holidays()
    df.to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "fc"
    assert main(["fit", "forecast", "--csv", str(tmp_path / "d.csv"), "--target", "visits",
                 "--time", "day", "--future", "holiday", "--horizon", "7", "--origins", "2",
                 "--max-epochs", "2", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["forecast"]["time"][0] == "2024-07-19"      # the first empty row's date
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg["state"]["n_future"] == 1
    capsys.readouterr()
    # predict reads the rows to forecast from --csv; without --future it stops in one line
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "d.csv"),
                 "--target", "visits", "--time", "day", "--future", "holiday",
                 "--out", str(tmp_path / "p.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "p.csv")) == 7
    assert main(["predict", "--model", str(out / "model"), "--out",
                 str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "known-future column(s)" in err and "--future" in err and len(err.splitlines()) == 1
    # too few rows ahead: named before any fitting
    df.iloc[:203].to_csv(tmp_path / "short.csv", index=False)
    assert main(["fit", "forecast", "--csv", str(tmp_path / "short.csv"), "--target", "visits",
                 "--time", "day", "--future", "holiday", "--horizon", "7",
                 "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip()
    assert "has 3 row(s) after the last value" in err and "add 4 more" in err


def test_a_table_with_an_identifier_stops_at_once_and_drop_leaves_it_out(tmp_path, capsys):
    from sklearn.datasets import load_diabetes

    df = load_diabetes(as_frame=True).frame
    df.insert(0, "patient", [f"p{i:04d}" for i in range(len(df))])
    df.to_csv(tmp_path / "t.csv", index=False)
    args = ["fit", "tabular", "--csv", str(tmp_path / "t.csv"), "--target", "target",
            "--folds", "2", "--max-epochs", "1"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert "an identifier, which no model learns from" in err and "--drop patient" in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "a").exists()
    assert main(args + ["--drop", "patient", "--out", str(tmp_path / "b")]) == 0
    m = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert m["features"] == 10 and "patient" not in m["feature_importance"]
    assert main(args + ["--drop", "nope", "--out", str(tmp_path / "c")]) == 2
    assert "--drop 'nope' is not a column" in capsys.readouterr().err
