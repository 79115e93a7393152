"""A forecast from a history other than the fitted one is placed on its own calendar: the
season's phase from its dates (or ``start``), the base refitted on it."""

import numpy as np
import pandas as pd
import pytest

from attnlab.models import AttentionForecaster, load

FAST = dict(hidden_size=8, max_epochs=3, patience=2, seed=0)


def _monthly(n=120, start="2010-01-01"):
    t = np.arange(n)
    # a lopsided season (a peak in month 3, a trough in month 9) with a trend: a shifted phase
    # is visible
    season = np.array([0, 2, 5, 9, 4, 1, -1, -3, -8, -4, -2, -1.0])
    y = 50 + 0.1 * t + season[t % 12]
    return pd.Series(y, index=pd.date_range(start, periods=n, freq="MS"))


@pytest.fixture(scope="module")
def fitted():
    y = _monthly()
    return y, AttentionForecaster(horizon=12, season=12, base="ets", **FAST).fit(y[:108])


def test_a_dated_history_that_starts_elsewhere_is_forecast_on_its_own_calendar(fitted):
    y, f = fitted
    assert f.calendar_ == {"start": "2010-01-01T00:00:00", "freq": "MS"}
    hist = y[29:108]                          # starts in June 2012, not in January 2010
    pred = f.predict(y=hist)
    # the base is refitted on the history: the season's peak stays in April
    assert np.abs(pred - y[108:].to_numpy()).max() < 1.0
    assert np.argmax(pred) == 3
    # the same history without dates needs its start: steps after the fitted first month, or
    # the date
    assert np.allclose(f.predict(y=hist.to_numpy(), start=29), pred)
    assert np.allclose(f.predict(y=hist.to_numpy(), start="2012-06-01"), pred)
    assert f.start_of(hist) == 29 and f.start_of(y[:5]) == 0
    # before the fitted series' start: a negative step count
    early = _monthly(140, "2008-05-01")
    assert f.start_of(early) == -20


def test_the_fitted_series_extended_gives_the_stored_forecast(fitted):
    y, f = fitted
    assert np.allclose(f.predict(y=y[:108]), f.predict())
    assert np.allclose(f.predict(y=y[:108].to_numpy()), f.predict())


def test_a_history_off_the_calendar_or_a_date_start_without_one_is_refused(fitted):
    y, f = fitted
    off = pd.Series(y[:60].to_numpy(), index=pd.date_range("2010-01-15", periods=60,
                                                           freq="D"))
    with pytest.raises(ValueError, match="not a step of the fitted series' calendar"):
        f.predict(y=off)
    plain = AttentionForecaster(horizon=12, season=12, base="ets", **FAST).fit(
        y[:108].to_numpy())
    assert plain.calendar_ is None
    with pytest.raises(ValueError, match="start=.* is a date.*number of steps"):
        plain.predict(y=y[:60].to_numpy(), start="2010-03-01")
    with pytest.raises(ValueError, match="start places a history"):
        plain.predict(start=3)


def test_the_calendar_survives_save_and_load(fitted, tmp_path):
    y, f = fitted
    g = load(f.save(tmp_path / "m"))
    assert g.calendar_ == f.calendar_
    assert np.allclose(g.predict(y=y[29:108]), f.predict(y=y[29:108]))
