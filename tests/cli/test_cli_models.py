"""`attnlab fit forecast|tabular` and `attnlab predict`: files written, one-line usage errors."""

import json

import numpy as np
import pandas as pd
import pytest

from attnlab.cli import main


def test_fit_tabular_example_then_predict(tmp_path, capsys):
    out = tmp_path / "wine"
    assert main(["fit", "tabular", "--example", "wine", "--folds", "2", "--max-epochs", "3",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cross-validated accuracy" in text and "logistic regression" in text
    m = json.loads((out / "metrics.json").read_text())
    assert m["task"] == "classification" and len(m["cv"]) == 3
    assert all(len(v["folds"]) == 2 for v in m["cv"].values())
    assert set(m["feature_importance"]) >= {"alcohol", "proline"}
    for name in ("importance.png", "attention.png", "model.tex", "model.md",
                 "model/model.safetensors", "model/config.json"):
        assert (out / name).is_file()
    assert r"\begin{align}" in (out / "model.tex").read_text()
    from sklearn.datasets import load_wine

    df = load_wine(as_frame=True).frame
    df.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "rows.csv"),
                 "--target", "target", "--out", str(tmp_path / "pred.csv")]) == 0
    pred = pd.read_csv(tmp_path / "pred.csv")
    assert len(pred) == len(df)
    assert list(pred.columns) == ["row", "prediction", "p(0)", "p(1)", "p(2)"]
    df.insert(0, "sample", [f"s{i}" for i in range(len(df))])     # an id column
    df.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "rows.csv"),
                 "--target", "target", "--id", "sample", "--out", str(tmp_path / "pred.csv")]) == 0
    pred = pd.read_csv(tmp_path / "pred.csv")
    assert list(pred.columns[:3]) == ["row", "sample", "prediction"]
    assert pred["sample"].iloc[5] == "s5"


def test_fit_forecast_csv_with_dates_then_predict(tmp_path, capsys):
    t = np.arange(150)
    y = 5 + 0.1 * t + np.sin(2 * np.pi * t / 12) + 0.1 * np.random.default_rng(0).normal(size=150)
    dates = pd.date_range("2000-01-01", periods=150, freq="MS")
    pd.DataFrame({"month": dates.strftime("%Y-%m-%d"), "sales": y}).sample(
        frac=1, random_state=0).to_csv(tmp_path / "s.csv", index=False)   # shuffled rows
    out = tmp_path / "fc"
    assert main(["fit", "forecast", "--csv", str(tmp_path / "s.csv"), "--target", "sales",
                 "--time", "month", "--season", "12", "--horizon", "6", "--origins", "2",
                 "--refit", "--max-epochs", "3", "--out", str(out)]) == 0
    assert "MASE" in capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    assert m["forecast"]["time"][0] == "2012-07-01"       # the month after the last one
    assert set(m["backtest"]) == {"attention", "seasonal_naive", "ets", "ar", "arima", "theta",
                                  "combination"}
    fc = pd.read_csv(out / "forecast.csv")
    # the input's names: the --time and --target columns
    assert list(fc.columns) == ["step", "month", "sales", "lower_80", "upper_80", "lower_95",
                                "upper_95"]
    assert (fc["lower_95"] <= fc["lower_80"]).all() and (fc["lower_80"] <= fc["sales"]).all()
    # the saved model is the evaluated one, or the baseline that beat it on the backtest
    won = m["baseline_won"]
    assert m["base_final"] == (won["baseline"] if won else m["base_backtest"])
    assert m["refit"] is True
    for name in ("backtest.png", "attention.png", "forecast.png", "forecast.csv", "model.tex"):
        assert (out / name).is_file()
    capsys.readouterr()
    assert main(["predict", "--model", str(out / "model"), "--horizon", "9",
                 "--out", str(tmp_path / "f.csv")]) == 0
    f = pd.read_csv(tmp_path / "f.csv")
    assert len(f) == 9 and f["month"].iloc[0] == "2012-07-01"
    assert f["month"].iloc[8] == "2013-03-01" and list(f.columns[:3]) == ["step", "month", "sales"]
    assert "recursively" in capsys.readouterr().out                 # beyond the fitted 6
    assert main(["predict", "--model", str(out / "model"), "--horizon", "100000",
                 "--out", str(tmp_path / "f.csv")]) == 2
    assert "over 100 times" in capsys.readouterr().err
    assert main(["predict", "--model", str(out / "model"), "--exog", "x",
                 "--out", str(tmp_path / "f.csv")]) == 2
    assert "--exog reads the covariates of --csv" in capsys.readouterr().err
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "s.csv"),
                 "--target", "sales", "--time", "month", "--out", str(tmp_path / "g.csv")]) == 0
    assert pd.read_csv(tmp_path / "g.csv")["month"].iloc[0] == "2012-07-01"


@pytest.mark.parametrize("args, words", [
    (["fit", "tabular"], "give --csv F --target COL"),
    (["fit", "tabular", "--example", "iris"], "unknown table example 'iris'"),
    (["fit", "forecast", "--example", "co3"], "unknown series example"),
    (["fit", "forecast", "--csv", "nope.csv", "--target", "y"], "does not exist"),
    (["fit", "forecast", "--example", "co2", "--horizon", "0"], "Invalid value for '--horizon'"),
    (["predict", "--model", "nowhere"], "does not exist"),
])
def test_usage_errors_are_one_line(args, words, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_csv_problems_are_named(tmp_path, capsys):
    (tmp_path / "a.csv").write_text("x,y\n1,2\n3,4\n")
    assert main(["fit", "forecast", "--csv", str(tmp_path / "a.csv"), "--target", "z"]) == 2
    assert "--target 'z' is not a column" in capsys.readouterr().err
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00bad")
    assert main(["fit", "tabular", "--csv", str(tmp_path / "b.csv"), "--target", "y"]) == 2
    assert "not a readable CSV" in capsys.readouterr().err


def test_predict_continues_a_forecaster_fitted_with_exog(tmp_path):
    # over 5 s: the only CLI round trip of a forecaster with past covariates (fit, save,
    # predict)
    t = np.arange(120)
    x = np.cos(t / 5)
    y = 3 + np.sin(2 * np.pi * t / 12) + 0.5 * x
    dates = pd.date_range("2001-01-01", periods=120, freq="MS").strftime("%Y-%m-%d")
    pd.DataFrame({"month": dates, "y": y, "x": x}).to_csv(tmp_path / "s.csv", index=False)
    out = tmp_path / "fc"
    assert main(["fit", "forecast", "--csv", str(tmp_path / "s.csv"), "--target", "y",
                 "--time", "month", "--exog", "x", "--horizon", "3", "--origins", "1",
                 "--max-epochs", "2", "--out", str(out)]) == 0
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "s.csv"),
                 "--target", "y", "--time", "month", "--out", str(tmp_path / "p.csv")]) == 2
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "s.csv"),
                 "--target", "y", "--time", "month", "--exog", "x",
                 "--out", str(tmp_path / "p.csv")]) == 0
    p = pd.read_csv(tmp_path / "p.csv")
    assert len(p) == 3 and p["month"].iloc[0] == "2011-01-01"


def test_tabular_predict_matches_columns_by_name_and_says_what_it_leaves_out(tmp_path, capsys):
    from sklearn.datasets import load_wine

    out = tmp_path / "wine"
    assert main(["fit", "tabular", "--example", "wine", "--folds", "2", "--max-epochs", "2",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    df = load_wine(as_frame=True).frame
    base = tmp_path / "base.csv"
    df.drop(columns=["target"]).to_csv(base, index=False)
    assert main(["predict", "--model", str(out / "model"), "--csv", str(base),
                 "--out", str(tmp_path / "a.csv")]) == 0
    shuffled = df[list(reversed(df.columns))]                      # reordered, target included
    shuffled.insert(0, "id", range(len(df)))                       # and an id column
    shuffled.to_csv(tmp_path / "b.csv", index=False)
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "b.csv"),
                 "--out", str(tmp_path / "b_pred.csv")]) == 0
    said = " ".join(capsys.readouterr().out.split())                  # unwrapped
    assert "['id', 'target']" in said and "not model features" in said
    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b_pred.csv")
    assert a.equals(b)                                            # the same predictions
    df.loc[3, "alcohol"] = np.nan
    df.drop(columns=["target"]).to_csv(tmp_path / "nan.csv", index=False)
    assert main(["predict", "--model", str(out / "model"), "--csv", str(tmp_path / "nan.csv"),
                 "--out", str(tmp_path / "c.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'alcohol'" in err[0] and "row 3" in err[0]


def test_a_binary_float_target_is_classification_and_says_so(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3))
    df = pd.DataFrame(x, columns=["a", "b", "c"])
    df["y"] = (x[:, 0] > 0).astype(float)                         # 0.0 / 1.0
    df.to_csv(tmp_path / "t.csv", index=False)
    assert main(["fit", "tabular", "--csv", str(tmp_path / "t.csv"), "--target", "y",
                 "--folds", "2", "--max-epochs", "2", "--out", str(tmp_path / "o")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "task: classification" in said and "--task regression" in said
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["task"] == "classification"


@pytest.mark.parametrize("command", [
    ["fit", "forecast", "--example", "co2"],
    ["fit", "tabular", "--example", "wine"],
    ["paper", "--example", "co2", "--quick"],
])
def test_a_bad_out_is_refused_before_any_work(command, tmp_path, capsys):
    import time
    f = tmp_path / "a_file"
    f.write_text("x")
    start = time.perf_counter()
    assert main(command + ["--out", str(f)]) == 2
    assert time.perf_counter() - start < 5                        # nothing was fitted
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file" in err[0]


def test_day_first_dates_are_read_when_only_they_make_sense(tmp_path, capsys):
    t = np.arange(60)
    y = 5 + 0.1 * t + np.sin(2 * np.pi * t / 7)
    d = pd.date_range("2020-01-01", periods=60, freq="D")
    pd.DataFrame({"day": d.strftime("%d/%m/%Y"), "y": y}).to_csv(tmp_path / "d.csv", index=False)
    from attnlab.cli.readers import series_from_csv
    ys, _ = series_from_csv(tmp_path / "d.csv", "y", "day")
    assert ys.index[0] == d[0] and ys.index[-1] == d[-1] and (ys.to_numpy() == y).all()
    # both readings evenly spaced (the 1st of each month, read as days 1..12 of January):
    m = pd.date_range("2020-01-01", periods=12, freq="MS")
    pd.DataFrame({"m": m.strftime("%d/%m/%Y"), "y": np.arange(12.0)}).to_csv(
        tmp_path / "m.csv", index=False)
    assert main(["fit", "forecast", "--csv", str(tmp_path / "m.csv"), "--target", "y",
                 "--time", "m", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "both month first and day first" in err[0]


def test_a_too_short_series_never_suggests_a_horizon_of_0(capsys, tmp_path):
    y = pd.Series(np.sin(np.arange(40)) + np.arange(40) * 0.1, name="y")
    y.to_frame().to_csv(tmp_path / "s.csv", index=False)
    assert main(["fit", "forecast", "--csv", str(tmp_path / "s.csv"), "--target", "y",
                 "--season", "12", "--origins", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    # too short for the network at any origin: the base is backtested, at one origin
    assert "at most 0" not in err and "use at most 1 origins" in err
