"""The ``predict`` job: forecasts of a saved forecaster (one series or a panel) into a CSV,
with the fit's own columns and dates."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from attnlab._files import write_text_atomic
from attnlab.cli.jobs.folder import Say, quiet
from attnlab.cli.jobs.series import future_index
from attnlab.cli.readers import read_csv, series_with_future


def predict_saved(model_dir, out_csv, *, csv=None, target: str | None = None,
                  time: str | None = None, horizon: int | None = None,
                  exog: list[str] | None = None, future: list[str] | None = None,
                  id_column: str | None = None, warn: Say = quiet) -> tuple[Path, int]:
    """Predictions of a saved model into ``out_csv``; returns the path and the row count.

    A forecast carries the dates of its steps where they are known (from ``--time`` of
    ``--csv``, else from the ``metrics.json`` the fit wrote beside the model); a horizon
    beyond the fitted one is forecast recursively and said so, and one over 100 times the
    fitted one is refused. Tabular predictions carry the input's row number and, with
    ``id_column``, that column."""
    import pandas as pd

    from attnlab.models import load
    from attnlab.models.forecast import AttentionForecaster, GlobalForecaster

    model = load(model_dir)
    if isinstance(model, GlobalForecaster):
        return _predict_panel(model, Path(model_dir), out_csv, csv, target, time, horizon,
                              exog or future, id_column)
    if isinstance(model, AttentionForecaster):
        h = model.horizon if horizon is None else horizon
        if h > 100 * model.horizon:
            raise ValueError(f"--horizon {h} is over 100 times the {model.horizon} steps the "
                             "model was fitted for: each step beyond feeds back the forecast "
                             f"before it; use --horizon {100 * model.horizon} or less, or fit "
                             "a model with a longer horizon")
        if h > model.horizon:
            warn(f"steps {model.horizon + 1}-{h} are forecast recursively from a model fitted "
                 f"for {model.horizon}: their errors compound, read them as extrapolation")
        index = None
        n_future = getattr(model, "n_future_", 0)
        if n_future and not future:
            raise ValueError(f"the model was fitted with {n_future} known-future column(s): give "
                             "--csv with the history and the rows to forecast, and --future "
                             "naming the columns")
        if future and not n_future:
            raise ValueError("--future given, but the model was fitted without known-future "
                             "columns; fit it with --future")
        if future and len(future) != n_future:
            raise ValueError(f"--future names {len(future)} column(s); the model was fitted "
                             f"with {n_future}")
        if future and h > model.horizon:
            raise ValueError(f"--horizon {h} is beyond the fitted {model.horizon}: a model with "
                             "known-future columns forecasts its fitted horizon only")
        if csv is not None:
            if target is None:
                raise ValueError("--target is needed with --csv for a forecaster (the series "
                                 "to continue)")
            y, X, _, ahead = series_with_future(csv, target, time, exog, future)
            x_future = None
            if future:
                if len(ahead) < model.horizon:
                    raise ValueError(f"--future needs the values of the {model.horizon} steps "
                                     f"to forecast; {str(csv)!r} has {len(ahead)} row(s) after "
                                     f"the last value of {target!r}")
                x_future = ahead.to_numpy()[:model.horizon]
            if time is None and model.effective_season > 1:
                warn(f"--csv without --time: its first row is taken to be where the fitted "
                     f"series started in its season of {model.effective_season}, and the "
                     "forecast has no dates; pass --time so both come from the dates")
            # a dated history is placed on the fitted calendar by its dates (season phase)
            pred = model.predict(horizon, y=y if time is not None else y.to_numpy(),
                                 X=None if X is None else X.to_numpy(), X_future=x_future)
            index = y.index if time is not None else None
            dates = future_index(index, len(pred)) if index is not None else None
        else:
            if exog:
                raise ValueError("--exog reads the covariates of --csv: give --csv with the "
                                 "series and its covariates")
            pred = model.predict(horizon)
            dates = _dates_from_fit(Path(model_dir), len(pred))
        names = _fit_columns(Path(model_dir)) if csv is None else {"time": time,
                                                                     "value": target}
        frame = pd.DataFrame({"step": range(1, len(pred) + 1),
                              names.get("time") or "time": dates or [""] * len(pred),
                              names.get("value") or "forecast": pred})
        for level, (lo, hi) in sorted(model.interval_bounds(pred).items()):
            frame[f"lower_{level:.0%}".rstrip("%")] = lo
            frame[f"upper_{level:.0%}".rstrip("%")] = hi
        for note in model.interval_notes(len(pred)):
            warn(note)
    else:
        if csv is None:
            raise ValueError("--csv is needed: the rows to predict for a tabular model")
        df = read_csv(csv)
        ids = None
        if id_column is not None:
            if id_column not in df.columns:
                raise ValueError(f"--id {id_column!r} is not a column of {str(csv)!r}")
            ids = df[id_column]
            df = df.drop(columns=[id_column])
        X = df.drop(columns=[target]) if target and target in df.columns else df
        known = [str(c) for c in getattr(model, "feature_names_in_", [])]
        extra = [str(c) for c in X.columns if str(c) not in known] if known else []
        if extra:           # an id column, the training file's target: said, then left out
            warn(f"column(s) {extra} of {str(csv)!r} are not model features and are not used "
                 f"(the model reads {known}); --id copies a column into the output")
            X = X.drop(columns=[c for c in X.columns if str(c) in extra])
        frame = pd.DataFrame({"row": range(1, len(X) + 1)})
        if ids is not None:
            frame[id_column] = ids.to_numpy()
        frame["prediction"] = model.predict(X)
        if hasattr(model, "predict_proba"):
            proba = model.predict_proba(X)
            for j, c in enumerate(model.classes_):
                frame[f"p({c})"] = proba[:, j]
    path = write_text_atomic(out_csv, frame.to_csv(index=False))
    return path, len(frame)


def _predict_panel(model, model_dir: Path, out_csv, csv, target, time, horizon, covariates,
                   id_column) -> tuple[Path, int]:
    """A global forecaster's forecasts: of the series it was fitted on, or (``csv``, with
    ``target``, ``id_column`` and optionally ``time``) of new data, the network as fitted and
    each series' base refitted on its new values. Columns are named as in the fit's input."""
    from attnlab.cli.readers import panel_from_csv

    if covariates:
        raise ValueError("--exog and --future are for one series; a global forecaster reads "
                         "each series' own values only")
    if horizon is not None and horizon > model.horizon:
        raise ValueError(f"--horizon {horizon} is beyond the {model.horizon} steps the global "
                         f"forecaster was fitted for; use --horizon {model.horizon} or less, or "
                         f"refit with `attnlab fit forecast --id ... --horizon {horizon}`")
    names = _fit_columns(model_dir)
    if csv is not None:
        if target is None or id_column is None:
            raise ValueError("--csv for a global forecaster needs --target COL and --id COL "
                             "(a long file: one row per series and step)")
        frame = model.predict(horizon, Y=panel_from_csv(csv, target, time, id_column))
        names = {"id": id_column, "time": time, "value": target}
    elif id_column is not None or target is not None:
        raise ValueError("--id and --target name columns of --csv; give --csv with the new "
                         "values, or --model alone for the fitted series' forecasts")
    else:
        frame = model.predict(horizon)
    frame["ds"] = [v.strftime("%Y-%m-%d") if hasattr(v, "strftime") else v
                   for v in frame["ds"]]
    frame = frame.rename(columns={"unique_id": names.get("id") or "unique_id",
                                  "ds": names.get("time") or "ds",
                                  "forecast": names.get("value") or "forecast"})
    return write_text_atomic(out_csv, frame.to_csv(index=False)), len(frame)


def _fit_columns(model_dir: Path) -> dict:
    """The input's column names the fit wrote into ``metrics.json`` beside the model folder
    (``{"id", "time", "value"}``), or ``{}``."""
    try:
        names = json.loads((model_dir.parent / "metrics.json").read_text()).get("columns")
    except (OSError, ValueError, AttributeError):
        return {}
    return names if isinstance(names, dict) else {}


def _dates_from_fit(model_dir: Path, steps: int) -> list[str] | None:
    """The dates of ``steps`` forecast steps from the fit's ``metrics.json`` (beside the model
    folder), whose ``forecast.time`` holds the dates of the fitted horizon."""
    import pandas as pd

    try:
        times = json.loads((model_dir.parent / "metrics.json").read_text())["forecast"]["time"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not times:
        return None
    if len(times) >= steps:
        return times[:steps]
    if len(times) < 3:
        return None
    idx = pd.DatetimeIndex(pd.to_datetime(times))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        freq = pd.infer_freq(idx)
    if freq is None:
        return None
    more = pd.date_range(idx[-1], periods=steps - len(times) + 1, freq=freq)[1:]
    return times + [d.strftime("%Y-%m-%d") for d in more]
