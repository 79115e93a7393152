"""Reading the command line's input files. Errors name the flag the file came from
(``--csv``, ``--edges``, ...): this is the only place that knows them."""

from __future__ import annotations

from pathlib import Path


def read_csv(path: str | Path, flag: str = "--csv"):
    """A non-empty DataFrame from the CSV given as ``flag``."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{flag} {str(path)!r} does not exist; give a CSV file")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
        raise ValueError(f"{flag} {str(path)!r} is not a readable CSV ({err}); save it as "
                         "comma-separated UTF-8 with a header row") from None
    if df.empty:
        raise ValueError(f"{flag} {str(path)!r} has no data rows")
    return df


def require_column(df, name: str, flag: str, path) -> None:
    """Refuse a column name given as ``flag`` that ``df`` (read from ``path``) lacks."""
    if name not in df.columns:
        cols = ", ".join(map(str, df.columns[:20]))
        raise ValueError(f"{flag} {name!r} is not a column of {str(path)!r}; its columns are: "
                         f"{cols}")


def series_from_csv(path, target: str, time: str | None = None, exog: list[str] | None = None):
    """``(y Series, X DataFrame or None)`` from ``--csv``; rows sorted by ``--time`` if given."""
    import pandas as pd

    df = read_csv(path)
    require_column(df, target, "--target", path)
    for c in exog or []:
        require_column(df, c, "--exog", path)
    if time is not None:
        require_column(df, time, "--time", path)
        try:
            idx = pd.to_datetime(df[time])
        except (ValueError, TypeError) as err:
            raise ValueError(f"--time column {time!r} does not parse as dates ({err})") from None
        df = df.assign(**{time: idx}).sort_values(time).set_index(time)
    y = pd.to_numeric(df[target], errors="coerce")
    bad = y.isna() & df[target].notna()
    if bad.any():
        raise ValueError(f"--target column {target!r} has non-numeric values, first "
                         f"{df[target][bad].iloc[0]!r}; clean the column first")
    X = df[exog].astype(float) if exog else None
    return y, X


def graph_from_csv(edges, features=None, labels=None):
    """A :class:`~attnlab.models.graph_data.Graph` from ``--edges``, ``--features`` and
    ``--labels``; a problem inside one of them is reported with its flag and file."""
    from attnlab.models.graph_data import GraphInputError, from_frames

    files = {"edges": edges, "features": features, "labels": labels}
    frames = {name: read_csv(path, f"--{name}") if path is not None else None
              for name, path in files.items()}
    try:
        return from_frames(frames["edges"], frames["features"], frames["labels"])
    except GraphInputError as err:
        raise ValueError(f"--{err.source} {str(files[err.source])!r}: {err}") from None
