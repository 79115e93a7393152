"""Many series as the global forecaster takes and gives them: a list, a dict or a long
``unique_id, ds, y`` frame turned into ids, value arrays and dates (:func:`as_panel`), each
series' scale, and the dates of the steps after a series."""

from __future__ import annotations

import numpy as np

from attnlab.models.forecast.baselines import seasonal_scale
from attnlab.models.forecast.inputs import as_series


def as_panel(Y, name: str = "Y") -> tuple[list, list[np.ndarray], list]:
    """``(ids, series, dates)`` from a list of series, a dict ``{id: series}`` or a long data
    frame ``unique_id, ds, y`` (rows sorted by ``ds`` within each id). ``dates[i]`` is the
    series' date index (pandas) or None."""
    import pandas as pd

    if isinstance(Y, pd.DataFrame):
        missing = [c for c in ("unique_id", "ds", "y") if c not in Y.columns]
        if missing:
            raise ValueError(f"{name} as a data frame needs the columns unique_id, ds and y "
                             f"(the long format); it lacks {missing}. Rename its columns, or "
                             "pass a list or dict of series")
        ids, series, dates = [], [], []
        if not pd.api.types.is_datetime64_any_dtype(Y["ds"]) and not \
                pd.api.types.is_numeric_dtype(Y["ds"]):
            try:                                     # dates written as text, e.g. from a CSV
                Y = Y.assign(ds=pd.to_datetime(Y["ds"]))
            except (ValueError, TypeError):
                raise ValueError(f"{name}: column ds holds text that is not dates (first "
                                 f"{Y['ds'].iloc[0]!r}); give dates, or step numbers") from None
        for uid, part in Y.groupby("unique_id", sort=False, observed=True):
            part = part.sort_values("ds")
            if part["ds"].duplicated().any():
                dup = part["ds"][part["ds"].duplicated()].iloc[0]
                raise ValueError(f"{name}: series {uid!r} repeats ds = {dup!r}; keep one row per "
                                 "time step")
            ids.append(uid)
            series.append(_values(part["y"], f"{name} series {uid!r}"))
            ds = part["ds"]
            dates.append(pd.DatetimeIndex(ds) if pd.api.types.is_datetime64_any_dtype(ds)
                         else None)
        return ids, series, dates
    if isinstance(Y, dict):
        ids = list(Y)
        return ids, [_values(Y[k], f"{name}[{k!r}]") for k in ids], [
            _index(Y[k]) for k in ids]
    if isinstance(Y, (list, tuple)):
        if not Y:
            raise ValueError(f"{name} is empty: give at least one series")
        if np.isscalar(Y[0]):
            raise ValueError(f"{name} is one series of numbers; GlobalForecaster takes many: "
                             "a list of series, a dict, or a long data frame (for one series, "
                             "AttentionForecaster)")
        return list(range(len(Y))), [_values(y, f"{name}[{i}]") for i, y in enumerate(Y)], [
            _index(y) for y in Y]
    raise ValueError(f"{name} must be a list of series, a dict of series or a long data frame "
                     f"(unique_id, ds, y); got {type(Y).__name__}")


def _index(y):
    import pandas as pd

    index = getattr(y, "index", None)
    return index if isinstance(index, pd.DatetimeIndex) else None


def _values(y, what: str) -> np.ndarray:
    arr = as_series(y, what)
    if len(arr) < 2:
        raise ValueError(f"{what} has {len(arr)} observation(s); a forecast needs at least 2")
    return arr


def series_scale(y: np.ndarray, season: int) -> float:
    """MASE's denominator for ``y`` (:func:`~attnlab.models.forecast.baselines.seasonal_scale`),
    or the mean absolute level for a constant series, or 1."""
    return seasonal_scale(y, season) or (float(np.abs(y).mean()) or 1.0)


def plain_dates(index):
    """A date index as ISO strings with its frequency, for config.json (None without one)."""
    if index is None:
        return None
    return {"dates": [d.isoformat() for d in index], "freq": index.freqstr}


def restore_dates(d):
    """The date index that :func:`plain_dates` stored (None stays None)."""
    import pandas as pd

    if d is None:
        return None
    return pd.DatetimeIndex(pd.to_datetime(d["dates"]), freq=d["freq"])


def future_dates(index, n: int, h: int):
    """The dates of the ``h`` steps after a date index, else the steps ``n .. n + h - 1``."""
    import warnings

    import pandas as pd

    if index is not None and len(index) >= 3:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            freq = index.freq or pd.infer_freq(index)
        if freq is not None:
            return list(pd.date_range(index[-1], periods=h + 1, freq=freq)[1:])
    return list(range(n, n + h))
