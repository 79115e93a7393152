"""The autoregressive bases: AR (on differences when the levels are not stationary) and
ARIMA with seasonal differencing when the season is strong (statsmodels)."""

from __future__ import annotations

import warnings

import numpy as np

from attnlab.models.forecast.bases.core import Base


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
