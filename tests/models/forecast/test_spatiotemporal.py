"""SpatioTemporalForecaster: shapes and maps, the graph restriction, the base at zero output,
the simulated crowd, and one clear error per bad input."""

import numpy as np
import pytest
import torch

from attnlab.models.forecast.spatiotemporal import (
    SpatioTemporalForecaster,
    simulated_crowd,
    upstream_share,
)

FAST = dict(hidden_size=8, max_epochs=6, patience=3, seed=0, lookback=12)


def _crowd(n=160):
    Y, adj, _ = simulated_crowd(n_steps=n, seed=1)
    return Y, adj


def test_forecasts_and_both_attention_maps():
    Y, adj = _crowd()
    f = SpatioTemporalForecaster(horizon=3, season=24, **FAST).fit(Y)
    p = f.predict()
    assert p.shape == (3, 8) and np.isfinite(p).all()
    assert f.temporal_attention_.shape == (8, 12)
    assert np.allclose(f.temporal_attention_.sum(-1), 1, atol=1e-5)
    assert f.spatial_attention_.shape == (12, 8, 8)
    assert np.allclose(f.spatial_attention_.sum(-1), 1, atol=1e-5)


def test_a_neighbour_graph_restricts_the_spatial_attention():
    Y, adj = _crowd()
    f = SpatioTemporalForecaster(horizon=3, season=24, **FAST).fit(Y, adjacency=adj)
    f.predict()
    allowed = adj | np.eye(8, dtype=bool)
    assert np.all(f.spatial_attention_[:, ~allowed] == 0)
    learned, uniform = upstream_share(f.spatial_attention_, adj)
    assert learned == pytest.approx(1.0)                # only upstream places besides itself
    assert 0 < uniform < 1


def test_an_untrained_output_is_each_places_seasonal_naive():
    Y, _ = _crowd()
    f = SpatioTemporalForecaster(horizon=3, season=24, **FAST).fit(Y)
    with torch.no_grad():
        f.net_.head[-1].weight.zero_()
        f.net_.head[-1].bias.zero_()
    assert np.allclose(f.predict(Y), Y[-24:-21])


def test_backtest_reports_every_method_per_place():
    Y, _ = _crowd(200)
    r = SpatioTemporalForecaster(horizon=3, season=24, **FAST).backtest(Y, n_origins=2)
    assert set(r["MASE"]) == {"spatio-temporal", "seasonal_naive", "ar"}
    assert all(v.shape == (8,) for v in r["per_place"].values())


@pytest.mark.parametrize("make,match", [
    (lambda Y, a: (Y, np.zeros_like(a)), "no edges"),
    (lambda Y, a: (np.column_stack([Y, np.full(len(Y), np.nan)]), None), "no history"),
    (lambda Y, a: (Y[:20], None), "needs at least"),
    (lambda Y, a: (Y[:, :1], None), "at least 2 places"),
    (lambda Y, a: (Y, a[:3, :3]), "adjacency must be"),
])
def test_bad_input_gives_one_clear_error(make, match):
    Y, adj = _crowd()
    Yb, ab = make(Y, adj)
    with pytest.raises(ValueError, match=match):
        SpatioTemporalForecaster(horizon=3, season=24, **FAST).fit(Yb, adjacency=ab)
