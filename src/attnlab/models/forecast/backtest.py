"""Rolling-origin evaluation of a forecaster next to the statistical baselines.

Origins ``T_k`` are the last ``n_origins`` positions ``step`` apart such that every forecast
``y[T_k : T_k + horizon]`` lies inside ``y`` (Hyndman & Athanasopoulos, *Forecasting:
Principles and Practice*, 5.10 "time series cross-validation"). Errors are MAE, RMSE, MAPE and
MASE, the last scaled by the in-sample seasonal-naive MAE before the first origin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone

from attnlab.models.forecast.baselines import BASELINES, forecast_errors
from attnlab.models.forecast.bases import COMBINED


class Scored:
    """What a result of held-out forecasts shows: its ``metrics`` as a table, its
    ``intervals``' coverage of ``actual`` (a mixin of the result dataclasses; ``COLUMNS``:
    ``(title, metric, format)`` of the table's columns)."""

    COLUMNS: tuple[tuple[str, str, str], ...] = ()

    def coverage(self) -> dict[float, float]:
        """The share of actual values inside each level's interval, pooled over every row."""
        return interval_coverage(self.actual, self.intervals)

    def table(self) -> str:
        """The metrics as a Markdown table, best MASE first."""
        rows = sorted(self.metrics.items(), key=lambda kv: kv[1]["MASE"])
        out = ["| method | " + " | ".join(t for t, _, _ in self.COLUMNS) + " |",
               "|---" * (len(self.COLUMNS) + 1) + "|"]
        out += ["| " + " | ".join([name] + [format(m[key], fmt) for _, key, fmt in self.COLUMNS])
                + " |" for name, m in rows]
        return "\n".join(out)


@dataclass
class BacktestResult(Scored):
    """What :func:`rolling_origin` measured.

    Attributes:
        metrics: ``{method: {"MAE", "RMSE", "MAPE", "MASE"}}`` over every origin and step.
        origins: index in ``y`` of the first forecast point of each origin, ``(n_origins,)``.
        actual: ``(n_origins, horizon)`` true values.
        forecasts: ``{method: (n_origins, horizon)}``.
        attention: ``(n_origins, lookback)`` the forecaster's weights over past steps
            (column j is lag ``lookback - j``).
        model: the forecaster fitted on ``y[:origins[0]]`` (with ``refit``, the first of
            the ones fitted).
        intervals: the forecaster's conformal intervals at each origin, ``{level: (lower,
            upper)}`` with arrays ``(n_origins, horizon)``; :meth:`coverage` scores them.
        notes: what changed the comparison, one sentence each (a baseline that could not be
            fitted at some origin and was left out; a forecaster fitted on too short a
            history for its network).
    """

    metrics: dict[str, dict[str, float]]
    origins: np.ndarray
    actual: np.ndarray
    forecasts: dict[str, np.ndarray]
    attention: np.ndarray
    model: object
    intervals: dict | None = None
    notes: list[str] = field(default_factory=list)

    COLUMNS = (("MAE", "MAE", ".3f"), ("RMSE", "RMSE", ".3f"), ("MAPE %", "MAPE", ".2f"),
               ("MASE", "MASE", ".3f"))




def interval_coverage(actual: np.ndarray, intervals: dict | None) -> dict[float, float]:
    """``{level: share of actual values inside (lower, upper)}``, pooled over every row."""
    return {q: float(np.mean((actual >= lo) & (actual <= hi)))
            for q, (lo, hi) in (intervals or {}).items()}


def base_history(season: int) -> int:
    """The history a base-only backtest needs before its first origin: two seasons, or 4
    observations (a series too short for the network at any origin)."""
    return max(2 * season, 4)


def most_origins(forecaster, n: int, step: int | None = None) -> int:
    """The most origins ``step`` apart (default: the horizon) a series of ``n`` observations
    holds with the forecaster's network fitted before the first (0 when none)."""
    H = forecaster.horizon
    step = H if step is None else step
    return max(0, (n - forecaster.min_length - H) // step + 1)


def rolling_origin(forecaster, y: np.ndarray, X: np.ndarray | None = None, n_origins: int = 10,
                   step: int | None = None,
                   baselines: tuple[str, ...] = ("seasonal_naive", "ets", "ar"),
                   refit: bool = False, X_future: np.ndarray | None = None) -> BacktestResult:
    """Backtest ``forecaster`` (an unfitted estimator with ``horizon``, ``effective_season``,
    ``min_length``, ``fit(y, X)`` and ``predict(horizon, y, X)``) on the checked series ``y``
    and past covariates ``X`` (and known-future covariates ``X_future``, whose rows at each
    origin's forecast steps are passed to ``predict``); see
    :meth:`~attnlab.models.forecast.AttentionForecaster.backtest`.
    """
    H, m = forecaster.horizon, forecaster.effective_season
    step = H if step is None else step
    if not isinstance(n_origins, (int, np.integer)) or n_origins < 1:
        raise ValueError(f"n_origins must be an int >= 1, got {n_origins!r}")
    last = len(y) - H
    origins = last - step * np.arange(n_origins)[::-1]
    notes = []
    # a series too short for the network at any origin is backtested as what it forecasts:
    # the base alone, from a first origin with two seasons (or 4 observations) before it
    short = last < forecaster.min_length
    first_need = base_history(m) if short else forecaster.min_length
    if short and origins[0] >= first_need:
        notes.append(f"the series ({len(y)} observations) is too short for the network at any "
                     f"origin (it needs {forecaster.min_length} before the first): the "
                     "forecaster is its base alone")
    if origins[0] < first_need:
        need = first_need + H + step * (n_origins - 1)
        fit = max(0, (len(y) - first_need - H) // step + 1)
        # min_length = history + H + 10 and the origins take H + step (k - 1) more
        history = forecaster.min_length - H - 10
        h_max = (len(y) - history - 10 - step * (n_origins - 1)) // 2 if step != H else \
            (len(y) - history - 10) // (n_origins + 1)
        if fit >= 1:
            fix = f"use at most {fit} origins (n_origins; --origins on the command line)"
        elif h_max >= 1:
            fix = f"use a horizon of at most {h_max} steps, or fewer origins"
        else:
            fix = (f"the series is too short for this lookback ({history} steps read): give a "
                   "longer series or a shorter lookback")
        raise ValueError(f"y has {len(y)} observations but {n_origins} origins {step} apart "
                         f"with horizon {H} need {need} (the first origin needs "
                         f"{first_need} for training); {fix}")
    unknown = set(baselines) - set(BASELINES)
    if unknown:
        raise ValueError(f"baselines must be among {', '.join(BASELINES)}; got "
                         f"{sorted(unknown)}")
    t0 = int(origins[0])
    fit_kw = {} if X_future is None else {"X_future": X_future[:t0]}
    model = first = clone(forecaster).fit(y[:t0], None if X is None else X[:t0], **fit_kw)
    scale = float(np.mean(np.abs(y[m:t0] - y[:t0 - m])))
    actual = np.stack([y[t:t + H] for t in origins])
    names = ["attention"] + list(baselines)
    fc = {name: [] for name in names}
    weights = []
    failed: dict[str, tuple[int, str]] = {}
    bands: dict[float, tuple[list, list]] = {}
    for t in origins:
        xt = None if X is None else X[:t]
        if refit and t != t0:
            kw = {} if X_future is None else {"X_future": X_future[:t]}
            model = clone(forecaster).fit(y[:t], xt, **kw)
        kw = {} if X_future is None else {"X_future": X_future[t:t + H]}
        pred = model.predict(H, y[:t], xt, **kw)
        fc["attention"].append(pred)
        if hasattr(model, "interval_bounds"):
            for q, (lo, hi) in model.interval_bounds(pred).items():
                bands.setdefault(q, ([], []))
                bands[q][0].append(lo)
                bands[q][1].append(hi)
        weights.append(model.attention_)
        made = {}
        for name in baselines:
            if name in failed:
                continue
            if name == "combination" and all(c in made for c in COMBINED):
                made[name] = np.median(np.stack([made[c] for c in COMBINED]), axis=0)
            else:                           # the median of the components already run
                try:
                    made[name] = BASELINES[name](y[:t], H, m)
                except (ValueError, np.linalg.LinAlgError) as err:
                    failed[name] = (int(t), str(err))
                    continue
            fc[name].append(made[name])
    for name, (t, err) in failed.items():       # a baseline is compared at every origin or none
        fc.pop(name)
        notes.append(f"the {name} baseline could not be fitted on the history before origin "
                     f"{t} ({err}); it is left out of the comparison")
    forecasts = {k: np.stack(v) for k, v in fc.items()}
    metrics = {k: forecast_errors(actual, v, scale) for k, v in forecasts.items()}
    intervals = {q: (np.stack(lo), np.stack(hi)) for q, (lo, hi) in bands.items()} or None
    return BacktestResult(metrics, origins, actual, forecasts, np.stack(weights), first,
                          intervals, notes)
