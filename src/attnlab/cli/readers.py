"""Reading the command line's input files. Errors name the flag the file came from
(``--csv``, ``--edges``, ...): this is the only place that knows them."""

from __future__ import annotations

from pathlib import Path

LINE = "__line__"          # the file line of each row, kept by the series readers


def read_csv(path: str | Path, flag: str = "--csv", only_empty_missing: bool = False):
    """A non-empty DataFrame from the CSV given as ``flag``. ``only_empty_missing``: only an
    empty cell is missing (not pandas' "n/a", "NA", "null", ...: a series reader names such a
    value rather than take it for a gap), and the column ``LINE`` holds each row's file line."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{flag} {str(path)!r} does not exist; give a CSV file")
    kw = dict(keep_default_na=False, na_values=[""]) if only_empty_missing else {}
    try:
        df = pd.read_csv(path, **kw)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
        raise ValueError(f"{flag} {str(path)!r} is not a readable CSV ({err}); save it as "
                         "comma-separated UTF-8 with a header row") from None
    if df.empty:
        raise ValueError(f"{flag} {str(path)!r} has no data rows")
    if only_empty_missing:
        df[LINE] = df.index + 2                 # line 1 is the header
    return df


def require_column(df, name: str, flag: str, path) -> None:
    """Refuse a column name given as ``flag`` that ``df`` (read from ``path``) lacks."""
    if name not in df.columns:
        cols = ", ".join(map(str, df.columns[:20]))
        raise ValueError(f"{flag} {name!r} is not a column of {str(path)!r}; its columns are: "
                         f"{cols}")


SEASONS = {"h": 24, "D": 7, "W": 52, "M": 12, "Q": 4}     # period of the usual cycle


def series_from_csv(path, target: str, time: str | None = None, exog: list[str] | None = None):
    """``(y Series, X DataFrame or None)`` from ``--csv``; rows sorted by ``--time`` if given.

    Refused, each with the row that shows it: a ``--time`` column of numbers (they would parse
    as nanoseconds), dates that repeat, dates with missing steps (they would be taken as
    consecutive), values that are not numbers or too large for the model's float32, a
    constant series (every method is exact on it: nothing to compare)."""
    y, X, _, _ = series_with_future(path, target, time, exog, None)
    return y, X


def series_with_future(path, target: str, time: str | None = None,
                       exog: list[str] | None = None, future: list[str] | None = None):
    """``(y, X, F, F_ahead)`` from ``--csv``: the series, its past covariates (``--exog``), its
    known-future covariates (``--future``) over the observed rows, and their values on the rows
    after the last observation (the target left empty there: the steps to forecast). Without
    ``--future`` the last two are None, and rows with an empty target are refused as in
    :func:`series_from_csv`."""
    import numpy as np
    import pandas as pd

    df = read_csv(path, only_empty_missing=True)
    require_column(df, target, "--target", path)
    for c in exog or []:
        require_column(df, c, "--exog", path)
    for c in future or []:
        require_column(df, c, "--future", path)
    both = set(exog or []) & set(future or [])
    if both:
        raise ValueError(f"column(s) {sorted(both)} are given to both --exog and --future; a "
                         "covariate is either past-only (--exog) or known ahead (--future)")
    if time is not None:
        require_column(df, time, "--time", path)
        if pd.api.types.is_numeric_dtype(df[time]):
            raise ValueError(f"--time column {time!r} holds numbers (first {df[time].iloc[0]}), "
                             "not dates; give the date column, or leave --time out for rows in "
                             "file order")
        idx = _parse_dates(df[time], time)
        df = df.assign(**{time: idx}).sort_values(time).set_index(time)
        dup = df.index[df.index.duplicated()]
        if len(dup):
            raise ValueError(f"--time column {time!r} repeats {dup[0]:%Y-%m-%d %H:%M} "
                             f"({len(dup)} repeated dates); keep one row per time step")
        _check_spacing(df.index, time)
    y = _numeric_target(df, target, path)
    ahead = None
    if future:
        # the rows after the last observed value are the steps to forecast
        observed = np.flatnonzero(y.notna().to_numpy())
        last = int(observed[-1]) + 1 if len(observed) else 0
        ahead = df.iloc[last:]
        df, y = df.iloc[:last], y.iloc[:last]
        if ahead[future].isna().any().any():
            col = next(c for c in future if ahead[c].isna().any())
            raise ValueError(f"--future column {col!r} is empty on a row after the last "
                             f"value of {target!r}; the known-future values of the steps to "
                             "forecast must be given")
    if not future and y.isna().any():
        line = int(df[LINE][y.isna()].iloc[0])
        raise ValueError(f"--target column {target!r} is empty at line {line} of "
                         f"{str(path)!r}; fill the value (rows are taken as consecutive steps; "
                         "with --future, empty rows after the last value are the steps to "
                         "forecast)")
    big = y.abs() > 1e30
    if big.any():
        raise ValueError(f"--target column {target!r} has {y[big].iloc[0]:g} at line "
                         f"{int(df[LINE][big].iloc[0])} of {str(path)!r}: beyond what the "
                         "model computes in float32 (|y| <= 1e30); check the value or "
                         "rescale")
    if y.nunique(dropna=True) == 1:
        raise ValueError(f"--target column {target!r} is constant ({y.dropna().iloc[0]:g}): "
                         "every method forecasts it exactly, there is nothing to compare")
    X = _numeric(df[exog], "--exog", df[LINE], path) if exog else None
    if not future:
        return y, X, None, None
    F = _numeric(df[future], "--future", df[LINE], path)
    return y, X, F, _numeric(ahead[future], "--future", ahead[LINE], path)


def _numeric_target(df, target: str, path=None):
    """``--target`` as numbers (empty cells stay NaN); a cell that is not a number is named
    with its file line."""
    import pandas as pd

    y = pd.to_numeric(df[target], errors="coerce")
    bad = y.isna() & df[target].notna()
    if bad.any():
        raise ValueError(f"--target column {target!r} has a value that is not a number, "
                         f"{df[target][bad].iloc[0]!r}{_where(df, bad, path)}; write numbers "
                         "only")
    return y


def _where(df, mask, path) -> str:
    """`` at line N of 'file'`` of the first row of ``mask``, where the lines are known."""
    if LINE not in df.columns or path is None:
        return ""
    return f" at line {int(df[LINE][mask].iloc[0])} of {str(path)!r}"


def _numeric(frame, flag: str, lines=None, path=None):
    """The columns as floats; a value that is not a number, or a missing one, is named with
    its column and file line."""
    import pandas as pd

    out = frame.apply(pd.to_numeric, errors="coerce")
    for col in frame.columns:
        bad = out[col].isna()
        if not bad.any():
            continue
        value = frame[col][bad].iloc[0]
        where = "" if lines is None else f" at line {int(lines[bad].iloc[0])} of {str(path)!r}"
        if pd.isna(value):
            raise ValueError(f"{flag} column {col!r} is empty{where}; fill the value")
        raise ValueError(f"{flag} column {col!r} has a value that is not a number, "
                         f"{value!r}{where}; write numbers only")
    return out.astype(float)


def _parse_dates(col, time: str):
    """The column as dates. ``01/02/2020`` is read month first (pandas' default) or day first,
    whichever gives unique, evenly spaced dates; when both do, the file is ambiguous and is
    refused rather than guessed."""
    import warnings

    import pandas as pd

    text = col.astype(str).str.strip()
    if text.str.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}([ T].*)?").all():    # ISO: year first,
        try:                                                         # never day first
            idx = pd.DatetimeIndex(pd.to_datetime(text, format="ISO8601"))
        except (ValueError, TypeError) as err:
            raise ValueError(f"--time column {time!r} does not parse as YYYY-MM-DD dates: "
                             f"{str(err).split('. ')[0]}") from None
        if idx.sort_values().is_unique:
            _check_spacing(idx.sort_values(), time)
        return idx
    readings, errors = {}, {}
    for dayfirst in (False, True):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idx = pd.DatetimeIndex(pd.to_datetime(col, dayfirst=dayfirst))
        except (ValueError, TypeError) as err:
            errors[dayfirst] = str(err).split(". ")[0]
            continue
        ordered = idx.sort_values()
        try:
            if ordered.is_unique:
                _check_spacing(ordered, time)
                readings[dayfirst] = idx
        except ValueError:
            pass
        readings.setdefault(dayfirst, None)
    good = {k: v for k, v in readings.items() if v is not None}
    if len(good) == 2 and not good[False].equals(good[True]):
        raise ValueError(f"--time column {time!r} reads as evenly spaced dates both month first "
                         f"and day first (first value {col.iloc[0]!r}); write the dates as "
                         "YYYY-MM-DD")
    if good:
        return next(iter(good.values()))
    if readings:           # dates, but unevenly spaced either way: the spacing check says where
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pd.DatetimeIndex(pd.to_datetime(col, dayfirst=False not in readings))
    raise ValueError(f"--time column {time!r} does not parse as dates, month first or day "
                     f"first (first value {col.iloc[0]!r}: {errors.get(False, '')}); write the "
                     "dates as YYYY-MM-DD")


def _spacing(index) -> tuple[str | None, list[int]]:
    """The coarsest calendar unit (hours, days, weeks, months, quarters, years) that keeps
    every row in its own period, and the steps between rows in that unit."""
    unit, steps = None, []
    for freq in ("h", "D", "W", "M", "Q", "Y"):
        per = index.to_period(freq)
        if not per.is_unique:
            break
        unit, steps = freq, [int(d.n) for d in per[1:] - per[:-1]]
    return unit, steps


def _check_spacing(index, time: str) -> None:
    """Evenly spaced in that unit, or an error naming the first gap."""
    if len(index) < 3:
        return
    unit, steps = _spacing(index)
    if unit is None or len(set(steps)) == 1:
        return
    usual = max(set(steps), key=steps.count)
    gap = next(i for i, k in enumerate(steps) if k != usual)
    raise ValueError(f"--time column {time!r} is not evenly spaced: after {index[gap]:%Y-%m-%d} "
                     f"comes {index[gap + 1]:%Y-%m-%d} ({steps[gap]} {unit} steps where the "
                     f"others are {usual}); fill the missing rows (the model takes rows as "
                     "consecutive steps)")


def season_of(index) -> int | None:
    """The usual season of an hourly / daily / weekly / monthly / quarterly index whose rows
    are one unit apart, or None."""
    import pandas as pd

    if not isinstance(index, pd.DatetimeIndex) or len(index) < 3:
        return None
    unit, steps = _spacing(index)
    return SEASONS.get(unit) if steps and set(steps) == {1} else None


def panel_from_csv(path, target: str, time: str | None, id_column: str):
    """A long frame ``unique_id, ds, y`` from ``--csv`` with one row per series and step
    (``--id`` names the series, ``--time`` the dates; rows in file order without it).
    Refused: a missing column, a value that is not a number, a date repeated within a
    series."""
    import pandas as pd

    df = read_csv(path, only_empty_missing=True)
    for col, flag in ((target, "--target"), (id_column, "--id")) + (
            ((time, "--time"),) if time else ()):
        require_column(df, col, flag, path)
    y = _numeric_target(df, target, path)
    if y.isna().any():
        raise ValueError(f"--target column {target!r} is empty{_where(df, y.isna(), path)}; "
                         "fill the value")
    if time:
        ds = _parse_dates(df[time], time)
    else:
        ds = df.groupby(id_column, sort=False).cumcount()
    long = pd.DataFrame({"unique_id": df[id_column].astype(str), "ds": ds, "y": y})
    dup = long.duplicated(["unique_id", "ds"])
    if dup.any():
        r = long[dup].iloc[0]
        raise ValueError(f"series {r['unique_id']!r} of {str(path)!r} repeats the time "
                         f"{r['ds']}; keep one row per series and step")
    if time:
        for uid, part in long.groupby("unique_id", sort=False):
            try:
                _check_spacing(pd.DatetimeIndex(part["ds"].sort_values()), time)
            except ValueError as err:
                raise ValueError(f"series {uid!r}: {err}") from None
    return long


MAX_CATEGORIES = 255          # scikit-learn's HistGradientBoosting takes at most 255 levels


def table_from_csv(path, target: str, task: str = "auto", folds: int = 5,
                   drop: list[str] | None = None):
    """``(X DataFrame, y Series)`` from ``--csv`` for ``fit tabular``, ``drop`` columns left
    out, checked before any cross-validation: an empty target cell, no feature column, an
    empty feature cell (the baselines cannot take it), a numeric column with a few stray
    strings (it would become a categorical of hundreds of levels), a text column with a
    different value on every row (an identifier) or more levels than the gradient-boosting
    baseline takes, one class only, a string target for regression, a class with fewer rows
    than ``--folds``."""
    import pandas as pd

    df = read_csv(path)
    require_column(df, target, "--target", path)
    for c in drop or []:
        require_column(df, c, "--drop", path)
        if c == target:
            raise ValueError(f"--drop {c!r} is the --target column; drop other columns")
    df = df.drop(columns=list(drop or []))
    if df[target].isna().any():
        row = int(df[target].isna().to_numpy().argmax()) + 2
        raise ValueError(f"--target column {target!r} is empty at line {row} of "
                         f"{str(path)!r} (and {int(df[target].isna().sum()) - 1} more); drop "
                         "those rows")
    X, y = df.drop(columns=[target]), df[target]
    if X.shape[1] == 0:
        raise ValueError(f"{str(path)!r} has no column besides --target {target!r}: nothing "
                         "to predict from")
    for c in X.columns:
        col = X[c]
        if col.isna().any():
            row = int(col.isna().to_numpy().argmax()) + 2
            raise ValueError(f"column {c!r} of {str(path)!r} is empty at line {row} "
                             f"({int(col.isna().sum())} empty cells); fill or drop them first "
                             "(the baselines take no missing values)")
        if col.dtype == object or pd.api.types.is_string_dtype(col):
            num = pd.to_numeric(col, errors="coerce")
            stray = num.isna()
            if 0 < stray.sum() <= max(1, 0.05 * len(col)):
                row = int(stray.to_numpy().argmax()) + 2
                raise ValueError(f"column {c!r} of {str(path)!r} is numeric except "
                                 f"{col[stray].iloc[0]!r} at line {row} ({int(stray.sum())} such "
                                 "cells); fix them, or it would be read as a category")
            levels = col.nunique()
            if levels == len(col) and len(col) > 20:
                raise ValueError(f"column {c!r} of {str(path)!r} has a different value on "
                                 f"every row ({levels} of {len(col)}, e.g. {col.iloc[0]!r}): "
                                 f"an identifier, which no model learns from; pass --drop {c} "
                                 "(predict's --id carries it into the predictions)")
            if levels > MAX_CATEGORIES:
                raise ValueError(f"column {c!r} of {str(path)!r} has {levels} distinct text "
                                 f"values; the gradient-boosting baseline takes at most "
                                 f"{MAX_CATEGORIES} categories: pass --drop {c}, or group "
                                 "its values first")
    from attnlab.models.tabular import infer_task

    kind = infer_task(y) if task == "auto" else task
    if kind == "regression" and not pd.api.types.is_numeric_dtype(y):
        raise ValueError(f"--task regression needs a numeric --target; {target!r} holds text "
                         f"such as {y.iloc[0]!r} (use --task classification)")
    if kind == "classification":
        counts = y.value_counts()
        if len(counts) < 2:
            raise ValueError(f"--target column {target!r} has one class only ({counts.index[0]!r});"
                             " a classifier needs at least two")
        if counts.min() < folds:
            raise ValueError(f"class {counts.idxmin()!r} of --target {target!r} has "
                             f"{int(counts.min())} rows, fewer than --folds {folds}; use "
                             f"--folds {max(2, int(counts.min()))} or more rows of that class")
    return X, y


def graph_from_csv(edges, features=None, labels=None):
    """A :class:`~attnlab.models.graph.data.Graph` from ``--edges``, ``--features`` and
    ``--labels``; a problem inside one of them is reported with its flag and file."""
    from attnlab.models.graph.data import GraphInputError, from_frames

    files = {"edges": edges, "features": features, "labels": labels}
    frames = {name: read_csv(path, f"--{name}") if path is not None else None
              for name, path in files.items()}
    try:
        return from_frames(frames["edges"], frames["features"], frames["labels"])
    except GraphInputError as err:
        raise ValueError(f"--{err.source} {str(files[err.source])!r}: {err}") from None
