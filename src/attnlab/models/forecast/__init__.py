"""Forecasting: the hybrid of a statistical base and an attention network, for one series
(:class:`AttentionForecaster`) or many (:class:`GlobalForecaster`).

* ``estimator``: :class:`AttentionForecaster` (fit, predict, intervals, save / load);
* ``global_model``: :class:`GlobalForecaster`, one network across many series;
* ``spatiotemporal``: :class:`SpatioTemporalForecaster`, attention over places and over time;
* ``windows``: what the three share (season, lookback, shortest series); ``intervals``: the
  split-conformal intervals;
* ``inputs``, ``equations``: the estimator's input checks and its equations;
* ``bases``: the statistical bases it corrects (fixed parameters, any history);
* ``baselines``: the traditional methods it is compared with, and the error measures;
* ``backtest``: rolling-origin evaluation; ``ablation``: base alone, + attention, + mean
  pooling, no base, over seeds;
* ``nets``: the networks (GRU / LSTM / Transformer encoder, attention pooling);
* ``paper``: the model section of a paper from a fitted forecaster and its measurements.
"""

from attnlab.models.forecast.backtest import BacktestResult, rolling_origin
from attnlab.models.forecast.estimator import AttentionForecaster
from attnlab.models.forecast.global_model import GlobalForecaster
from attnlab.models.forecast.spatiotemporal import SpatioTemporalForecaster
from attnlab.models.forecast.windows import WindowSettings

__all__ = ["AttentionForecaster", "BacktestResult", "GlobalForecaster",
           "SpatioTemporalForecaster", "WindowSettings", "rolling_origin"]
