"""`attnlab fit forecast --id`: a long CSV of many series through the global forecaster, a
held-out comparison with the per-series baselines, the forecasts, and `predict` from the
saved model."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from attnlab.cli import main

pytestmark = pytest.mark.slow

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
                 "--force-model", "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--season 12 inferred" in text and "global forecaster" in text
    assert "1 series shorter than lookback 24 + horizon 6" in text and "s0" in text
    # 1 calibration series holds out its last 6 windows: 80% bounded, 95% (19 needed) not
    assert "the 80% interval is unbounded" not in text
    assert "the 95% interval is unbounded (-inf, inf): 6 held-out windows of 1 series" in text
    m = json.loads((out / "metrics.json").read_text())
    assert m["series"] == 12 and set(m["held_out"]) == {"global forecaster", "seasonal_naive",
                                                        "ets", "theta", "combination"}
    assert m["held_out"]["global forecaster"]["series"] == 11
    # one default base, printed with w
    assert m["base"] == m["base_final"] == "combination"
    assert f"base: combination, network weight w = {m['network_weight_w']:.2f}" in text
    # what a single series' fit writes
    for name in ("held_out.png", "model.tex", "model.md", "paper/paper.tex", "model"):
        assert (out / name).exists(), name
    fc = pd.read_csv(out / "forecast.csv")                  # the input's column names
    assert list(fc.columns[:3]) == ["store", "month", "sales"]
    assert len(fc) == 72 and fc.groupby("store").size().eq(6).all()
    assert fc[fc.store == "s1"]["month"].iloc[0] == "2020-01-01"  # after the last month
    assert main(["predict", "--model", str(out / "model"), "--out",
                 str(tmp_path / "p.csv")]) == 0
    p = pd.read_csv(tmp_path / "p.csv")
    assert np.allclose(p.sales, fc.sales) and list(p.columns) == list(fc.columns)
    # beyond the fitted horizon: refused in the command line's words
    assert main(["predict", "--model", str(out / "model"), "--horizon", "12", "--out",
                 str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err
    assert "--horizon 12 is beyond the 6 steps" in err and "--horizon 6 or less" in err


def test_a_saved_panel_forecasts_new_months_without_refitting(tmp_path, capsys):
    _long_csv(tmp_path / "long.csv")
    full = pd.read_csv(tmp_path / "long.csv")
    full["month"] = pd.to_datetime(full["month"])
    early = full[full.month < "2019-07-01"]              # six months fewer for each series
    early.assign(month=early.month.dt.strftime("%Y-%m-%d")).to_csv(tmp_path / "early.csv",
                                                                   index=False)
    out = tmp_path / "fc"
    assert main(["fit", "forecast", "--csv", str(tmp_path / "early.csv"), "--target", "sales",
                 "--time", "month", "--id", "store", "--horizon", "6", "--max-epochs", "2",
                 "--base", "theta",             # the base is not this test's subject: the
                 "--force-model", "--out", str(out)]) == 0   # fastest one
    capsys.readouterr()
    from attnlab.models import load

    fitted = load(out / "model")
    weights = {k: v.clone() for k, v in fitted.net_.state_dict().items()}
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "long.csv"),
                 "--target", "sales", "--time", "month", "--id", "store", "--out",
                 str(tmp_path / "new.csv")]) == 0
    new = pd.read_csv(tmp_path / "new.csv")
    # forecasts after the new months, not after the fitted ones
    assert new[new.store == "s1"]["month"].iloc[0] == "2020-01-01"
    # the same network: what the model predicts from the new values, nothing trained
    again = fitted.predict(Y=_as_long(tmp_path / "long.csv"))
    assert np.allclose(np.sort(again.forecast), np.sort(new.sales))
    for k, v in fitted.net_.state_dict().items():
        assert torch.equal(v, weights[k])
    # the id and target are needed with --csv
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "long.csv"),
                 "--target", "sales", "--out", str(tmp_path / "x.csv")]) == 2
    assert "needs --target COL and --id COL" in capsys.readouterr().err


def _as_long(path):
    from attnlab.cli.readers import panel_from_csv

    return panel_from_csv(path, "sales", "month", "store")


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
