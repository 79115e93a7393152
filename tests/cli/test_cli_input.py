"""User input the commands refuse, each with one line naming the input and the fix (and exit
code 2), before any expensive work; and output that stays readable in a narrow terminal."""

import shutil
import subprocess
import sys

import pandas as pd
import pytest

from attnlab.cli import main
from attnlab.nn.bert import default_model_path


def _refused(capsys, args, words):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    return err


@pytest.fixture
def model_copy(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(default_model_path(), dst)
    return dst


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text(capsys, tmp_path, text):
    _refused(capsys, ["inspect", text, "--out", str(tmp_path)], "TEXT is empty")
    _refused(capsys, ["explain", "--model", "default", "--text", text, "--no-plots"],
             "--text is empty")


def test_a_model_folder_without_tokenizer(capsys, tmp_path, model_copy):
    for f in ("tokenizer.json", "vocab.txt"):
        (model_copy / f).unlink()
    _refused(capsys, ["inspect", "hello", "--model", str(model_copy), "--out", str(tmp_path)],
             "holds no tokenizer")


def test_a_truncated_safetensors_file(capsys, tmp_path, model_copy):
    w = model_copy / "model.safetensors"
    w.write_bytes(w.read_bytes()[:10_000])
    _refused(capsys, ["inspect", "hello", "--model", str(model_copy), "--out", str(tmp_path)],
             "truncated or corrupted")


def test_a_broken_config(capsys, tmp_path, model_copy):
    (model_copy / "config.json").write_text("{ not json")
    err = _refused(capsys, ["inspect", "hello", "--model", str(model_copy),
                            "--out", str(tmp_path)], "config.json")
    assert "not valid JSON" in err


def test_explain_refuses_long_text_and_model_temperature(capsys):
    _refused(capsys, ["explain", "--model", "default", "--no-plots", "--text",
                      " ".join(["word"] * 80)], "at most 64")
    _refused(capsys, ["explain", "--model", "default", "--temperature", "5", "--no-plots"],
             "--temperature")


def test_out_naming_a_file(capsys, tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    _refused(capsys, ["inspect", "hello", "--out", str(f)], "is a file")
    _refused(capsys, ["explain", "--out", str(f)], "is a file")


def test_unknown_words_are_said(capsys, tmp_path):
    assert main(["explain", "--model", "default", "--no-plots", "--text", "注意力机制"]) == 0
    assert "[UNK]" in capsys.readouterr().out


def test_explain_is_readable_in_a_pipe():
    """Piped (80 columns), a 20-token sentence prints every number whole, in column blocks."""
    # over 5 s: a fresh interpreter in a pipe (80 columns, no terminal); the only test of
    # explain's piped layout
    text = "Attention lets every token look at every other token and average what they say."
    proc = subprocess.run([sys.executable, "-m", "attnlab.cli", "explain", "--model", "default",
                           "--no-plots", "--text", text], capture_output=True, text=True,
                          timeout=120, env={"COLUMNS": "80", "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in proc.stdout
    assert "columns 0-" in proc.stdout


def _series_csv(tmp_path, df):
    path = tmp_path / "series.csv"
    df.to_csv(path, index=False)
    return str(path)


@pytest.fixture
def monthly():
    import numpy as np
    import pandas as pd

    dates = pd.date_range("2000-01-01", periods=60, freq="MS")
    return pd.DataFrame({"date": dates.strftime("%Y-%m-%d"),
                         "y": np.sin(np.arange(60) * 0.5) + 10, "price": np.arange(60) * 1.5})


@pytest.mark.parametrize("edit, words", [
    (lambda df: __import__("pandas").concat([df, df.iloc[[5]]]), "repeats 2000-06-01"),
    (lambda df: df.drop(index=[7]), "after 2000-07-01 comes 2000-09-01"),
    (lambda df: df.assign(y=df.y.where(df.index != 3, 1e300)), "1e+300 at line 5 of"),
    (lambda df: df.assign(y=5.0), "is constant"),
])
def test_forecast_csv_refusals(capsys, tmp_path, monthly, edit, words):
    path = _series_csv(tmp_path, edit(monthly))
    _refused(capsys, ["fit", "forecast", "--csv", path, "--target", "y", "--time", "date",
                      "--out", str(tmp_path / "out")], words)


def test_a_numeric_time_column_is_refused(capsys, tmp_path, monthly):
    path = _series_csv(tmp_path, monthly)
    _refused(capsys, ["fit", "forecast", "--csv", path, "--target", "y", "--time", "price",
                      "--out", str(tmp_path / "out")], "holds numbers")


def test_season_is_inferred_from_the_dates(tmp_path, monthly):
    from attnlab.cli.readers import season_of, series_from_csv

    y, _ = series_from_csv(_series_csv(tmp_path, monthly), "y", "date")
    assert season_of(y.index) == 12
    days = monthly.assign(date=__import__("pandas").date_range("2001-01-01", periods=60,
                                                             freq="D").strftime("%Y-%m-%d"))
    y, _ = series_from_csv(_series_csv(tmp_path, days), "y", "date")
    assert season_of(y.index) == 7


def test_a_horizon_too_long_for_a_backtest_forecasts_and_says_what_would_fit(capsys, tmp_path,
                                                                             monthly):
    path = _series_csv(tmp_path, monthly)
    assert main(["fit", "forecast", "--csv", path, "--target", "y", "--time", "date",
                 "--horizon", "40", "--max-epochs", "1", "--out", str(tmp_path / "out")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "no backtest: 60 observations hold no origin with horizon 40" in said
    assert "--horizon 36 or less would allow one" in said     # 60 months less two seasons
    assert len(pd.read_csv(tmp_path / "out" / "forecast.csv")) == 40


@pytest.fixture
def table():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    return pd.DataFrame({"a": rng.normal(size=40), "b": rng.normal(size=40),
                         "label": ["x", "y"] * 20, "value": rng.normal(size=40)})


@pytest.mark.parametrize("edit, args, words", [
    (lambda df: df.assign(a=df.a.where(df.index != 5)), ["--target", "label"], "empty at line 7"),
    (lambda df: df.assign(a=df.a.astype(object).where(df.index != 3, "12,5kg")),
     ["--target", "label"], "numeric except '12,5kg' at line 5"),
    (lambda df: df.assign(label="x"), ["--target", "label"], "one class only"),
    (lambda df: df, ["--target", "label", "--task", "regression"], "needs a numeric --target"),
    (lambda df: df[["label"]], ["--target", "label"], "nothing to predict from"),
    (lambda df: df.assign(label=["x"] * 38 + ["y"] * 2), ["--target", "label"], "fewer than "
     "--folds 5"),
])
def test_tabular_csv_refusals(capsys, tmp_path, table, edit, args, words):
    path = tmp_path / "t.csv"
    edit(table).to_csv(path, index=False)
    _refused(capsys, ["fit", "tabular", "--csv", str(path), *args, "--out",
                      str(tmp_path / "out")], words)


def test_predict_and_bench_and_check_refusals(capsys, tmp_path):
    _refused(capsys, ["bench", "--model", "mine", "--out", str(tmp_path)],
             "--model takes 'default'")
    _refused(capsys, ["check", "nowhere"], "is neither package.module:function nor a "
             "registered backend")
