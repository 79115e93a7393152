"""Every series gets a forecast: one too short for the network gets its base's, said in one
note; a base that cannot be fitted is dropped from the candidates, with a note."""

import numpy as np
import pytest

from attnlab.models import AttentionForecaster, load
from attnlab.models.forecast import bases as bases_mod

FAST = dict(hidden_size=8, max_epochs=3, patience=2, seed=0)


# the shortest series of M3's yearly, quarterly and monthly sets, with the competition's horizons
@pytest.mark.parametrize("n, season, horizon", [(14, None, 6), (16, 4, 8), (48, 12, 18)])
def test_a_series_too_short_for_the_network_gets_the_base_forecast_and_a_note(n, season,
                                                                              horizon, tmp_path):
    rng = np.random.default_rng(n)
    t = np.arange(n)
    m = season or 1
    y = 100 + 2 * t + (5 * np.sin(2 * np.pi * t / m) if m > 1 else 0) + rng.normal(size=n)
    f = AttentionForecaster(horizon=horizon, season=season, **FAST).fit(y)
    assert f.base_only_ and not f.network_in_use_
    (note,) = [x for x in f.notes_ if "the network" in x]
    assert f"y has {n} observations" in note and "the base's alone" in note
    pred = f.predict()
    assert pred.shape == (horizon,) and np.isfinite(pred).all()
    # the forecast is the base's, from the whole series
    ref = f.base_.forecasts(y, np.array([n]), horizon)[0]
    assert np.allclose(pred, ref)
    # and it survives save and load, note included
    g = load(f.save(tmp_path / "m"))
    assert np.allclose(g.predict(), pred) and g.notes_ == f.notes_ and g.base_only_
    lo, hi = f.interval_bounds(pred)[0.8]
    assert (lo <= pred).all() and (pred <= hi).all()


def test_a_long_enough_series_uses_the_network_without_a_note():
    t = np.arange(120)
    y = 10 + np.sin(2 * np.pi * t / 12) + 0.01 * t
    f = AttentionForecaster(horizon=6, season=12, **FAST).fit(y)
    assert not f.base_only_ and f.notes_ == []


def test_a_base_that_cannot_be_fitted_is_dropped_with_a_note(monkeypatch):
    def broken(y, season, order=None):
        raise ValueError("ARIMA could not be fitted on this series")

    monkeypatch.setattr(bases_mod.ARIMA, "fit", classmethod(lambda cls, *a, **k: broken(*a)))
    bases_mod._FITS.clear()
    t = np.arange(60)
    y = 10 + 0.2 * t + np.random.default_rng(0).normal(size=60)
    f = AttentionForecaster(horizon=4, base="arima", lookback=8, **FAST).fit(y)
    assert f.base_name_ != "arima"
    assert any("arima base could not be fitted" in x and "dropped" in x for x in f.notes_)
    assert np.isfinite(f.predict()).all()
    bases_mod._FITS.clear()
