"""`attnlab fit forecast --id`: a long CSV of many series through the global forecaster, a
held-out comparison with the per-series baselines, the forecasts, and `predict` from the
saved model."""

import json

import numpy as np
import pandas as pd

from attnlab.cli import main

SHAPE = np.array([0, 1, 3, 6, 3, 1, 0, -1, -4, -6, -2, -1.0])


def _long_csv(path, k=12):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(k):
        n = 60 if i else 9                                  # one series too short for a window
        level = rng.uniform(20, 80)
        t = np.arange(n) + rng.integers(12)
        y = level + SHAPE[t % 12] * level / 40 + 0.3 * rng.normal(size=n)
        dates = pd.date_range("2015-01-01", periods=n, freq="MS").strftime("%Y-%m-%d")
        rows.append(pd.DataFrame({"store": f"s{i}", "month": dates, "sales": y}))
    pd.concat(rows).sample(frac=1, random_state=0).to_csv(path, index=False)   # any row order


def test_many_series_from_one_long_csv(tmp_path, capsys):
    _long_csv(tmp_path / "long.csv")
    out = tmp_path / "fc"
    assert main(["fit", "forecast", "--csv", str(tmp_path / "long.csv"), "--target", "sales",
                 "--time", "month", "--id", "store", "--horizon", "6", "--max-epochs", "3",
                 "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--season 12 inferred" in text and "global forecaster" in text
    assert "1 series shorter than lookback 24 + horizon 6" in text and "s0" in text
    # 1 calibration series holds out its last 6 windows: 80% bounded, 95% (19 needed) not
    assert "the 80% interval is unbounded" not in text
    assert "the 95% interval is unbounded (-inf, inf): 6 held-out windows of 1 series" in text
    m = json.loads((out / "metrics.json").read_text())
    assert m["series"] == 12 and set(m["held_out"]) == {"global forecaster", "seasonal_naive",
                                                        "ets", "theta"}
    assert m["held_out"]["global forecaster"]["series"] == 11
    fc = pd.read_csv(out / "forecast.csv")
    assert len(fc) == 72 and fc.groupby("unique_id").size().eq(6).all()
    assert fc[fc.unique_id == "s1"]["ds"].iloc[0] == "2020-01-01"  # after the last month
    assert main(["predict", "--model", str(out / "model"), "--out",
                 str(tmp_path / "p.csv")]) == 0
    p = pd.read_csv(tmp_path / "p.csv")
    assert np.allclose(p.forecast, fc.forecast) and list(p.columns) == list(fc.columns)


def test_many_series_refusals_are_one_line(tmp_path, capsys):
    _long_csv(tmp_path / "long.csv", k=3)
    args = ["fit", "forecast", "--csv", str(tmp_path / "long.csv"), "--target", "sales",
            "--out", str(tmp_path / "o")]
    assert main(args + ["--id", "shop"]) == 2
    assert "--id 'shop' is not a column" in capsys.readouterr().err
    assert main(args + ["--id", "store", "--origins", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "with --id the last --horizon values of each series are held out" in err
    assert len(err.splitlines()) == 1


def test_a_gap_in_one_series_of_a_long_csv_is_named(tmp_path, capsys):
    _long_csv(tmp_path / "long.csv", k=3)
    df = pd.read_csv(tmp_path / "long.csv")
    df = df.drop(df[(df.store == "s1") & (df.month == "2016-03-01")].index)
    df.to_csv(tmp_path / "gap.csv", index=False)
    assert main(["fit", "forecast", "--csv", str(tmp_path / "gap.csv"), "--target", "sales",
                 "--time", "month", "--id", "store", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "series 's1': --time column 'month' is not evenly spaced" in err
    assert len(err.splitlines()) == 1
