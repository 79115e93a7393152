"""The paper on the global forecaster: the competitions' held-out split, the panel ablation,
the two language templates and the vector figures."""

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from attnlab.models.forecast.evaluation import holdout_panel, panel_ablation, split_panel
from attnlab.models.forecast.global_model import GlobalForecaster
from attnlab.models.forecast.paper import PaperInputs, paper_tex, pieces, undefined_symbols

# one worker runs the module: its measured panel (the held-out fit and the ablation, 15 s) is
# computed once, not once per xdist worker
pytestmark = pytest.mark.xdist_group("paper_global")
SHAPE = np.array([0, 1, 3, 6, 3, 1, 0, -1, -4, -6, -2, -1.0])
FAST = dict(season=12, base="ets", hidden_size=8, max_epochs=4, patience=2, seed=0)


def _panel(k=14, n=48, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(k):
        t = np.arange(n) + rng.integers(12)
        level = rng.uniform(20, 80)
        y = level + SHAPE[t % 12] * level / 40 + 0.3 * rng.normal(size=n)
        out[f"series_{i}"] = pd.Series(y, index=pd.date_range("2010-01-01", periods=n,
                                                               freq="MS"))
    return out


@pytest.fixture(scope="module")
def measured():
    Y = _panel()
    model = GlobalForecaster(6, **FAST)
    r = holdout_panel(model, Y)
    ab = panel_ablation(model, Y, seeds=(0, 1, 2), series="demo", done=r)
    return Y, r, ab


def test_the_held_out_split_scores_each_series_in_its_own_scale(measured):
    from attnlab.models.forecast.baselines import forecast_errors, seasonal_scale

    Y, r, _ = measured
    ids, train, test, _ = split_panel(Y, 6)
    assert r.ids == ids and np.array_equal(r.actual, np.stack(test))
    # the ETS row by hand: each series' MASE in its own scale, then the mean
    by_hand = [forecast_errors(test[i], r.forecasts["ets"][i], seasonal_scale(train[i], 12))
               for i in range(len(ids))]
    assert r.metrics["ets"]["MASE"] == pytest.approx(np.mean([e["MASE"] for e in by_hand]))
    assert set(r.metrics) == {"attention", "seasonal_naive", "ets", "arima", "theta",
                              "combination"}
    assert r.attention.shape == (14, r.model.effective_lookback)
    np.testing.assert_allclose(r.attention.sum(1), 1, atol=1e-5)
    with pytest.raises(ValueError, match="at most horizon=6 observations"):
        split_panel({"a": np.arange(30.0), "b": np.arange(5.0)}, 6)


def test_the_panel_ablation_reuses_the_evaluation_and_keeps_the_bases_alone(measured):
    _, r, ab = measured
    assert ab.mase["base + attention"][0] == r.metrics["attention"]["MASE"]
    assert ab.mase["base alone (ets)"] == [r.metrics["ets"]["MASE"]]
    assert all(len(ab.mase[k]) == 3 for k in ("base + attention", "base + mean pooling",
                                              "network, no base"))


def test_both_templates_have_the_same_pieces():
    assert list(pieces("en")) == list(pieces("zh"))
    for lang in ("en", "zh"):
        words = {w for text in pieces(lang).values() for w in re.findall(r"@(\w+)", text)}
        assert words, lang


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_global_paper_names_the_model_that_forecasts(measured, lang):
    import copy

    Y, r, ab = measured
    sens = {"lookback": [(12, 0.5), (18, 0.6)]}
    inp = PaperInputs(r.model, r, "demo_panel", r.ids, ablation=ab, sensitivity=sens)
    tex = paper_tex(inp, lang)
    first = tex.split(r"\section*")[1].split(r"\subsection*")[0]
    w = f"$w = {r.model.shrink_:.2f}$"
    if lang == "en":
        assert "one attention network across 14 series" in tex
        assert "each series' own base, Holt--Winters" in first and w in first
        assert "paired t-test over the series' MASE" in tex
    else:
        assert "14 条序列共用一个注意力网络" in tex and w in first
    assert f"{r.metrics['attention']['MASE']:.3f}" in tex and "demo\\_panel" in tex
    assert "%" not in tex.replace(r"\%", "") and "@" not in tex
    # symbols, comparison, per-series spread, ablation, sensitivity
    assert tex.count(r"\begin{table}") == 5
    assert undefined_symbols(r.model.equations()) == set()
    # with w = 0 the bases alone forecast, and the first paragraph says so
    base_only = copy.copy(r.model)
    base_only.shrink_ = 0.0
    tex0 = paper_tex(PaperInputs(base_only, r, "demo", r.ids), lang)
    first0 = tex0.split(r"\section*")[1].split(r"\subsection*")[0]
    assert ("own base, Holt--Winters exponential smoothing (ETS).}" in first0 if lang == "en"
            else "即其自身的基准模型" in first0)


def test_unbounded_intervals_are_said_not_scored(measured):
    import copy

    _, r, _ = measured
    wide = copy.copy(r)
    a = r.forecasts["attention"]
    wide.intervals = {0.8: (a - 1e-9, a + 1e-9),                   # bounded (and too narrow)
                      0.95: (np.full_like(a, -np.inf), np.full_like(a, np.inf))}
    tex = paper_tex(PaperInputs(r.model, wide, "demo", r.ids), "en")
    assert r"The 95\% intervals are unbounded here" in tex
    assert r"The 95\% interval is too wide" not in tex
    assert r"The 80\% interval is too narrow" in tex


@pytest.mark.parametrize("lang,engine", [("en", "pdflatex"), ("zh", "xelatex")])
def test_the_global_paper_compiles_with_vector_figures(measured, tmp_path, lang, engine):
    assert shutil.which(engine), f"{engine} is not installed (see scripts/system-deps.sh)"
    from attnlab.cli.jobs import write_paper

    Y, r, ab = measured
    inp = PaperInputs(r.model, r, "demo", r.ids, ablation=ab)
    files = write_paper(tmp_path, inp, lang, True, train=split_panel(Y, 6)[1])
    assert {"architecture.pdf", "attention.pdf", "backtest.pdf", "paper.pdf"} <= set(files)
    assert inp.shown == 6
    for fig in ("architecture", "attention", "backtest"):                # vector, not pixels
        head = (tmp_path / f"{fig}.pdf").read_bytes()[:5]
        assert head == b"%PDF-"
    if shutil.which("pdffonts"):          # TrueType figures, no Type 3 font anywhere
        for name in ("architecture", "attention", "backtest", "paper"):
            listed = subprocess.run(["pdffonts", str(tmp_path / f"{name}.pdf")],
                                    capture_output=True, text=True).stdout
            assert "Type 3" not in listed, (name, listed)
    if lang == "zh" and shutil.which("pdffonts"):
        # the Chinese figures carry their words in a CJK font, not English or empty boxes
        from attnlab.plots.paper import cjk_font_file

        fonts = subprocess.run(["pdffonts", str(tmp_path / "architecture.pdf")],
                               capture_output=True, text=True).stdout.splitlines()[2:]
        assert cjk_font_file(), "no CJK font: scripts/system-deps.sh installs one"
        # Latin letters and digits in DejaVu Sans (proportional), the Chinese in the CJK face;
        # every font TrueType (Type 3 is rejected by publishers' checkers)
        assert any("DejaVu" not in line for line in fonts), fonts       # the CJK face
        assert any("DejaVuSans" in line for line in fonts), fonts
        assert all("TrueType" in line for line in fonts), fonts


