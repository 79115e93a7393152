"""Statistical base forecasts of the hybrid forecaster: the network learns what they leave.

A base is fitted once, on the training series, and then forecasts ``horizon`` steps from any
origin of a series with its parameters fixed (its states filtered over the history, no refit),
so that one fit gives the reference of every training window and of every later forecast.
This is the arrangement of Smyl's ES-RNN, which won the M4 competition (Smyl 2020): an
exponential-smoothing model for level and season, a recurrent network for what they miss.

* ``seasonal_naive`` / ``naive``: the last season (the last value) repeated.
* ``ets``: Holt-Winters, additive damped trend, additive season when two seasons exist;
  parameters by statsmodels' maximum likelihood (the same model as the ``ets`` baseline).
* ``ar``: AutoReg with a constant, order by AIC (the same model as the ``ar`` baseline).
* ``none``: the training mean, i.e. no base: the network predicts the series itself.
* ``auto``: the one of seasonal_naive, ets and ar with the lowest MAE on the last part of the
  training series, each fitted on what precedes it (:func:`choose_base`).
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod

import numpy as np

BASES = ("seasonal_naive", "naive", "ets", "ar", "none", "auto")
CANDIDATES = ("seasonal_naive", "ets", "ar")


class Base(ABC):
    """A fitted base. ``forecasts(y, ends, horizon, state)`` -> ``(len(ends), horizon)``: the
    forecast made after observing ``y[:e]`` for each ``e`` in ``ends``; ``state`` is the
    filter's state just before ``y[0]`` (None: the fitted initial state)."""

    name = "base"
    history = 1                                  # observations a forecast needs at least

    @abstractmethod
    def forecasts(self, y, ends, horizon, state=None) -> np.ndarray:
        """``(len(ends), horizon)`` forecasts."""

    def state_before(self, y, t: int):
        """The filter state just before ``y[t]`` (None for bases without one)."""
        return None

    def to_dict(self) -> dict:
        """The fitted parameters as plain values (saved in config.json)."""
        return {"name": self.name}


class SeasonalNaive(Base):
    """The value one season earlier."""
    name = "seasonal_naive"

    def __init__(self, season: int):
        self.m = max(1, int(season))
        self.history = self.m

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end of ``y``."""
        h = np.arange(horizon)
        return y[np.asarray(ends)[:, None] - self.m + (h % self.m)[None, :]]

    def to_dict(self):
        """The parameters as plain values."""
        return {"name": self.name, "season": self.m}


class Naive(SeasonalNaive):
    """The last value."""
    name = "naive"

    def __init__(self, season: int = 1):
        super().__init__(1)

    def to_dict(self):
        """The parameters as plain values."""
        return {"name": self.name}


class Mean(Base):
    """No base: the training mean (the network predicts the deviation from it)."""

    name = "none"

    def __init__(self, mean: float):
        self.mean = float(mean)

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end of ``y``."""
        return np.full((len(ends), horizon), self.mean)

    def to_dict(self):
        """The parameters as plain values."""
        return {"name": self.name, "mean": self.mean}


class AR(Base):
    """``y_t = c + sum_i phi_i y_{t - lag_i}``, forecast recursively."""

    name = "ar"

    def __init__(self, const: float, lags: list[int], coefs: list[float]):
        self.const, self.lags, self.coefs = float(const), [int(x) for x in lags], \
            [float(x) for x in coefs]
        self.history = max(self.lags, default=1)

    @classmethod
    def fit(cls, y: np.ndarray, season: int) -> "AR":
        """Fit the autoregression on ``y`` (statsmodels AutoReg); returns self."""
        from statsmodels.tsa.ar_model import AutoReg, ar_select_order

        maxlag = max(1, min(max(2 * season, 12), len(y) // 4))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lags = ar_select_order(y, maxlag=maxlag, ic="aic", trend="c").ar_lags or []
            res = AutoReg(y, lags=lags or 0, trend="c").fit()
        params = np.asarray(res.params, dtype=float)
        return cls(params[0], list(lags), list(params[1:]))

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end, parameters fixed."""
        ends = np.asarray(ends)
        p = self.history
        buf = np.concatenate([y[ends[:, None] - p + np.arange(p)[None, :]],
                              np.zeros((len(ends), horizon))], axis=1)        # (W, p + H)
        for h in range(horizon):
            t = p + h
            buf[:, t] = self.const + sum(c * buf[:, t - lag]
                                         for c, lag in zip(self.coefs, self.lags))
        return buf[:, p:]

    def to_dict(self):
        """The fitted parameters as plain values."""
        return {"name": self.name, "const": self.const, "lags": self.lags, "coefs": self.coefs}


class ETS(Base):
    """Holt-Winters with additive damped trend and (optionally) additive season::

        l_t = a (y_t - s_{t-m}) + (1 - a)(l_{t-1} + phi b_{t-1})
        b_t = b (l_t - l_{t-1}) + (1 - b) phi b_{t-1}
        s_t = g (y_t - l_{t-1} - phi b_{t-1}) + (1 - g) s_{t-m}
        y_hat_{t+h} = l_t + (phi + ... + phi^h) b_t + s_{t+h-m(k+1)},  k = floor((h-1)/m)
    """

    name = "ets"

    def __init__(self, alpha, beta, gamma, phi, level, trend, seasons, season):
        self.alpha, self.beta, self.gamma, self.phi = (float(x) for x in (alpha, beta, gamma,
                                                                             phi))
        self.level, self.trend = float(level), float(trend)
        self.seasons = [float(s) for s in seasons]            # oldest first, m values or none
        self.m = int(season) if self.seasons else 1
        self.history = 1

    @classmethod
    def fit(cls, y: np.ndarray, season: int) -> "ETS":
        """Fit exponential smoothing on ``y`` (statsmodels ETS); returns self."""
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        seasonal = season > 1 and len(y) >= 2 * season
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ExponentialSmoothing(y, trend="add", damped_trend=True,
                                       seasonal="add" if seasonal else None,
                                       seasonal_periods=season if seasonal else None,
                                       initialization_method="estimated").fit()
        p = res.params
        gamma = p.get("smoothing_seasonal", 0.0) if seasonal else 0.0
        seasons = list(np.asarray(p["initial_seasons"], dtype=float)) if seasonal else []
        return cls(p["smoothing_level"], p["smoothing_trend"], gamma or 0.0,
                   p["damping_trend"], p["initial_level"], p["initial_trend"], seasons,
                   season if seasonal else 1)

    def _filter(self, y, state=None):
        """States after each observation: level (n,), trend (n,), and the season buffer of
        the last m seasonal values after each step (n, m)."""
        a, b, g, phi = self.alpha, self.beta, self.gamma, self.phi
        if state is None:
            lev, tr, seas = self.level, self.trend, list(self.seasons)
        else:
            lev, tr, seas = state[0], state[1], list(state[2])
        n = len(y)
        L, T = np.empty(n), np.empty(n)
        S = np.empty((n, len(seas)))
        for t in range(n):
            s_old = seas[0] if seas else 0.0
            new_lev = a * (y[t] - s_old) + (1 - a) * (lev + phi * tr)
            new_tr = b * (new_lev - lev) + (1 - b) * phi * tr
            if seas:
                s_new = g * (y[t] - lev - phi * tr) + (1 - g) * s_old
                seas = seas[1:] + [s_new]
                S[t] = seas
            lev, tr = new_lev, new_tr
            L[t], T[t] = lev, tr
        return L, T, S

    def state_before(self, y, t: int):
        """The filtered state at step ``t``, the fitted parameters fixed."""
        if t == 0:
            return None
        L, T, S = self._filter(y[:t])
        return (float(L[-1]), float(T[-1]), list(S[-1]) if self.seasons else [])

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end, parameters fixed."""
        ends = np.asarray(ends)
        L, T, S = self._filter(y, state)
        h = np.arange(1, horizon + 1)
        damp = np.cumsum(self.phi ** h)                                  # phi + ... + phi^h
        if state is None:
            lev0, tr0, seas0 = self.level, self.trend, self.seasons
        else:
            lev0, tr0, seas0 = state
        out = np.empty((len(ends), horizon))
        for r, e in enumerate(ends):
            lev, tr = (L[e - 1], T[e - 1]) if e > 0 else (lev0, tr0)
            fc = lev + damp * tr
            if self.seasons:
                seas = S[e - 1] if e > 0 else np.asarray(seas0)
                fc = fc + seas[(h - 1) % self.m]
            out[r] = fc
        return out

    def to_dict(self):
        """The fitted parameters as plain values."""
        return {"name": self.name, "alpha": self.alpha, "beta": self.beta, "gamma": self.gamma,
                "phi": self.phi, "level": self.level, "trend": self.trend,
                "seasons": self.seasons, "season": self.m}


def fit_base(name: str, y: np.ndarray, season: int) -> Base:
    """Fit the base ``name`` (one of :data:`BASES` except ``auto``) on ``y``."""
    if name == "seasonal_naive":
        return SeasonalNaive(season)
    if name == "naive":
        return Naive()
    if name == "none":
        return Mean(float(np.mean(y)))
    if name == "ets":
        return ETS.fit(y, season)
    if name == "ar":
        return AR.fit(y, season)
    raise ValueError(f"base must be one of {', '.join(BASES)}, got {name!r}")


def choose_base(y: np.ndarray, season: int, horizon: int,
                val_fraction: float = 0.25) -> tuple[str, dict]:
    """``auto``: the candidate with the lowest MAE over every forecast origin in the last
    ``val_fraction`` of ``y`` (at least two horizons), each candidate fitted once on what
    precedes them and forecasting with its parameters fixed (so many overlapping origins cost
    one fit). Returns the name and every candidate's MAE."""
    n_val = max(2 * horizon, int(round(len(y) * val_fraction)))
    split = len(y) - n_val
    if split < max(2 * season, 12) + 1:
        return "seasonal_naive", {}
    ends = np.arange(split, len(y) - horizon + 1)
    actual = y[ends[:, None] + np.arange(horizon)[None, :]]
    scores = {}
    for name in CANDIDATES:
        base = fit_base(name, y[:split], season)
        if split < base.history:
            continue
        scores[name] = float(np.mean(np.abs(base.forecasts(y, ends, horizon) - actual)))
    best = min(scores, key=scores.get) if scores else "seasonal_naive"
    return best, scores


def base_from_dict(d: dict) -> Base:
    """The base :meth:`Base.to_dict` wrote (a saved model's config)."""
    name = d.get("name")
    if name == "seasonal_naive":
        return SeasonalNaive(d["season"])
    if name == "naive":
        return Naive()
    if name == "none":
        return Mean(d["mean"])
    if name == "ar":
        return AR(d["const"], d["lags"], d["coefs"])
    if name == "ets":
        return ETS(d["alpha"], d["beta"], d["gamma"], d["phi"], d["level"], d["trend"],
                   d["seasons"], d["season"])
    raise ValueError(f"unknown base {name!r} in the saved model")
