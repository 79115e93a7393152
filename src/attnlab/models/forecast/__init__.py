"""Forecasting: the hybrid of a statistical base and an attention network, for one series
(:class:`AttentionForecaster`) or many (:class:`~attnlab.models.global_forecast.GlobalForecaster`).

* ``estimator``: :class:`AttentionForecaster` (fit, predict, intervals, save / load);
* ``bases``: the statistical bases it corrects (fixed parameters, any history);
* ``baselines``: the traditional methods it is compared with, and the error measures;
* ``backtest``: rolling-origin evaluation; ``ablation``: base alone, + attention, + mean
  pooling, no base, over seeds;
* ``nets``: the networks (GRU / LSTM / Transformer encoder, attention pooling);
* ``paper``: the model section of a paper from a fitted forecaster and its measurements.
"""

from attnlab.models.forecast.backtest import BacktestResult, rolling_origin
from attnlab.models.forecast.estimator import AttentionForecaster, WindowSettings

__all__ = ["AttentionForecaster", "BacktestResult", "WindowSettings", "rolling_origin"]
