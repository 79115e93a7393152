"""The hybrid forecaster: statistical bases with fixed parameters, the network correcting them,
the shrink toward the base, the ablation, and the bundled series."""

import numpy as np
import pytest
import torch

from attnlab.models import AttentionForecaster, load
from attnlab.models.datasets import load_series
from attnlab.models.forecast import bases as B
from attnlab.models.forecast.ablation import ablation
from attnlab.models.forecast.baselines import ar_forecast, ets_forecast

FAST = dict(hidden_size=16, max_epochs=30, patience=8, seed=0)


def _series(n=240, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 10 + 0.05 * t + 2 * np.sin(2 * np.pi * t / 12) + 0.3 * rng.normal(size=n)


@pytest.mark.parametrize("season", [12, 1])
def test_the_ets_filter_is_statsmodels_holt_winters(season):
    y = _series(200)
    base = B.ETS.fit(y[:150], season)
    assert np.allclose(base.forecasts(y, [150], 12)[0], ets_forecast(y[:150], 12, season),
                       atol=1e-6)
    # its state carried to the middle of the series continues the same filter
    st = base.state_before(y, 90)
    assert np.allclose(base.forecasts(y[90:], [60], 12, st), base.forecasts(y, [150], 12))


def test_the_ar_recursion_is_statsmodels_autoreg():
    from statsmodels.tsa.ar_model import AutoReg
    rng = np.random.default_rng(0)
    y = np.zeros(200)
    for t in range(2, 200):                                       # a stationary AR(2)
        y[t] = 1.0 + 0.6 * y[t - 1] - 0.3 * y[t - 2] + rng.normal()
    base = B.AR.fit(y[:150], 1)
    assert base.diff == 0
    ref = AutoReg(y[:150], lags=base.lags, trend="c").fit().predict(150, 161)
    assert np.allclose(base.forecasts(y, [150], 12)[0], ref)
    assert np.allclose(base.forecasts(y, [150], 12)[0], ar_forecast(y[:150], 12, 1))
    many = base.forecasts(y, [120, 150], 5)                       # any origins at once
    assert many.shape == (2, 5) and np.allclose(many[1], base.forecasts(y, [150], 5)[0])


def test_a_random_walk_is_differenced_not_extrapolated():
    from statsmodels.tsa.ar_model import AutoReg
    from vega_datasets import local_data
    s = local_data.stocks()
    y = s[s.symbol == "AAPL"].sort_values("date")["price"].to_numpy(float)[:96]  # to 2007
    levels = B.AR._fit(y, 1, 0)
    assert not levels.stationary()              # AutoReg on the levels: an explosive root
    base = B.AR.fit(y, 1)
    assert base.diff == 1 and base.stationary()
    ref = AutoReg(np.diff(y), lags=base.lags, trend="c").fit().predict(95, 106)
    fc = base.forecasts(y, [96], 12)[0]
    assert np.allclose(fc, y[-1] + np.cumsum(ref))
    grow = levels.forecasts(y, [96], 60)[0]
    assert grow[-1] - grow[-13] > grow[11] - grow[0]      # the levels' fit accelerates
    # a long stationary cycle keeps its levels (a unit-root test would difference it)
    assert B.AR.fit(load_series("sunspots").y.to_numpy(float), 11).diff == 0


@pytest.mark.parametrize("name", ["drift", "arima", "theta", "combination"])
@pytest.mark.parametrize("season", [12, 1])
def test_the_new_bases_forecast_from_any_origin_and_round_trip(name, season):
    y = _series(200)
    base = B.fit_base(name, y[:150], season)
    one = base.forecasts(y[:150], np.array([150]), 12)[0]
    # the filter over a longer series gives the same forecast at the same origin
    assert np.allclose(base.forecasts(y, np.array([150]), 12)[0], one, atol=1e-8)
    st = base.state_before(y, 90)                               # carried to the middle
    assert np.allclose(base.forecasts(y[90:], np.array([60]), 12, st)[0], one, atol=1e-8)
    again = B.base_from_dict(base.to_dict())
    assert np.allclose(again.forecasts(y[:150], np.array([150]), 12)[0], one)


def test_arima_and_theta_equal_statsmodels_at_the_fitted_end():
    from statsmodels.tsa.arima.model import ARIMA
    from statsmodels.tsa.forecasting.theta import ThetaModel
    y = _series(200)
    a = B.ARIMA.fit(y, 12)
    ref = ARIMA(y, order=a.order, seasonal_order=a.seasonal_order, trend=a.trend).filter(
        np.asarray(a.params)).forecast(12)
    assert np.allclose(a.forecasts(y, np.array([200]), 12)[0], ref)
    t = B.Theta.fit(y, 12)
    assert np.allclose(t.forecasts(y, np.array([200]), 12)[0],
                       ThetaModel(y, period=12).fit().forecast(12).to_numpy())
    c = B.fit_base("combination", y, 12)
    parts = [p.forecasts(y, np.array([200]), 12)[0] for p in c.parts]
    assert np.allclose(c.forecasts(y, np.array([200]), 12)[0], np.median(parts, axis=0))


def test_auto_picks_the_candidate_with_the_lowest_rolling_origin_error():
    y = _series(240)
    name, scores = B.choose_base(y, 12, 12)
    assert set(scores) == set(B.CANDIDATES) and name == min(scores, key=scores.get)
    assert scores["seasonal_naive"] > scores["ets"]              # a trend: naive lags
    # the score is the refitted candidates' error at the last three origins, as a backtest
    errs = []
    for o in (204, 216, 228):
        f = B.fit_base("ets", y[:o], 12).forecasts(y[:o], np.array([o]), 12)[0]
        errs.append(np.mean(np.abs(f - y[o:o + 12])))
    assert np.isclose(scores["ets"], np.mean(errs) / np.mean(np.abs(np.diff(y[:204]))))


@pytest.mark.parametrize("base", ["seasonal_naive", "ets", "ar", "none"])
def test_an_untrained_correction_forecasts_the_base(base):
    y = _series()
    f = AttentionForecaster(horizon=6, season=12, base=base, **FAST).fit(y)
    assert f.base_name_ == base and 0.0 <= f.shrink_ <= 1.0
    with torch.no_grad():
        f.net_.pool.head[-1].weight.zero_()
        f.net_.pool.head[-1].bias.zero_()
    expect = f.base_.forecasts(y, np.array([len(y)]), 6)[0]
    assert np.allclose(f.predict(), expect, atol=1e-9)
    # a later origin: the statistical bases are refitted on the longer history
    longer = np.concatenate([y, _series(260)[240:]])
    refit = B.fit_base(base, longer, 12).forecasts(longer, np.array([len(longer)]), 6)[0]
    if base in ("ets", "ar"):
        assert np.allclose(f.predict(6, longer), refit, atol=1e-9)


def test_the_hybrid_saves_and_loads_with_its_base(tmp_path):
    y = _series()
    f = AttentionForecaster(horizon=6, season=12, base="ets", **FAST).fit(y)
    f.save(tmp_path / "m")
    g = load(tmp_path / "m")
    assert g.base_name_ == "ets" and g.shrink_ == pytest.approx(f.shrink_)
    assert np.allclose(f.predict(), g.predict()) and np.allclose(f.predict(18), g.predict(18))


def test_mean_pooling_weighs_every_step_alike_and_says_so():
    f = AttentionForecaster(horizon=6, season=12, pool="mean", **FAST).fit(_series())
    f.predict()
    assert np.allclose(f.attention_, 1 / 36)
    assert r"\frac{1}{36}" in f.to_latex()


def test_bad_base_or_pool_names_the_argument():
    with pytest.raises(ValueError, match="'base' parameter of AttentionForecaster must be a str"):
        AttentionForecaster(base="sarimax").fit(_series())
    with pytest.raises(ValueError, match="'pool' parameter of AttentionForecaster must be a str"):
        AttentionForecaster(pool="max").fit(_series())


def test_the_ablation_reports_every_variant_per_seed():
    # over 5 s: four variants x two seeds x two origins, the smallest ablation that has a spread
    y = _series(220)
    res = ablation(AttentionForecaster(horizon=6, season=12, **{**FAST, "max_epochs": 8}), y,
                   n_origins=2, seeds=(0, 1), series="synthetic")
    for name in ("base + attention", "base + mean pooling", "network, no base"):
        assert len(res.mase[name]) == 2 and all(np.isfinite(res.mase[name]))
    assert f"base alone ({res.base})" in res.mase and len(res.mase["ets"]) == 1
    table = res.table()
    assert "MASE (mean ± std)" in table and "(deterministic)" in table
    assert res.best_baseline()[0] in ("seasonal_naive", "ets", "ar")


@pytest.mark.parametrize("name,n,season", [("elnino", 732, 12), ("unemployment", 203, 4)])
def test_the_new_bundled_series(name, n, season):
    ex = load_series(name)
    assert len(ex.y) == n and ex.season == season and not ex.y.isna().any()
    assert ex.y.index.is_monotonic_increasing and ex.y.index.is_unique


def test_fit_forecast_refuses_an_unknown_base_in_one_line(capsys, tmp_path):
    from attnlab.cli import main

    assert main(["fit", "forecast", "--example", "unemployment", "--base", "sarimax",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--base must be one of" in err[0]


def test_arima_fits_a_seasonal_series_of_five_years():
    # the innovations MLE refuses it ("maximum of maxlag should be < nobs"): the state-space
    # MLE takes over, so the baseline and the base are not lost on ordinary monthly data
    t = np.arange(60)
    season = np.array([0, 2, 5, 9, 4, 1, -1, -3, -8, -4, -2, -1.0])
    y = 50 + 0.1 * t + season[t % 12] + 0.3 * np.random.default_rng(0).normal(size=60)
    b = B.fit_base("arima", y, 12)
    assert b.seasonal_order == (0, 1, 1, 12)
    truth = 50 + 0.1 * np.arange(60, 72) + season
    assert np.abs(b.forecasts(y, np.array([60]), 12)[0] - truth).max() < 2.5


def test_w_is_shrunk_by_its_sampling_error():
    """w's least-squares value is kept where the correction explains the validation errors
    many standard errors beyond chance, and dropped where it is within noise of none."""
    import torch

    from attnlab.models.forecast.shrink import correction_weight, significance

    g = torch.Generator().manual_seed(0)
    out = torch.randn(40, 4, generator=g, dtype=torch.float64)
    signal = 0.8 * out + 0.05 * torch.randn(40, 4, generator=g, dtype=torch.float64)
    w = float((out * signal).sum() / (out * out).sum())
    assert significance(out, signal, w, 4) > 0.99
    assert abs(correction_weight(out, signal, 4) - w * significance(out, signal, w, 4)) < 1e-12
    noise = torch.randn(40, 4, generator=g, dtype=torch.float64)
    w = max(float((out * noise).sum() / (out * out).sum()), 1e-3)
    assert significance(out, noise, w, 4) == 0.0 and correction_weight(out, noise, 4) == 0.0
    assert significance(out[:1], signal[:1], 0.8, 4) == 0.0       # one window: no estimate


def test_the_global_w_counts_each_series_once_and_drops_a_gain_within_noise():
    """The global forecaster's w (chosen by absolute error over calibration series) keeps a
    gain many standard errors beyond chance, drops one within noise, and treats the windows of
    one series as one observation: copies of one series' windows are not more evidence."""
    import torch

    from attnlab.models.forecast.shrink import gain_significance

    g = torch.Generator().manual_seed(1)
    out = torch.randn(60, 6, generator=g, dtype=torch.float64)
    series = torch.arange(60)
    signal = out + 0.1 * torch.randn(60, 6, generator=g, dtype=torch.float64)
    assert gain_significance(out, signal, 1.0, series) > 0.99
    noise = torch.randn(60, 6, generator=g, dtype=torch.float64)
    assert gain_significance(out, noise, 1.0, series) == 0.0        # no gain: dropped
    assert gain_significance(out, signal, 0.0, series) == 0.0
    # two series, thirty copies of each one's window: two observations, not sixty
    two = torch.arange(2).repeat_interleave(30)
    copies = out[:2].repeat_interleave(30, 0)
    mixed = torch.stack([signal[0], noise[1]]).repeat_interleave(30, 0)
    per_series = gain_significance(out[:2], torch.stack([signal[0], noise[1]]), 1.0,
                                   torch.arange(2))
    assert abs(gain_significance(copies, mixed, 1.0, two) - per_series) < 1e-12
    assert gain_significance(copies, mixed, 1.0, torch.zeros(60, dtype=torch.long)) == 0.0
