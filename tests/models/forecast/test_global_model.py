"""GlobalForecaster: one network across many series, each with its own base."""

import numpy as np
import pandas as pd
import pytest

from attnlab.models import AttentionForecaster
from attnlab.models.forecast.global_model import GlobalForecaster
from attnlab.models.forecast.panel import as_panel

SHAPE = np.array([0, 1, 3, 6, 3, 1, 0, -1, -4, -6, -2, -1.0])      # one season, shared


def _panel(k=24, n=48, seed=0, noise=0.3):
    """``k`` monthly series with the same seasonal shape, different levels and phases."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        t = np.arange(n) + rng.integers(12)
        level = rng.uniform(20, 80)
        out.append(level + SHAPE[t % 12] * level / 40 + noise * rng.normal(size=n))
    return out


def test_one_network_across_short_series_beats_a_network_per_series():
    # over 5 s: the only test that the shared network learns what 24 per-series fits cannot
    H = 6
    Y = _panel()
    train, test = [y[:-H] for y in Y], np.stack([y[-H:] for y in Y])
    kw = dict(base="naive", lookback=24, hidden_size=16, seed=0, batch_size=16)
    g = GlobalForecaster(H, season=12, max_epochs=60, patience=10, **kw).fit(train)
    assert g.network_in_use_ and g.history_.epochs > 1
    glob = np.abs(g.forecast_arrays()[0] - test).mean()
    # each series alone: 42 observations leave the network 8 training windows
    per = np.stack([AttentionForecaster(horizon=H, season=12, max_epochs=40, patience=6, **kw)
                    .fit(y).predict() for y in train])
    alone = np.abs(per - test).mean()
    naive = np.abs(np.stack([y[-1] for y in train])[:, None] - test).mean()
    assert glob < 0.5 * alone and glob < 0.5 * naive, (glob, alone, naive)


def test_a_series_too_short_for_a_window_gets_its_base_and_a_note():
    Y = {f"s{i}": y for i, y in enumerate(_panel(k=6, n=40))}
    Y["tiny"] = np.array([5.0, 6, 7, 6, 5, 6, 7, 6])
    g = GlobalForecaster(4, season=12, base="naive", lookback=12, max_epochs=2).fit(Y)
    assert not g.in_network_[-1] and g.in_network_[:-1].all() and g.min_length == 16
    (note,) = [x for x in g.notes_ if "shorter than" in x]
    assert note.startswith("1 series shorter than lookback 12 + horizon 4") and "tiny" in note
    p = g.predict()
    assert np.allclose(p[p.unique_id == "tiny"]["forecast"], 6.0)       # naive: the last value


def test_the_long_format_round_trips_with_dates():
    Y = _panel(k=5, n=40)
    dates = pd.date_range("2015-01-01", periods=40, freq="MS")
    long = pd.concat([pd.DataFrame({"unique_id": f"u{i}", "ds": dates, "y": y})
                      for i, y in enumerate(Y)]).sample(frac=1, random_state=0)   # any order
    ids, series, idx = as_panel(long)
    assert ids == [f"u{i}" for i in range(5)] or sorted(ids) == [f"u{i}" for i in range(5)]
    for uid, y in zip(ids, series):
        assert np.array_equal(y, Y[int(uid[1:])])
    kw = dict(season=12, base="naive", lookback=12, max_epochs=3)
    a = GlobalForecaster(6, **kw).fit(long).predict()
    assert list(a.columns) == ["unique_id", "ds", "forecast", "lower_80", "upper_80",
                               "lower_95", "upper_95"]
    assert (a.groupby("unique_id")["ds"].first() == pd.Timestamp("2018-05-01")).all()
    # dates written as text (a CSV read without parse_dates) are read as dates
    text = long.assign(ds=long["ds"].dt.strftime("%Y-%m-%d"))
    c = GlobalForecaster(6, **kw).fit(text).predict()
    assert (c.groupby("unique_id")["ds"].first() == pd.Timestamp("2018-05-01")).all()
    with pytest.raises(ValueError, match="column ds holds text that is not dates"):
        GlobalForecaster(6, **kw).fit(long.assign(ds="soon"))
    # the same series as a dict of date-indexed series: the same forecasts
    b = GlobalForecaster(6, **kw).fit({u: pd.Series(y, index=dates) for u, y in zip(ids, series)}
                                      ).predict()
    merged = a.merge(b, on=["unique_id", "ds"])
    assert len(merged) == 30 and np.allclose(merged.forecast_x, merged.forecast_y)


def test_pooled_intervals_cover_exchangeable_series_at_their_level():
    # 300 series of i.i.d. noise around their own levels and scales: the scaled errors are
    # exchangeable across series, the case pooled split conformal is valid for
    rng = np.random.default_rng(1)
    H, n = 4, 30
    Y = [rng.uniform(10, 100) + rng.uniform(0.5, 5) * rng.normal(size=n + H) for _ in range(300)]
    g = GlobalForecaster(H, base="none", lookback=8, max_epochs=3, seed=0, holdout=0.5).fit(
        [y[:n] for y in Y])
    assert g.n_calibration_ == 75
    fc, bounds = g.forecast_arrays()
    test = np.stack([y[n:] for y in Y])
    for q, (lo, hi) in bounds.items():
        covered = float(((test >= lo) & (test <= hi)).mean())
        assert abs(covered - q) < 0.05, (q, covered)


def test_a_small_panel_calibrates_on_several_windows_per_series_and_still_covers():
    # 12 long series: 2 calibration series holding out one window each could bound neither
    # level; their last windows (each base refitted before it) give 2 x 10 errors
    rng = np.random.default_rng(2)
    H, n, runs = 4, 80, []
    for seed in range(4):
        Y = [rng.uniform(10, 100) + rng.uniform(0.5, 5) * rng.normal(size=n + H)
             for _ in range(12)]
        g = GlobalForecaster(H, base="none", lookback=8, max_epochs=2, seed=seed).fit(
            [y[:n] for y in Y])
        assert g.n_calibration_ == 2 * 10       # min(ceil(20 / 2), (80 - 8) // 4) each
        assert not any("unbounded" in note for note in g.notes_)
        fc, bounds = g.forecast_arrays()
        test = np.stack([y[n:] for y in Y])
        runs.append({q: float(((test >= lo) & (test <= hi)).mean())
                     for q, (lo, hi) in bounds.items()})
    for q in (0.8, 0.95):
        assert abs(np.mean([r[q] for r in runs]) - q) < 0.1, runs


@pytest.mark.parametrize("Y, words", [
    ([1.0, 2.0, 3.0], "one series of numbers"),
    (pd.DataFrame({"id": [1], "ds": [1], "y": [1.0]}), "lacks ['unique_id']"),
    ({"a": [1.0, np.nan, 3.0]}, "1 missing or infinite value(s), first at position 1"),
    ("nope", "must be a list of series"),
])
def test_bad_panels_are_named(Y, words):
    with pytest.raises(ValueError, match=__import__("re").escape(words)):
        GlobalForecaster(2).fit(Y)


def test_bad_params_are_named():
    with pytest.raises(ValueError, match="'base' parameter of GlobalForecaster must be a str"):
        GlobalForecaster(2, base="auto").fit(_panel(k=2))
    with pytest.raises(ValueError, match="h must be an int in 1..3"):
        GlobalForecaster(3, base="naive", lookback=6, max_epochs=1).fit(_panel(k=3)).predict(5)


def test_save_and_load_give_the_same_forecasts(tmp_path):
    from attnlab.models import load

    Y = _panel(k=5, n=40)
    dates = pd.date_range("2015-01-01", periods=40, freq="MS")
    Y = {f"u{i}": pd.Series(y, index=dates) for i, y in enumerate(Y)}
    Y["tiny"] = pd.Series([5.0, 6, 7, 6, 5, 6], index=dates[:6])
    g = GlobalForecaster(6, season=12, base="theta", lookback=12, max_epochs=3).fit(Y)
    h = load(g.save(tmp_path / "m"))
    assert isinstance(h, GlobalForecaster) and h.notes_ == g.notes_
    a, b = g.predict(), h.predict()
    assert a.equals(b) or np.allclose(a.forecast, b.forecast) and (a.ds == b.ds).all()
    assert not list(tmp_path.glob("*.pkl")) and (tmp_path / "m" / "model.safetensors").is_file()
