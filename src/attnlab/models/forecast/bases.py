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
import warnings
from abc import ABC, abstractmethod
from collections import OrderedDict

import numpy as np

CANDIDATES = ("seasonal_naive", "drift", "ets", "arima", "theta", "combination")
COMBINED = ("ets", "arima", "theta")


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

    @classmethod
    def fit(cls, y: np.ndarray, season: int, spec=None) -> "Base":
        """The base fitted on ``y`` (``spec``: what a refit at another origin keeps)."""
        return cls()

    @classmethod
    def from_dict(cls, d: dict) -> "Base":
        """The base :meth:`to_dict` wrote."""
        return cls(**{k: v for k, v in d.items() if k != "name"})


class SeasonalNaive(Base):
    """The value one season earlier."""
    name = "seasonal_naive"

    def __init__(self, season: int):
        self.m = max(1, int(season))
        self.history = self.m

    @classmethod
    def fit(cls, y, season, spec=None):
        """Nothing to estimate: the season's length."""
        return cls(season)

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

    @classmethod
    def fit(cls, y, season, spec=None):
        """The training mean."""
        return cls(float(np.mean(y)))

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end of ``y``."""
        return np.full((len(ends), horizon), self.mean)

    def to_dict(self):
        """The parameters as plain values."""
        return {"name": self.name, "mean": self.mean}


class AR(Base):
    """``y_t = c + sum_i phi_i y_{t - lag_i}``, forecast recursively; with ``diff = 1`` the same
    on the first differences ``y_t - y_{t-1}``, whose forecasts are summed back onto the last
    value."""

    name = "ar"

    def __init__(self, const: float, lags: list[int], coefs: list[float], diff: int = 0):
        self.const, self.lags, self.coefs = float(const), [int(x) for x in lags], \
            [float(x) for x in coefs]
        self.diff = int(diff)
        self.history = max(self.lags, default=1) + self.diff

    @classmethod
    def fit(cls, y: np.ndarray, season: int, spec=None) -> "AR":
        """Fit the autoregression on ``y`` (statsmodels AutoReg); on its first differences when
        the fit on the levels is not stationary (a root of its polynomial on or inside the unit
        circle: it would extrapolate a unit root or exponential growth). A long stationary
        cycle (the sunspots) keeps its levels, where a unit-root test alone would difference
        it."""
        fit = cls._fit(y, season, 0)
        if not fit.stationary():
            fit = cls._fit(np.diff(y), season, 1)
        return fit

    @classmethod
    def _fit(cls, y, season, diff):
        from statsmodels.tsa.ar_model import AutoReg, ar_select_order

        maxlag = max(1, min(max(2 * season, 12), len(y) // 4))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lags = ar_select_order(y, maxlag=maxlag, ic="aic", trend="c").ar_lags or []
            res = AutoReg(y, lags=lags or 0, trend="c").fit()
        params = np.asarray(res.params, dtype=float)
        return cls(params[0], list(lags), list(params[1:]), diff)

    def stationary(self) -> bool:
        """Whether every root of the AR polynomial lies outside the unit circle."""
        if not self.lags:
            return True
        poly = np.zeros(max(self.lags) + 1)
        poly[0] = 1.0
        for c, lag in zip(self.coefs, self.lags):
            poly[lag] -= c
        roots = np.roots(poly[::-1])
        return bool(np.all(np.abs(roots) > 1.0 + 1e-6))

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end, parameters fixed."""
        ends = np.asarray(ends)
        p = self.history - self.diff
        if self.diff:
            lv = y[ends[:, None] - p - 1 + np.arange(p + 1)[None, :]]            # (W, p + 1)
            start = np.diff(lv, axis=1)
        else:
            start = y[ends[:, None] - p + np.arange(p)[None, :]]
        buf = np.concatenate([start, np.zeros((len(ends), horizon))], axis=1)  # (W, p + H)
        for h in range(horizon):
            t = p + h
            buf[:, t] = self.const + sum(c * buf[:, t - lag]
                                         for c, lag in zip(self.coefs, self.lags))
        out = buf[:, p:]
        if self.diff:
            out = y[ends - 1][:, None] + np.cumsum(out, axis=1)
        return out

    def to_dict(self):
        """The fitted parameters as plain values."""
        return {"name": self.name, "const": self.const, "lags": self.lags, "coefs": self.coefs,
                "diff": self.diff}


def needs_difference(y: np.ndarray, alpha: float = 0.05) -> bool:
    """An augmented Dickey-Fuller test (statsmodels ``adfuller``, constant, lag by AIC): True
    when it does not reject a unit root at ``alpha``."""
    from statsmodels.tsa.stattools import adfuller

    if len(y) < 12 or np.ptp(y) == 0:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(adfuller(y, regression="c", autolag="AIC")[1] > alpha)


class Drift(Base):
    """The last value plus the average step of the history: ``y_T + h (y_T - y_1) / (T - 1)``.
    Its state is the history's first value and the number of steps before the given series."""

    name = "drift"
    history = 2

    def state_before(self, y, t: int):
        """The first value of the series and the position ``t``."""
        return (float(y[0]), int(t))

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end."""
        ends = np.asarray(ends)
        first, before = (float(y[0]), 0) if state is None else state
        steps = np.maximum(ends - 1 + before, 1)
        slope = (y[ends - 1] - first) / steps
        return y[ends - 1][:, None] + slope[:, None] * np.arange(1, horizon + 1)[None, :]


class ARIMA(Base):
    """statsmodels ARIMA with fixed parameters; forecasts from any origin come from the Kalman
    filter's predicted state there, rolled forward by the transition matrix."""

    name = "arima"
    history = 1

    def __init__(self, order, seasonal_order, trend, params):
        self.order = tuple(int(x) for x in order)
        self.seasonal_order = tuple(int(x) for x in seasonal_order)
        self.trend = trend
        self.params = [float(x) for x in params]

    def _model(self, y):
        from statsmodels.tsa.arima.model import ARIMA as _ARIMA
        return _ARIMA(y, order=self.order, seasonal_order=self.seasonal_order, trend=self.trend)

    @classmethod
    def fit(cls, y: np.ndarray, season: int, spec=None) -> "ARIMA":
        """d by the ADF test (after a seasonal difference when the season is strong), then
        (p, q) by AIC in {(0,1), (1,0), (1,1), (2,0)}; seasonally differenced, the airline
        model's MA(1) x seasonal MA(1) (Box & Jenkins), one fit. ``spec`` = (p, d, q, D)
        skips the search."""
        order = spec
        from statsmodels.tsa.arima.model import ARIMA as _ARIMA

        m = season if season > 1 and len(y) >= 3 * season else 0
        if order is None:
            big_d = int(m > 0 and seasonal_strength(y, m) > 0.64)
            z = y[m:] - y[:-m] if big_d else y
            d = int(needs_difference(z))
            grid = [(0, 1)] if big_d else [(0, 1), (1, 0), (1, 1), (2, 0)]
        else:
            p0, d, q0, big_d = order
            grid = [(p0, q0)]
        seasonal = (0, big_d, 1 if big_d else 0, m) if big_d else (0, 0, 0, 0)
        trend = "c" if d + big_d == 0 else "n"
        best = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for p, q in grid:
                res = None
                # the innovations MLE is fast but needs a long differenced series for its
                # starting values (seasonal models on five years of months fail with "maximum
                # of maxlag should be < nobs"); the state-space MLE takes any length
                for method in ("innovations_mle", "statespace"):
                    try:
                        res = _ARIMA(y, order=(p, d, q), seasonal_order=seasonal,
                                     trend=trend).fit(method=method)
                        break
                    except (ValueError, np.linalg.LinAlgError):
                        continue
                if res is None:
                    continue
                if np.isfinite(res.aic) and (best is None or res.aic < best[0]):
                    best = (res.aic, (p, d, q), res.params)
        if best is None:
            raise ValueError("ARIMA could not be fitted on this series")
        return cls(best[1], seasonal, trend, np.asarray(best[2]))

    @property
    def spec(self) -> tuple[int, int, int, int]:
        """(p, d, q, D): what a refit at another origin keeps."""
        return (*self.order, self.seasonal_order[1])

    def _filtered(self, y, state):
        mod = self._model(y)
        if state is not None:
            mod.ssm.initialize_known(np.asarray(state[0]), np.asarray(state[1]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return mod, mod.filter(np.asarray(self.params))

    def state_before(self, y, t: int):
        """The filter's predicted state and its covariance at step ``t``."""
        if t == 0:
            return None
        _, res = self._filtered(y[:t + 1], None)
        fr = res.filter_results
        return (fr.predicted_state[:, t].tolist(), fr.predicted_state_cov[:, :, t].tolist())

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end, parameters fixed."""
        ends = np.asarray(ends)
        mod, res = self._filtered(y, state)
        z = np.asarray(mod.ssm["design"]).reshape(1, -1)
        tr = np.asarray(mod.ssm["transition"])
        tr = tr[:, :, 0] if tr.ndim == 3 else tr
        d = float(np.asarray(mod.ssm["obs_intercept"]).ravel()[0])
        c = np.asarray(mod.ssm["state_intercept"]).reshape(len(tr), -1)[:, 0]
        a = res.filter_results.predicted_state[:, ends]                       # (k, W)
        out = np.empty((len(ends), horizon))
        for h in range(horizon):
            out[:, h] = (z @ a)[0] + d
            a = tr @ a + c[:, None]
        return out

    def to_dict(self):
        """The fitted parameters as plain values."""
        return {"name": self.name, "order": list(self.order),
                "seasonal_order": list(self.seasonal_order), "trend": self.trend,
                "params": self.params}


def seasonal_strength(y: np.ndarray, m: int) -> float:
    """Strength of the season, ``max(0, 1 - Var(remainder) / Var(season + remainder))`` of an
    STL decomposition (statsmodels; Wang, Smith & Hyndman 2006)."""
    from statsmodels.tsa.seasonal import STL

    if m < 2 or len(y) < 2 * m + 1:
        return 0.0
    res = STL(y, period=m, robust=True).fit()
    var = np.var(res.seasonal + res.resid)
    return float(max(0.0, 1 - np.var(res.resid) / var)) if var > 0 else 0.0


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


class Combination(Base):
    """The median, step by step, of its component bases' forecasts."""

    name = "combination"

    def __init__(self, parts: list[Base]):
        self.parts = list(parts)
        self.history = max(p.history for p in self.parts)

    @classmethod
    def fit(cls, y, season, spec=None):
        """ETS, ARIMA and Theta, each fitted on ``y``."""
        return cls([fit_base(p, y, season) for p in COMBINED])

    @classmethod
    def from_dict(cls, d):
        """The components' saved parameters."""
        return cls([base_from_dict(p) for p in d["parts"]])

    def state_before(self, y, t: int):
        """Every component's state."""
        return [p.state_before(y, t) for p in self.parts]

    def forecasts(self, y, ends, horizon, state=None):
        """Forecasts of the next ``horizon`` steps from every window end."""
        states = state or [None] * len(self.parts)
        return np.median(np.stack([p.forecasts(y, ends, horizon, s)
                                   for p, s in zip(self.parts, states)]), axis=0)

    def to_dict(self):
        """The components' parameters."""
        return {"name": self.name, "parts": [p.to_dict() for p in self.parts]}


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
