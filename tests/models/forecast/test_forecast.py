"""AttentionForecaster: fit / predict / backtest, clear errors, save -> load round trip."""

import json

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from attnlab.models import AttentionForecaster, load
from attnlab.models.forecast.baselines import ar_forecast, forecast_errors, seasonal_naive

FAST = dict(hidden_size=16, max_epochs=40, patience=10, seed=0)


def _series(n=240, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 10 + 0.05 * t + 2 * np.sin(2 * np.pi * t / 12) + 0.2 * rng.normal(size=n)


def test_seasonal_naive_and_errors():
    hist = np.arange(24.0)
    assert seasonal_naive(hist, 5, 12).tolist() == [12, 13, 14, 15, 16]
    assert seasonal_naive(hist, 14, 12)[12:].tolist() == [12, 13]
    e = forecast_errors(np.array([1.0, 0.0, 2.0]), np.array([2.0, 1.0, 2.0]), scale=0.5)
    assert e["MAE"] == pytest.approx(2 / 3) and e["MASE"] == pytest.approx(4 / 3)
    assert e["RMSE"] == pytest.approx(np.sqrt(2 / 3))
    assert e["MAPE"] == pytest.approx(50.0)                  # the zero actual is skipped


@pytest.mark.parametrize("encoder", ["gru", "lstm", "transformer"])
def test_fit_predict_shapes_and_attention(encoder):
    y = _series()
    f = AttentionForecaster(horizon=6, season=12, encoder=encoder, nhead=2, **FAST).fit(y)
    p = f.predict()
    assert p.shape == (6,) and np.isfinite(p).all()
    assert f.attention_.shape == (36,) and f.attention_.sum() == pytest.approx(1, abs=1e-5)
    assert (f.attention_ >= 0).all()
    # Beyond the fitted horizon the forecast is recursive and continues the direct one.
    long = f.predict(15)
    assert long.shape == (15,) and np.allclose(long[:6], p)
    # A history given explicitly gives the same forecast as the stored one.
    assert np.allclose(f.predict(y=y), p)


def test_backtest_beats_seasonal_naive_on_a_trending_seasonal_series():
    y = _series(300)
    bt = AttentionForecaster(horizon=12, season=12, **FAST).backtest(y, n_origins=4)
    assert set(bt.metrics) == {"attention", "seasonal_naive", "ets", "ar"}
    assert set(bt.intervals) == {0.8, 0.95}                      # conformal, per origin
    lo80, hi80 = bt.intervals[0.8]
    lo95, hi95 = bt.intervals[0.95]
    assert lo80.shape == bt.actual.shape and (lo95 <= lo80).all() and (hi80 <= hi95).all()
    assert 0 <= bt.coverage()[0.8] <= bt.coverage()[0.95] <= 1
    assert bt.actual.shape == (4, 12) and bt.attention.shape == (4, 36)
    assert np.array_equal(bt.actual[-1], y[-12:])
    # Seasonal naive lags the trend by a year (0.6 per step); the model must not.
    assert bt.metrics["attention"]["MASE"] < 0.7 * bt.metrics["seasonal_naive"]["MASE"]
    assert "| attention |" in bt.table()
    assert len(bt.model.y_tail_) == 36 and bt.model.n_obs_ == int(bt.origins[0])


def test_backtest_refit_fits_a_model_at_every_origin():
    y = _series(200)
    # refit semantics under test, not the base choice: no base keeps it cheap, and a model
    # fitted on more history differs even where its correction is shrunk to w = 0 (its mean)
    kw = dict(horizon=6, season=12, max_epochs=3, hidden_size=8, seed=0, base="none")
    once = AttentionForecaster(**kw).backtest(y, n_origins=3, baselines=())
    every = AttentionForecaster(**kw).backtest(y, n_origins=3, baselines=(), refit=True)
    # The first origin's model is the same either way; later origins use models fitted on
    # their own history, identical to fitting one by hand.
    assert np.array_equal(once.forecasts["attention"][0], every.forecasts["attention"][0])
    assert not np.allclose(once.forecasts["attention"][1:], every.forecasts["attention"][1:])
    t = int(every.origins[-1])
    by_hand = AttentionForecaster(**kw).fit(y[:t]).predict()
    assert np.array_equal(every.forecasts["attention"][-1], by_hand)
    assert every.model.n_obs_ == int(every.origins[0])
    with pytest.raises(ValueError, match="seasonal_naive, naive, drift, ets, ar, arima"):
        AttentionForecaster(**kw).backtest(y, n_origins=3, baselines=("sarima",))


def test_ar_baseline_recovers_an_autoregression():
    # y_t = 1.6 y_{t-1} - 0.8 y_{t-2} + e: a damped cycle of about 11 steps, no fixed season.
    rng = np.random.default_rng(0)
    y = np.zeros(400)
    for t in range(2, 400):
        y[t] = 1.6 * y[t - 1] - 0.8 * y[t - 2] + rng.normal()
    y += 50
    true = np.array([y[-1], y[-2]])
    for _ in range(3):                                   # noise-free continuation
        true = np.r_[50 + 1.6 * (true[0] - 50) - 0.8 * (true[1] - 50), true[:1]]
    fc = ar_forecast(y, 3, season=11)
    assert fc.shape == (3,) and abs(fc[2] - true[0]) < 0.5
    bt = AttentionForecaster(horizon=5, season=11, max_epochs=2, hidden_size=8).backtest(
        y, n_origins=4, baselines=("seasonal_naive", "ar"))
    assert bt.metrics["ar"]["MASE"] < 0.8 * bt.metrics["seasonal_naive"]["MASE"]


def test_exogenous_columns():
    rng = np.random.default_rng(1)
    x = rng.normal(size=200)
    y = np.convolve(x, [0, 1.0], mode="full")[:200] + 0.05 * rng.normal(size=200)  # y_t = x_{t-1}
    f = AttentionForecaster(horizon=1, lookback=8, **FAST).fit(y, x[:, None])
    assert f.predict().shape == (1,)
    with pytest.raises(ValueError, match="exogenous"):
        f.predict(y=y)                                     # X missing
    with pytest.raises(ValueError, match="future exogenous"):
        f.predict(3)


@pytest.mark.parametrize("y, words", [
    (np.r_[np.arange(50.0), np.nan, np.arange(50.0)], "position 50"),
    (np.array([3.0]), "needs at least 2"),
    (np.ones((30, 2)), "one series"),
    (["a", "b"], "must be numbers"),
])
def test_bad_series_gets_a_clear_error(y, words):
    with pytest.raises(ValueError, match=words):
        AttentionForecaster(horizon=4, lookback=8).fit(y)


@pytest.mark.parametrize("kw, words", [({"encoder": "cnn"}, "'encoder' .* must be a str"),
                                       ({"horizon": 0}, "horizon"),
                                       ({"encoder": "transformer", "hidden_size": 10,
                                         "nhead": 4}, "divisible")])
def test_bad_params(kw, words):
    with pytest.raises(ValueError, match=words):
        AttentionForecaster(**kw).fit(_series())


def test_predict_before_fit():
    with pytest.raises(NotFittedError, match="not fitted"):
        AttentionForecaster().predict()


def test_save_load_round_trip_and_bad_files(tmp_path):
    y = _series()
    f = AttentionForecaster(horizon=6, season=12, encoder="transformer", nhead=2,
                            **FAST).fit(y)
    path = f.save(tmp_path / "m")
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    g = load(path)
    assert isinstance(g, AttentionForecaster) and g.get_params() == f.get_params()
    assert np.array_equal(g.predict(), f.predict())
    assert np.array_equal(g.predict(20), f.predict(20))
    f.save(path)                                           # overwriting is atomic and fine
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    # Corrupted weights
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((path / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"\x00" * 40)
    with pytest.raises(ValueError, match="not a readable safetensors"):
        load(bad)
    # A foreign JSON / a pickle in disguise
    (bad / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="not an attnlab model config"):
        load(bad)
    (bad / "config.json").write_bytes(b"\x80\x04\x95pickle")
    with pytest.raises(ValueError, match="not valid JSON"):
        load(bad)
    # Missing folder / file
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load(tmp_path / "nope")
    (bad / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json is missing"):
        load(bad)
    # Weights that do not match the config
    cfg = json.loads((path / "config.json").read_text())
    cfg["params"]["hidden_size"] = 32
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="does not match"):
        load(path)
    # A fitted value missing from the state is named
    cfg["params"]["hidden_size"] = f.hidden_size
    del cfg["state"]["n_obs_"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="lacks or misreads 'n_obs_'; the model folder is "
                       "corrupted"):
        load(path)


def test_every_estimator_saves_and_loads_through_one_implementation():
    from attnlab.models import ESTIMATORS
    from attnlab.models.io import SavedEstimator

    for cls in ESTIMATORS.values():
        assert issubclass(cls, SavedEstimator)
        assert cls.save is SavedEstimator.save and cls.load.__func__ is SavedEstimator.load.__func__


def test_lookback_shorter_than_the_season():
    # The reference forecast (seasonal naive) needs a full season of history even when the
    # window the network reads is shorter.
    y = _series(200)
    f = AttentionForecaster(horizon=3, lookback=4, season=12, **FAST).fit(y)
    assert len(f.y_tail_) == 12 and f.attention_ is None
    p = f.predict()
    assert p.shape == (3,) and f.attention_.shape == (4,)
    assert np.allclose(f.predict(y=y), p)
    with pytest.raises(ValueError, match="last 12"):
        f.predict(y=y[:8])


def test_conformal_intervals_cover_on_exchangeable_data():
    # white noise around a fixed level: the validation errors are exchangeable with the future
    # ones, so split conformal must cover at least at its level (up to sampling error)
    rng = np.random.default_rng(0)
    y = 5 + rng.normal(size=400)
    f = AttentionForecaster(horizon=3, lookback=12, base="naive", max_epochs=3,
                            hidden_size=8, seed=0).fit(y[:300])
    hits = {0.8: [], 0.95: []}
    for t in range(300, 397, 3):
        for q in hits:
            _, lo, hi = f.predict_interval(y=y[:t], level=q)
            hits[q] += list((y[t:t + 3] >= lo) & (y[t:t + 3] <= hi))
    assert np.mean(hits[0.8]) > 0.7 and np.mean(hits[0.95]) > 0.88
    with pytest.raises(ValueError, match="level must be one of 0.8, 0.95"):
        f.predict_interval(level=0.9)
    _, lo, hi = f.predict_interval(horizon=5)                     # recursive steps: no bound
    assert np.isinf(lo[3:]).all() and np.isfinite(lo[:3]).all()


def test_known_future_covariates_enter_the_forecast_steps(tmp_path):
    # over 5 s: the only test that known-future covariates improve a backtest (400 days,
    # trained)
    from attnlab.models.forecast.paper import _symbol_rows, undefined_symbols
    rng = np.random.default_rng(0)
    n = 400
    promo = (rng.random(n) < 0.15).astype(float)           # planned promotions, known ahead
    t = np.arange(n)
    y = 10 + 2 * np.sin(2 * np.pi * t / 7) + 5 * promo + 0.3 * rng.normal(size=n)
    kw = dict(horizon=7, season=7, max_epochs=60, hidden_size=16, seed=0, base="seasonal_naive")
    plain = AttentionForecaster(**kw).backtest(y, n_origins=6, baselines=())
    known = AttentionForecaster(**kw).backtest(y, n_origins=6, baselines=(),
                                               X_future=promo[:, None])
    assert known.metrics["attention"]["MASE"] < 0.85 * plain.metrics["attention"]["MASE"]
    f = AttentionForecaster(**{**kw, "max_epochs": 5}).fit(y[:350], X_future=promo[:350])
    with pytest.raises(ValueError, match="known-future column"):
        f.predict()
    with pytest.raises(ValueError, match="one row per forecast step"):
        f.predict(X_future=promo[350:352])
    with pytest.raises(ValueError, match="needs known-future values beyond it"):
        f.predict(horizon=10, X_future=promo[350:357])
    pred = f.predict(X_future=promo[350:357])
    f.save(tmp_path / "m")
    again = AttentionForecaster.load(tmp_path / "m")
    assert np.allclose(again.predict(X_future=promo[350:357]), pred)
    assert undefined_symbols(f.equations(), _symbol_rows(f, "en")) == set()
    assert r"\mathbf{u}" in f.to_latex()
    with pytest.raises(ValueError, match="fitted without known-future"):
        AttentionForecaster(**{**kw, "max_epochs": 2}).fit(y).predict(X_future=promo[:7])
