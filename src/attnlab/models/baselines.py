"""Forecasting baselines and errors for the rolling-origin backtest: seasonal naive,
statsmodels' Holt-Winters ETS, and MAE / RMSE / MAPE / MASE."""

from __future__ import annotations

import math
import warnings

import numpy as np


def seasonal_naive(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """y_hat(T + h) = y(T + h - m * ceil(h / m)): the last season repeated."""
    m = max(1, season)
    if len(history) < m:
        raise ValueError(f"seasonal naive needs at least one season ({m}) of history, got "
                         f"{len(history)}")
    last = history[-m:]
    return np.array([last[h % m] for h in range(horizon)])


def ets_forecast(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """statsmodels Holt-Winters ETS: additive damped trend, additive season when ``season > 1``
    and two full seasons are available; parameters by maximum likelihood."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    seasonal = "add" if season > 1 and len(history) >= 2 * season else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ExponentialSmoothing(history, trend="add", damped_trend=True, seasonal=seasonal,
                                   seasonal_periods=season if seasonal else None,
                                   initialization_method="estimated").fit()
        return np.asarray(fit.forecast(horizon))


def forecast_errors(actual: np.ndarray, forecast: np.ndarray, scale: float) -> dict[str, float]:
    """MAE, RMSE, MAPE (%, over actual values that are not 0) and MASE (MAE / ``scale``, the
    in-sample MAE of seasonal naive on the training part; Hyndman & Koehler 2006)."""
    err = forecast - actual
    nz = actual != 0
    mape = float(np.mean(np.abs(err[nz] / actual[nz])) * 100) if nz.any() else math.nan
    mae = float(np.mean(np.abs(err)))
    return {"MAE": mae, "RMSE": float(np.sqrt(np.mean(err ** 2))), "MAPE": mape,
            "MASE": mae / scale if scale > 0 else math.nan}
