"""The exponential-smoothing bases: Holt-Winters ETS and the Theta method (statsmodels)."""

from __future__ import annotations

import warnings

import numpy as np

from attnlab.models.forecast.bases.core import Base


class Theta(Base):
    """The Theta method with fixed parameters: ``x`` the seasonally adjusted series, ``l_t`` its
    simple exponential smoothing (alpha, started at ``x_0``), and
    ``x_hat(T + h) = l_T + b0 / 2 (h - 1 + 1/alpha - (1 - alpha)^T / alpha)``, re-seasonalized."""

    name = "theta"
    history = 1

    def __init__(self, alpha, b0, seasons, method, x0):
        self.alpha, self.b0, self.x0 = float(alpha), float(b0), float(x0)
        self.seasons = [float(v) for v in seasons]          # index t % m, from the fitted start
        self.method = method                                  # "mul", "add" (or "none")
        self.m = len(self.seasons)

    @classmethod
    def fit(cls, y: np.ndarray, season: int, spec=None) -> "Theta":
        """statsmodels ThetaModel (its seasonality test and classical decomposition)."""
        from statsmodels.tsa.forecasting.theta import ThetaModel

        period = season if season > 1 and len(y) >= 2 * season else 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ThetaModel(y, period=period)
            res = model.fit()
            # the adjusted series and indices ThetaModel forecasts with (its own decomposition)
            adjusted, seasons = model._deseasonalize_data()
        method = model._method if len(seasons) else "none"
        return cls(res.params["alpha"], res.params["b0"], list(seasons), method, adjusted[0])

    def _adjust(self, y, offset):
        if not self.m:
            return y
        s = np.asarray(self.seasons)[(offset + np.arange(len(y))) % self.m]
        return y / s if self.method == "mul" else y - s

    def _reseason(self, fc, positions):
        if not self.m:
            return fc
        s = np.asarray(self.seasons)[positions % self.m]
        return fc * s if self.method == "mul" else fc + s

    def state_before(self, y, t: int):
        """The smoothed level after ``y[:t]`` and ``t``."""
        if t == 0:
            return None
        x = self._adjust(y[:t], 0)
        return (float(self._levels(x, self.x0)[-1]), int(t))

    def _levels(self, x, start):
        a, lev = self.alpha, start
        out = np.empty(len(x))
        for i, v in enumerate(x):
            lev = a * v + (1 - a) * lev
            out[i] = lev
        return out

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end, parameters fixed."""
        ends = np.asarray(ends)
        start, before = (self.x0, 0) if state is None else state
        lev = self._levels(self._adjust(y, before), start)
        a, h = self.alpha, np.arange(1, horizon + 1)
        n = ends + before                                       # observations seen, T
        trend = self.b0 / 2 * (h[None, :] - 1 + 1 / a - ((1 - a) ** n)[:, None] / a)
        fc = lev[ends - 1][:, None] + trend
        return self._reseason(fc, n[:, None] + h[None, :] - 1)

    def to_dict(self):
        """The fitted parameters as plain values."""
        return {"name": self.name, "alpha": self.alpha, "b0": self.b0, "seasons": self.seasons,
                "method": self.method, "x0": self.x0}


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
    def fit(cls, y: np.ndarray, season: int, spec=None) -> "ETS":
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
