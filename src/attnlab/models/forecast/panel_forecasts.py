"""Forecasts of a fitted :class:`~attnlab.models.forecast.GlobalForecaster`: every series'
base plus the network's correction weighted by ``w``, with conformal intervals, as arrays or as
a long data frame; the same from new data with no training (:meth:`with_history`)."""

from __future__ import annotations

import copy

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from attnlab.models.forecast.panel import as_panel, future_dates, series_scale


class PanelForecasts:
    """The forecasting half of :class:`~attnlab.models.forecast.GlobalForecaster` (a mixin:
    the fitted attributes, ``_windows`` and ``_fit_bases`` are the estimator's)."""

    @torch.no_grad()
    def forecast_arrays(self) -> tuple[np.ndarray, dict[float, tuple[np.ndarray, np.ndarray]]]:
        """``(forecasts (S, H), {level: (lower, upper)})`` for every fitted series, in the
        order of ``ids_``."""
        check_is_fitted(self, "net_")
        H = self.horizon
        out = np.empty((len(self.series_), H))
        for i, y in enumerate(self.series_):
            out[i] = self.bases_[i].forecasts(y, np.array([len(y)]), H)[0]
        members = np.flatnonzero(self.in_network_)
        if len(members) and self.network_in_use_:
            self.net_.eval()
            for chunk in np.array_split(members, max(1, len(members) // 2048 + 1)):
                xs, fs = zip(*[self._windows(i, np.array([len(self.series_[i])]))[:2]
                               for i in chunk])
                x = torch.tensor(np.concatenate(xs), dtype=torch.float32, device=self.device_)
                f = torch.tensor(np.concatenate(fs), dtype=torch.float32, device=self.device_)
                corr = self.net_(x, f)[0].double().cpu().numpy()
                out[chunk] += corr * self.scales_[chunk, None]
        bounds = {}
        for key, widths in self.interval_widths_.items():
            half = np.asarray(widths)[None, :] * self.scales_[:, None]
            bounds[float(key)] = (out - half, out + half)
        return out, bounds

    @torch.no_grad()
    def attention_weights(self) -> np.ndarray:
        """``(S, L)``: the network's weights over each series' last ``L`` observations at its
        forecast origin (column j is lag ``L - j``); NaN rows for series left to their base."""
        check_is_fitted(self, "net_")
        out = np.full((len(self.series_), self.effective_lookback), np.nan)
        members = np.flatnonzero(self.in_network_)
        if len(members):
            self.net_.eval()
            xs, fs = zip(*[self._windows(i, np.array([len(self.series_[i])]))[:2]
                           for i in members])
            x = torch.tensor(np.concatenate(xs), dtype=torch.float32, device=self.device_)
            f = torch.tensor(np.concatenate(fs), dtype=torch.float32, device=self.device_)
            out[members] = self.net_(x, f)[1].double().cpu().numpy()
        return out

    def with_history(self, Y):
        """The fitted forecaster on new data: ``Y`` (as :meth:`fit` takes it: the fitted
        series with more values, or other series) gets its own bases fitted, while the
        network, ``w`` and the interval widths stay as fitted; nothing is trained. Returns a
        copy; ``self`` is unchanged."""
        check_is_fitted(self, "net_")
        new = copy.copy(self)
        new.ids_, new.series_, new.dates_ = as_panel(Y)
        new.notes_ = new._fit_bases()
        m = new.effective_season
        new.scales_ = np.array([series_scale(y, m) for y in new.series_])
        new.in_network_ = np.array([len(y) >= new.min_length for y in new.series_], dtype=bool)
        return new

    def predict(self, h: int | None = None, Y=None):
        """Every series' forecast as a long data frame: ``unique_id``, ``ds``, ``forecast``,
        ``lower_80``, ``upper_80``, ``lower_95``, ``upper_95``. ``h`` (at most the fitted
        horizon) keeps the first ``h`` steps. ``Y``: forecast from new data without training
        (:meth:`with_history`) instead of from the fitted series."""
        import pandas as pd

        check_is_fitted(self, "net_")
        if Y is not None:
            return self.with_history(Y).predict(h)
        h = self.horizon if h is None else h
        if not isinstance(h, (int, np.integer)) or not 1 <= h <= self.horizon:
            raise ValueError(f"h must be an int in 1..{self.horizon} (the fitted horizon), got "
                             f"{h!r}; fit with a longer horizon for more")
        fc, bounds = self.forecast_arrays()
        rows = []
        for i, uid in enumerate(self.ids_):
            ds = future_dates(self.dates_[i], len(self.series_[i]), h)
            frame = {"unique_id": [uid] * h, "ds": ds, "forecast": fc[i, :h]}
            for q, (lo, hi) in sorted(bounds.items()):
                frame[f"lower_{round(q * 100)}"] = lo[i, :h]
                frame[f"upper_{round(q * 100)}"] = hi[i, :h]
            rows.append(pd.DataFrame(frame))
        return pd.concat(rows, ignore_index=True)
