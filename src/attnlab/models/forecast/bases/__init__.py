"""Statistical base forecasts of the hybrid forecaster: the network learns what they leave.

A base is fitted once, on the training series, and then forecasts ``horizon`` steps from any
origin of a series with its parameters fixed (its states filtered over the history, no refit),
so that one fit gives the reference of every training window and of every later forecast.
This is the arrangement of Smyl's ES-RNN, which won the M4 competition (Smyl 2020): an
exponential-smoothing model for level and season, a recurrent network for what they miss.

* ``seasonal_naive`` / ``naive``: the last season (the last value) repeated.
* ``drift``: the last value plus the history's average step (a random walk with drift).
* ``ets``: Holt-Winters, additive damped trend, additive season when two seasons exist;
  parameters by statsmodels' maximum likelihood (the same model as the ``ets`` baseline).
* ``ar``: AutoReg with a constant, order by AIC; on first differences when the levels' fit is
  not stationary (an AR on the levels of a random walk extrapolates exponential growth).
* ``arima``: statsmodels ARIMA, d by the ADF test, seasonal D = 1 when the season is strong
  (STL, Wang, Smith & Hyndman 2006), (p, q) by AIC over a small grid; forecasts from any
  origin come from its Kalman filter's predicted states.
* ``theta``: the Theta method (Assimakopoulos & Nikolopoulos 2000) as statsmodels fits it
  (SES plus half the linear trend, seasonally adjusted by classical decomposition when an
  autocorrelation test finds a season); equal to SES with drift (Hyndman & Billah 2003).
* ``combination``: the median of ets, arima and theta forecasts (combinations are hard to beat:
  Makridakis et al. 2020, M4; Petropoulos & Svetunkov 2020).
* ``none``: the training mean, i.e. no base: the network predicts the series itself.
* ``auto``: the candidate with the lowest error over several rolling origins at the end of the
  training series, each candidate refitted at every origin as the test refits it
  (:func:`choose_base`).
"""


from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np

from attnlab.models.forecast.bases.arima import AR, ARIMA, needs_difference, seasonal_strength
from attnlab.models.forecast.bases.core import Base, Combination, Drift, Mean, Naive, SeasonalNaive
from attnlab.models.forecast.bases.smoothing import ETS, Theta

CANDIDATES = ("seasonal_naive", "drift", "ets", "arima", "theta", "combination")
COMBINED = ("ets", "arima", "theta")


# Fits are deterministic in (name, season, spec, y): choosing a base, backtests, ablations and
# the paper refit the same base on the same history many times. Kept: the last _FITS_SIZE.
_FITS: OrderedDict[tuple, Base] = OrderedDict()
_FITS_SIZE = 512


def fit_base(name: str, y: np.ndarray, season: int, spec=None) -> Base:
    """Fit the base ``name`` (one of :data:`BASES` except ``auto``) on ``y``. ``spec``: for
    ``arima``, the (p, d, q, D) to keep (a refit at another origin). A fit of the same base on
    the same values is computed once and copied."""
    y = np.asarray(y, dtype=float)
    key = (name, int(season), None if spec is None else tuple(spec), y.tobytes())
    hit = _FITS.get(key)
    if hit is None:
        hit = _fit(name, y, season, spec)
        _FITS[key] = hit
        if len(_FITS) > _FITS_SIZE:
            _FITS.popitem(last=False)
    else:
        _FITS.move_to_end(key)
    return copy.deepcopy(hit)


def _fit(name: str, y: np.ndarray, season: int, spec) -> Base:
    cls = BASES.get(name)
    if cls is None:
        raise ValueError(f"base must be one of {', '.join(NAMES)}, got {name!r}")
    return cls.fit(y, season, spec)


FALLBACKS = ("ets", "theta", "drift", "naive")          # naive fits any two observations


def fit_first(order, y: np.ndarray, season: int) -> tuple[Base, list[str]]:
    """The first base of ``order`` (then of :data:`FALLBACKS`) that can be fitted on ``y``
    and forecast from its end; returns it and one note per base dropped on the way."""
    notes = []
    for name in list(order) + [c for c in FALLBACKS if c not in order]:
        try:
            base = fit_base(name, y, season)
        except (ValueError, np.linalg.LinAlgError) as err:
            notes.append(f"the {name} base could not be fitted on this series ({err}); "
                         "dropped from the candidates")
            continue
        if base.history <= len(y):
            return base, notes
        notes.append(f"the {name} base needs {base.history} observations, y has {len(y)}; "
                     "dropped from the candidates")
    raise ValueError(f"no base could be fitted on {len(y)} observation(s)")


def choose_base(y: np.ndarray, season: int, horizon: int, n_origins: int = 3,
                candidates: tuple[str, ...] = CANDIDATES) -> tuple[str, dict]:
    """``auto``: the candidate with the lowest mean absolute error over ``n_origins`` rolling
    origins at the end of ``y``, ``horizon`` apart, every candidate refitted on the history
    before each origin (as a backtest refits it; ARIMA keeps the orders chosen at the first
    origin). The combination is scored from its components' forecasts at the same origins.
    Returns the name and every candidate's mean error divided by the in-sample MAE of the
    one-step naive forecast (a MASE). Too short a series for two origins: ``ets`` when two
    seasons fit, else ``drift``."""
    min_train = max(2 * season, 12) + 1
    k = min(n_origins, (len(y) - min_train) // horizon)
    if k < 2:
        return ("ets" if len(y) >= 2 * max(season, 1) + 2 else "drift"), {}
    origins = [len(y) - horizon * (k - i) for i in range(k)]
    scale = float(np.mean(np.abs(np.diff(y[:origins[0]])))) or 1.0
    errors: dict[str, list[float]] = {}
    spec = None
    need = set(candidates) | (set(COMBINED) if "combination" in candidates else set())
    for o in origins:
        hist, actual = y[:o], y[o:o + horizon]
        fc = {}
        for name in [c for c in (*COMBINED, *candidates) if c in need and c != "combination"]:
            if name in fc:
                continue
            try:
                base = fit_base(name, hist, season, spec if name == "arima" else None)
            except (ValueError, np.linalg.LinAlgError):
                continue
            if name == "arima":
                spec = base.spec
            if len(hist) >= base.history:
                fc[name] = base.forecasts(hist, np.array([len(hist)]), horizon)[0]
        if "combination" in candidates and all(c in fc for c in COMBINED):
            fc["combination"] = np.median(np.stack([fc[c] for c in COMBINED]), axis=0)
        for name in candidates:
            if name in fc:
                errors.setdefault(name, []).append(float(np.mean(np.abs(fc[name] - actual))))
    scores = {name: float(np.mean(v)) / scale for name, v in errors.items() if len(v) == k}
    best = min(scores, key=scores.get) if scores else "drift"
    return best, scores


def base_from_dict(d: dict) -> Base:
    """The base :meth:`Base.to_dict` wrote (a saved model's config)."""
    cls = BASES.get(d.get("name"))
    if cls is None:
        raise ValueError(f"unknown base {d.get('name')!r} in the saved model")
    return cls.from_dict(d)


#: Every base by name, one class each; ``auto`` (:func:`choose_base`) picks among them.
BASES: dict[str, type[Base]] = {cls.name: cls for cls in (
    SeasonalNaive, Naive, Drift, ETS, AR, ARIMA, Theta, Combination, Mean)}
NAMES = (*BASES, "auto")
# the default base of every forecaster and command: the median of ETS, ARIMA and Theta. On a
# sample of M3's monthly series (docs/applied.md) it forecasts as well as that ensemble, where
# "auto" (one base picked on the training tail) is 7% worse: picking on a short tail is noisy
DEFAULT = "combination"

__all__ = ["AR", "ARIMA", "BASES", "Base", "CANDIDATES", "COMBINED", "Combination", "DEFAULT",
           "Drift",
           "ETS", "FALLBACKS", "Mean", "NAMES", "Naive", "SeasonalNaive", "Theta",
           "base_from_dict", "choose_base", "fit_base", "fit_first", "needs_difference",
           "seasonal_strength"]
