"""The forecaster's input: one series, its covariates and its calendar, checked with one
message per problem (the argument, what was expected, what came, the fix)."""

from __future__ import annotations

import numpy as np


def as_series(y, name: str = "y") -> np.ndarray:
    """``y`` as one 1-D float series (a one-column table is taken as its column); values
    that are not numbers, a second column, and a missing or infinite value are refused."""
    try:
        arr = np.asarray(y, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numbers, got {type(y).__name__} that is not ({err})"
                         ) from None
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one series (1-D), got shape {arr.shape}; pass one "
                         "column, other columns go in X")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name} has {bad.size} missing or infinite value(s), first at "
                         f"position {bad[0]}; fill them (e.g. pandas .interpolate()) or drop "
                         "them first")
    return arr


def calendar_of(y) -> dict | None:
    """``{"start", "freq"}`` of a pandas series on a regular date index (the first date and the
    step), else None: what places a later history in the fitted series' season."""
    import pandas as pd

    index = getattr(y, "index", None)
    if not isinstance(index, pd.DatetimeIndex) or len(index) < 3:
        return None
    freq = index.freqstr
    if freq is None:
        import warnings

        with warnings.catch_warnings():      # pandas 3 warns that infer_freq returns an offset
            warnings.simplefilter("ignore")
            freq = pd.infer_freq(index)
    return None if freq is None else {"start": index[0].isoformat(), "freq": str(freq)}


def steps_between(calendar: dict, date) -> int:
    """Whole steps of ``calendar["freq"]`` from ``calendar["start"]`` to ``date`` (negative
    before it); a date off the calendar's grid is refused."""
    import pandas as pd

    a, b = pd.Timestamp(calendar["start"]), pd.Timestamp(date)
    lo, hi = min(a, b), max(a, b)
    grid = pd.date_range(lo, hi, freq=calendar["freq"])
    if len(grid) == 0 or grid[-1] != hi or grid[0] != lo:
        raise ValueError(f"y starts on {b:%Y-%m-%d %H:%M}, which is not a step of the fitted "
                         f"series' calendar (every {calendar['freq']} from "
                         f"{a:%Y-%m-%d %H:%M}); give a history on the same calendar")
    n = len(grid) - 1
    return n if b >= a else -n


def plain(value):
    """A base's filter state as JSON values (tuples and arrays to lists)."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def future_rows(X_future, horizon: int) -> np.ndarray:
    """Known-future values for a forecast: one row per fitted horizon step."""
    arr = np.asarray(X_future, dtype=float)
    arr = arr[:, None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or arr.shape[0] != horizon:
        raise ValueError(f"X_future must have one row per forecast step ({horizon} rows: the "
                         f"fitted horizon), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("X_future has missing or infinite values; known-future columns must "
                         "be known")
    return arr


def as_exog(X, n: int, name: str = "X") -> np.ndarray | None:
    """Covariates ``X`` as a float matrix with one row per observation (``n``), or None;
    a wrong row count and a missing or infinite value are refused."""
    if X is None:
        return None
    try:
        arr = np.asarray(X, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric columns ({err})") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ValueError(f"{name} must have one row per observation of y ({n}), got shape "
                         f"{arr.shape}")
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name} has missing or infinite values, first at row {bad[0][0]}, "
                         f"column {bad[0][1]}; fill or drop them first")
    return arr
