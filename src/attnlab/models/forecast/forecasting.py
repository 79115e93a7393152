"""Forecasts of a fitted :class:`~attnlab.models.forecast.AttentionForecaster`: after the fitted
series or after a history given to ``predict`` (placed in the season by its dates or
``start``, the base refitted on it), direct for the fitted horizon and recursive beyond it."""

from __future__ import annotations

import numpy as np
import torch

from attnlab.models.forecast.bases import fit_base
from attnlab.models.forecast.inputs import as_exog, as_series, future_rows, steps_between

# bases with fitted parameters and states, refitted on a history given to predict
REFITTED = ("ets", "ar", "arima", "theta", "combination")


class ForecastFromHistory:
    """The forecasting half of :class:`~attnlab.models.forecast.AttentionForecaster` (a mixin:
    the estimator's fitted attributes, ``_reference``, ``_features`` and ``_future`` are its
    own)."""

    @torch.no_grad()
    def _forecast(self, y: np.ndarray, X: np.ndarray | None,
                  offset: int, state=None, base=None, future=None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """One direct forecast of ``horizon`` steps after the end of ``y`` (whose first value
        sits at position ``offset`` of the fitted series; ``state``: the base's state just
        before it), and the attention over the window."""
        ref = self._reference(y, np.array([len(y)]), state, base)[0]
        if getattr(self, "base_only_", False):
            return ref, np.full(self.effective_lookback, np.nan)
        self.net_.eval()
        feats = self._features(y, X, np.array([len(y)]), offset)
        x = torch.tensor(feats, dtype=torch.float32, device=self.device_)
        extra = [] if future is None else [torch.tensor(
            self._future(future, np.array([0])), dtype=torch.float32, device=self.device_)]
        out, w = self.net_(x, *extra)
        pred = ref + out[0].double().cpu().numpy() * self.dscale_
        return pred, w[0].double().cpu().numpy()

    def start_of(self, y, start=None) -> int:
        """Where the history ``y`` starts, in steps after the fitted series' first observation
        (its place in the season): ``start`` if given (steps, or a date when the model was
        fitted on a dated series), else from ``y``'s date index when both are dated, else 0 (a
        history that starts where the fitted one started)."""
        cal = getattr(self, "calendar_", None)
        if start is None:
            import pandas as pd

            index = getattr(y, "index", None)
            if cal is None or not isinstance(index, pd.DatetimeIndex) or not len(index):
                return 0
            start = index[0]
        if isinstance(start, (int, np.integer)) and not isinstance(start, bool):
            return int(start)
        if cal is None:
            raise ValueError(f"start={start!r} is a date, but the model was fitted on a series "
                             "without a regular date index; give start as a number of steps "
                             "after the fitted series' first observation")
        try:
            return steps_between(cal, start)
        except (TypeError, ValueError) as err:
            if "calendar" in str(err):
                raise
            raise ValueError(f"start must be a number of steps or a date, got {start!r}"
                             ) from None

    def predict(self, horizon: int | None = None, y=None, X=None, X_future=None, *,
                start=None) -> np.ndarray:
        """Forecast ``horizon`` steps (default: the fitted horizon) after the fitted series,
        or after the history ``y`` if given (with exogenous columns, ``X`` for it too). A
        history is placed in the season by its dates (a pandas series on a date index, when
        the model was fitted on one), by ``start`` (see :meth:`start_of`), or else taken to
        start where the fitted series started; the base is refitted on it.

        A horizon beyond the fitted one is forecast recursively (the forecasts are fed back);
        that needs a model without exogenous columns. ``attention_`` holds the weights over
        the window of the first step. A model fitted with known-future covariates needs
        ``X_future``: their values at the fitted horizon's steps after the history (``horizon``
        rows, one per fitted step).
        """
        self._check_fitted()
        horizon = self.horizon if horizon is None else horizon
        if not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be an int >= 1, got {horizon!r}")
        if y is None:
            if X is not None:
                raise ValueError("X given without y: pass the history y it belongs to")
            if start is not None:
                raise ValueError("start places a history y in the season; pass y with it")
            hist, xh, offset = self.y_tail_, self.x_tail_, self.n_obs_ - len(self.y_tail_)
            state, base = self.base_state_, None
        else:
            offset = self.start_of(y, start)
            hist = as_series(y)
            xh = as_exog(X, len(hist))
            state, base = None, None
            if len(hist) < self._history:
                raise ValueError(f"y has {len(hist)} observations; a forecast reads the last "
                                 f"{self._history} (lookback, and one season for the "
                                 "reference), give at least that many")
            if self.base_.name in REFITTED:
                # the base is refitted on the history, as a statistical model would be (its
                # level, trend and season phase are the history's); the network's correction
                # is kept
                spec = self.base_.spec if self.base_.name == "arima" else None
                try:
                    base = fit_base(self.base_.name, hist, self.effective_season, spec)
                except (ValueError, np.linalg.LinAlgError) as err:
                    raise ValueError(f"the {self.base_.name} base could not be refitted on "
                                     f"this history of {len(hist)} observations ({err}); "
                                     "give a longer history") from None
        if (xh is None) != (self.n_exog_ == 0) or (xh is not None and xh.shape[1] != self.n_exog_):
            raise ValueError(f"the model was fitted with {self.n_exog_} exogenous column(s); "
                             f"X must have as many, got "
                             f"{0 if xh is None else xh.shape[1]}")
        n_future = getattr(self, "n_future_", 0)
        fut = None if X_future is None else future_rows(X_future, self.horizon)
        if n_future and fut is None:
            raise ValueError(f"the model was fitted with {n_future} known-future column(s); "
                             f"pass X_future with their values at the next {self.horizon} "
                             "steps")
        if not n_future and fut is not None:
            raise ValueError("X_future given, but the model was fitted without known-future "
                             "columns; refit with fit(..., X_future=...)")
        if fut is not None and fut.shape[1] != n_future:
            raise ValueError(f"X_future must have {n_future} column(s), got {fut.shape[1]}")
        if horizon > self.horizon and n_future:
            raise ValueError(f"horizon {horizon} > fitted horizon {self.horizon} needs known-"
                             "future values beyond it; refit with a longer horizon")
        if horizon > self.horizon and self.n_exog_:
            raise ValueError(f"horizon {horizon} > fitted horizon {self.horizon} needs future "
                             "exogenous values; refit with a longer horizon")
        series, preds, first_w = hist, [], None
        while sum(len(p) for p in preds) < horizon:
            p, w = self._forecast(series, xh, offset, state, base, fut)
            first_w = w if first_w is None else first_w
            preds.append(p)
            series = np.concatenate([series, p])
        self.attention_ = first_w
        return np.concatenate(preds)[:horizon]
