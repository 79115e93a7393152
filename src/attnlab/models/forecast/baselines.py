"""Baselines the forecasters are measured against (the rolling-origin backtest): seasonal
naive, naive, drift, statsmodels' Holt-Winters ETS, autoregression, ARIMA and Theta, their
median combination (the last four through :mod:`attnlab.models.forecast.bases`), MAE / RMSE /
MAPE / MASE, and the Diebold-Mariano test. The tables' baselines are in
:mod:`attnlab.models.tabular.baselines`."""

from __future__ import annotations

import math

import numpy as np


def seasonal_naive(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """y_hat(T + h) = y(T + h - m * ceil(h / m)): the last season repeated (the
    ``seasonal_naive`` base)."""
    from attnlab.models.forecast.bases import SeasonalNaive

    m = max(1, season)
    if len(history) < m:
        raise ValueError(f"seasonal naive needs at least one season ({m}) of history, got "
                         f"{len(history)}")
    return SeasonalNaive(m).forecasts(np.asarray(history), np.array([len(history)]),
                                      horizon)[0]


def ets_forecast(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """Holt-Winters ETS, the ``ets`` base: additive damped trend, additive season when
    ``season > 1`` and two full seasons are available; statsmodels' maximum likelihood."""
    from attnlab.models.forecast.bases import fit_base

    return fit_base("ets", history, season).forecasts(history, np.array([len(history)]),
                                                       horizon)[0]


def ar_forecast(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """statsmodels AutoReg with a constant, its order chosen by AIC up to two seasons (at
    least 12, at most a quarter of the history), forecast recursively; on first differences
    when the levels' fit is not stationary (the ``ar`` base of
    :mod:`attnlab.models.forecast.bases`).
    The classical model for cyclic series without a fixed period (Yule 1927 fitted one to the
    sunspot numbers)."""
    from attnlab.models.forecast.bases import AR

    return AR.fit(history, season).forecasts(history, np.array([len(history)]), horizon)[0]


def naive_forecast(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """The last value repeated (``season`` is ignored)."""
    return seasonal_naive(history, horizon, 1)


def _base_forecast(name: str):
    def forecast(history: np.ndarray, horizon: int, season: int) -> np.ndarray:
        from attnlab.models.forecast.bases import fit_base
        base = fit_base(name, history, season)
        return base.forecasts(history, np.array([len(history)]), horizon)[0]
    forecast.__name__ = f"{name}_forecast"
    forecast.__doc__ = (f"The ``{name}`` base of :mod:`attnlab.models.forecast.bases`, fitted "
                        "on the history and forecast from its end.")
    return forecast


drift_forecast = _base_forecast("drift")
arima_forecast = _base_forecast("arima")
theta_forecast = _base_forecast("theta")
combination_forecast = _base_forecast("combination")

#: The baselines a backtest can run, by name: ``f(history, horizon, season) -> (horizon,)``.
BASELINES = {"seasonal_naive": seasonal_naive, "naive": naive_forecast, "drift": drift_forecast,
             "ets": ets_forecast, "ar": ar_forecast, "arima": arima_forecast,
             "theta": theta_forecast, "combination": combination_forecast}


def forecast_errors(actual: np.ndarray, forecast: np.ndarray, scale: float) -> dict[str, float]:
    """MAE, RMSE, MAPE (%, over actual values that are not 0), sMAPE (%, the M3 competition's
    ``200 |y - f| / (|y| + |f|)``) and MASE (MAE / ``scale``, the in-sample MAE of seasonal
    naive on the training part; Hyndman & Koehler 2006)."""
    err = forecast - actual
    nz = actual != 0
    mape = float(np.mean(np.abs(err[nz] / actual[nz])) * 100) if nz.any() else math.nan
    mae = float(np.mean(np.abs(err)))
    smape = float(np.mean(200 * np.abs(err) / np.maximum(np.abs(actual) + np.abs(forecast),
                                                         1e-12)))
    return {"MAE": mae, "RMSE": float(np.sqrt(np.mean(err ** 2))), "MAPE": mape,
            "sMAPE": smape, "MASE": mae / scale if scale > 0 else math.nan}


def seasonal_scale(y: np.ndarray, season: int) -> float:
    """MASE's denominator: the in-sample mean absolute seasonal difference of ``y`` (the
    one-step one when ``y`` is not longer than a season); 0 for a constant series."""
    m = season if season > 1 and len(y) > season else 1
    d = np.abs(np.asarray(y[m:]) - np.asarray(y[:-m]))
    return float(d.mean()) if d.size else 0.0


def diebold_mariano(loss_a, loss_b, horizon: int = 1) -> tuple[float, float]:
    """Diebold-Mariano test of equal accuracy (Diebold & Mariano 1995) with the small-sample
    correction of Harvey, Leybourne & Newbold (1997): ``(statistic, two-sided p)`` for the loss
    differential ``loss_a - loss_b`` (negative statistic: ``a`` is more accurate), its variance
    from autocovariances up to lag ``horizon - 1``, compared with Student's t on n - 1
    degrees of freedom."""
    from scipy import stats

    d = np.asarray(loss_a, dtype=float) - np.asarray(loss_b, dtype=float)
    n = len(d)
    if n < 2:
        raise ValueError(f"the Diebold-Mariano test needs at least 2 paired losses, got {n}")
    dc = d - d.mean()
    gamma = [float(dc[k:] @ dc[:n - k]) / n for k in range(max(1, horizon))]
    var = (gamma[0] + 2 * sum(gamma[1:])) / n
    if var <= 0:
        return 0.0, 1.0
    dm = d.mean() / math.sqrt(var)
    k = max(1, horizon)
    correction = math.sqrt((n + 1 - 2 * k + k * (k - 1) / n) / n)
    stat = dm * correction
    return float(stat), float(2 * stats.t.sf(abs(stat), df=n - 1))
