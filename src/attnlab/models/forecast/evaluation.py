"""A global forecaster judged as the forecasting competitions judge: the last ``horizon``
observations of every series held out, every method fitted on what comes before them.

:func:`holdout_panel` fits a clone of a :class:`~attnlab.models.forecast.GlobalForecaster` on
the training part of each series and forecasts the held-out part, beside the traditional
methods fitted per series (seasonal naive, ETS, ARIMA, Theta and the median of the last three,
the statistical ensemble of the M3 literature). Errors are per series, then averaged: MASE in
each series' own scale (the in-sample mean absolute seasonal difference), sMAPE in percent,
so that series of any size count alike. :func:`panel_ablation` asks of the same split what
:func:`~attnlab.models.forecast.ablation.ablation` asks of one series: is it the attention that
helps?
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone

from attnlab.models.forecast.ablation import AblationResult
from attnlab.models.forecast.backtest import Scored
from attnlab.models.forecast.baselines import forecast_errors, seasonal_scale
from attnlab.models.forecast.bases import COMBINED, fit_first

#: The methods every series is forecast with beside the global model.
PANEL_BASELINES = ("seasonal_naive", "ets", "arima", "theta", "combination")


@dataclass
class PanelResult(Scored):
    """What :func:`holdout_panel` measured; row ``i`` of every array is series ``ids[i]``.

    Attributes:
        ids: the series' identifiers.
        actual: ``(S, H)`` held-out values.
        forecasts: ``{method: (S, H)}``; ``"attention"`` is the global model.
        scales: ``(S,)`` each series' MASE denominator on its training part.
        metrics: ``{method: {"MAE", "MASE", "sMAPE"}}``, each the mean over series of the
            series' own value (MAE is in the series' units, so only comparable within one).
        per_series: ``{method: (S,)}`` MASE of each series.
        attention: ``(S, L)`` the network's weights at each series' forecast origin (rows of
            series too short for the network are NaN).
        model: the global forecaster fitted on the training parts.
        intervals: ``{level: (lower, upper)}`` arrays ``(S, H)``.
        notes: a method that fell back on some series, series left to their base.
    """

    ids: list
    actual: np.ndarray
    forecasts: dict[str, np.ndarray]
    scales: np.ndarray
    metrics: dict[str, dict[str, float]]
    per_series: dict[str, np.ndarray]
    attention: np.ndarray
    model: object
    intervals: dict | None = None
    notes: list[str] = field(default_factory=list)

    COLUMNS = (("sMAPE %", "sMAPE", ".2f"), ("MASE", "MASE", ".3f"))


def split_panel(Y, horizon: int) -> tuple[list, list[np.ndarray], list[np.ndarray], list]:
    """``(ids, train parts, held-out parts, dates of the train parts)`` of a panel in any
    form :class:`~attnlab.models.forecast.GlobalForecaster` takes; a series needs more than
    ``horizon`` observations."""
    from attnlab.models.forecast.panel import as_panel

    ids, series, dates = as_panel(Y)
    short = [uid for uid, y in zip(ids, series) if len(y) <= horizon]
    if short:
        raise ValueError(f"{len(short)} series have at most horizon={horizon} observations and "
                         f"leave nothing to fit on once the last {horizon} are held out "
                         f"(first: {short[0]!r}); drop them or use a shorter horizon")
    train = [y[:-horizon] for y in series]
    test = [y[-horizon:] for y in series]
    return ids, train, test, [None if d is None else d[:-horizon] for d in dates]


def _baseline_forecasts(x: np.ndarray, h: int, m: int, names) -> tuple[dict, list[str]]:
    """Each method of ``names`` fitted on ``x`` (a method that cannot be fitted falls back as
    :func:`~attnlab.models.forecast.bases.fit_first` does; the fallbacks are returned)."""
    out, fell = {}, []
    for name in names:
        if name == "combination" and all(c in out for c in COMBINED):
            out[name] = np.median(np.stack([out[c] for c in COMBINED]), axis=0)
            continue
        base, notes = fit_first([name], x, m)
        if notes:
            fell.append(name)
        out[name] = base.forecasts(x, np.array([len(x)]), h)[0]
    return out, fell


def holdout_panel(forecaster, Y, *, baselines=PANEL_BASELINES, n_jobs: int | None = None
                  ) -> PanelResult:
    """Fit a clone of the unfitted global ``forecaster`` on every series but its last
    ``horizon`` observations, forecast those, and score it beside ``baselines`` (see the
    module docstring)."""
    from joblib import Parallel, delayed

    H, m = forecaster.horizon, forecaster.effective_season
    ids, train, test, dates = split_panel(Y, H)
    model = clone(forecaster).fit(dict(zip(ids, _dated(train, dates))))
    fc, bounds = model.forecast_arrays()
    if n_jobs in (None, 1):
        made = [_baseline_forecasts(x, H, m, baselines) for x in train]
    else:
        made = Parallel(n_jobs=n_jobs)(delayed(_baseline_forecasts)(x, H, m, baselines)
                                       for x in train)
    actual = np.stack(test)
    forecasts = {"attention": fc, **{k: np.stack([f[k] for f, _ in made]) for k in baselines}}
    scales = np.array([seasonal_scale(x, m) or 1.0 for x in train])
    per_series, metrics = {}, {}
    for k, f in forecasts.items():
        errs = [forecast_errors(actual[i], f[i], scales[i]) for i in range(len(ids))]
        per_series[k] = np.array([e["MASE"] for e in errs])
        metrics[k] = {key: float(np.mean([e[key] for e in errs]))
                      for key in ("MAE", "MASE", "sMAPE")}
    notes = list(model.notes_)
    for k in baselines:
        n = sum(k in fell for _, fell in made)
        if n:
            notes.append(f"the {k} baseline could not be fitted on {n} series and fell back "
                         "to the next of ETS, Theta, drift, naive there")
    return PanelResult(list(ids), actual, forecasts, scales, metrics, per_series,
                       model.attention_weights(), model, bounds, notes)


def _dated(train, dates):
    """The training parts as pandas series where the panel had dates (so that the model's
    forecasts carry them)."""
    import pandas as pd

    return [x if d is None else pd.Series(x, index=d) for x, d in zip(train, dates)]


def panel_ablation(forecaster, Y, *, seeds=(0, 1, 2), series: str = "panel",
                   progress=None, done: PanelResult | None = None) -> AblationResult:
    """The ablation of :mod:`~attnlab.models.forecast.ablation` on the held-out split of a
    panel: the global model, the same network with mean pooling, the network without bases
    (``base="none"``), each over ``seeds``, and the bases alone (deterministic). ``done``: the
    :func:`holdout_panel` of ``forecaster`` itself with its base among the baselines, reused
    for its seed instead of fitted again."""
    seeds = tuple(int(s) for s in seeds)
    res = AblationResult(series, forecaster.base, seeds=seeds,
                         settings={"horizon": forecaster.horizon, "season": forecaster.season,
                                   "lookback": forecaster.effective_lookback,
                                   "encoder": forecaster.encoder})
    variants = {"base + attention": {}, "base + mean pooling": {"pool": "mean"},
                "network, no base": {"base": "none"}}
    for i, seed in enumerate(seeds):
        for name, change in variants.items():
            model = clone(forecaster).set_params(seed=seed, **change)
            first = i == 0 and name == "base + attention"
            if first and done is not None and seed == forecaster.seed and \
                    forecaster.base in done.metrics:
                r = done
            else:
                r = holdout_panel(model, Y, baselines=(forecaster.base,) if first else ())
            res.mase.setdefault(name, []).append(r.metrics["attention"]["MASE"])
            if forecaster.base in r.metrics:
                res.mase[f"base alone ({forecaster.base})"] = [r.metrics[forecaster.base]["MASE"]]
            if progress is not None:
                progress(f"{series}: seed {seed}, {name}: MASE "
                         f"{r.metrics['attention']['MASE']:.3f}")
    return res
