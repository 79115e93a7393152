"""Split-conformal intervals from held-out errors (Vovk et al. 2005; Stankeviciute et al. 2021
for multi-step forecasts): the widths, and the single-series forecaster's bounds around a
forecast."""

from __future__ import annotations

import numpy as np
import torch


def conformal_widths(err: np.ndarray, horizon: int, levels) -> dict[str, list[float]]:
    """Split conformal half-widths from absolute errors ``(n, horizon)``: for level q the
    ceil((n + 1) q)-th smallest per step, infinite when n is too small for it."""
    n = len(err)
    srt = np.sort(err, axis=0)
    out = {}
    for q in levels:
        k = int(np.ceil((n + 1) * q - 1e-9))
        out[f"{q:g}"] = (srt[k - 1] if k <= n else np.full(horizon, np.inf)).tolist()
    return out


class ConformalIntervals:
    """The single-series forecaster's intervals: widths per level and step from the fitted
    model's absolute errors on its validation windows (``interval_widths_``), the bounds they
    give around a forecast, and why a level is unbounded."""

    @torch.no_grad()
    def _conformal_widths(self, val_data) -> dict[str, list[float]]:
        """Split conformal half-widths per horizon step (Vovk et al. 2005; Stankeviciute et
        al. 2021 for multi-step forecasts): for level q, the ceil((n + 1) q)-th smallest
        absolute error of the fitted model on the n validation windows, step by step. Fewer
        windows than a level needs give an infinite width (no finite bound is valid)."""
        if val_data is None:
            return {f"{q:g}": [float("inf")] * self.horizon for q in self.LEVELS}
        self.net_.eval()
        err = ((self.net_(*val_data[:-1])[0] - val_data[-1]).abs().double().cpu().numpy()
               * self.dscale_)                                               # (n, H)
        return conformal_widths(err, self.horizon, self.LEVELS)

    def interval_bounds(self, forecast) -> dict[float, tuple[np.ndarray, np.ndarray]]:
        """``{level: (lower, upper)}`` around a forecast this model made: the split-conformal
        half-width of each step (from the absolute errors of the fitted model on its held-out
        validation windows) on either side; steps beyond the fitted horizon (recursive
        forecasts) have no calibrated width and get an infinite one."""
        self._check_fitted()
        forecast = np.asarray(forecast, dtype=float)
        out = {}
        for key, known in self.interval_widths_.items():
            width = np.full(len(forecast), np.inf)
            known = np.asarray(known)[:len(forecast)]
            width[:len(known)] = known
            out[float(key)] = (forecast - width, forecast + width)
        return out

    def interval_notes(self, steps: int | None = None) -> list[str]:
        """One sentence per level whose interval is unbounded over the first ``steps``
        forecast steps (default: the fitted horizon), saying why: too few held-out windows to
        calibrate that level, or steps beyond the fitted horizon."""
        self._check_fitted()
        steps = self.horizon if steps is None else steps
        n = getattr(self, "n_calibration_", None)
        notes = []
        for key, known in self.interval_widths_.items():
            q = float(key)
            if not np.isfinite(np.asarray(known)).any():
                need = int(np.ceil(q / (1 - q) - 1e-9))
                held = f"{n} held-out window(s)" if n is not None else "too few held-out windows"
                notes.append(f"the {q:.0%} interval is unbounded (-inf, inf): split conformal "
                             f"calibration had {held}, and a {q:.0%} bound needs at least "
                             f"{need}; fit on a longer series, a shorter horizon or a larger "
                             "val_fraction (--val-fraction on the command line)")
        if steps > self.horizon:
            notes.append(f"steps {self.horizon + 1}-{steps} are beyond the fitted horizon: "
                         "their intervals are unbounded (-inf, inf), no held-out errors "
                         "calibrate them")
        return notes

    def predict_interval(self, horizon: int | None = None, y=None, X=None,
                         level: float = 0.95, X_future=None, *, start=None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(forecast, lower, upper)``: :meth:`predict` and its split-conformal interval at
        ``level`` (0.8 or 0.95); see :meth:`interval_bounds`."""
        self._check_fitted()
        if f"{level:g}" not in self.interval_widths_:
            raise ValueError(f"level must be one of {', '.join(self.interval_widths_)}, got "
                             f"{level!r}")
        pred = self.predict(horizon, y, X, X_future, start=start)
        return (pred, *self.interval_bounds(pred)[float(f"{level:g}")])
