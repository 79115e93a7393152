"""The forecasting jobs: ``fit forecast`` (one series, or many with ``--id``) and
``predict`` from a saved forecaster."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from attnlab._files import write_text_atomic
from attnlab.cli.jobs.folder import CLI_BASELINES, Say, check_out, quiet, result_folder
from attnlab.cli.jobs.paper import (
    paper_folder,
)
from attnlab.cli.readers import read_csv, series_with_future

DEFAULT_ORIGINS = 10


def default_origins(model, n: int, say: Say = quiet) -> int:
    """The backtest's origins when none are asked for: 10, or as many as a series of ``n``
    observations holds (said), with the network fitted before the first where it can be."""
    from attnlab.models.forecast.backtest import base_history, most_origins

    H = model.horizon
    before = base_history(model.effective_season)
    k = most_origins(model, n)
    if k == 0:                      # too short for the network: the base is backtested
        k = max(0, (n - before - H) // H + 1)
    if k == 0:
        fix = (f"use --horizon {n - before} or less" if n - before >= 1 else
               "give a longer series")
        raise ValueError(f"the series has {n} observations; one backtest origin with horizon "
                         f"{H} needs {before + H} (two seasons or 4 observations before it); "
                         f"{fix}")
    if k < DEFAULT_ORIGINS:
        say(f"backtest over {k} origin(s), not the default {DEFAULT_ORIGINS}: the most "
            f"{n} observations hold with horizon {H} and the model trained before the first; "
            "--origins chooses")
    return min(k, DEFAULT_ORIGINS)


def fit_forecast(y, out: str | Path, *, X=None, X_future=None, future_ahead=None,
                 horizon: int = 12, season: int | None = None, n_origins: int | None = None,
                 name: str = "series", say: Say = quiet, refit: bool = False,
                 **params) -> dict:
    """Backtest (``refit``: a model fitted at every origin; ``n_origins``: default 10, or as
    many as the series holds), fit on the whole series, forecast ahead; write everything
    under ``out``. Known-future covariates: ``X_future`` over the observed rows and
    ``future_ahead`` over the next ``horizon`` steps (at least that many rows)."""
    import pandas as pd

    from attnlab.models.forecast import AttentionForecaster
    from attnlab.plots.forecast import (
        save_backtest,
        save_forecast_attention,
        save_future,
        time_label,
    )

    out = Path(out)
    check_out(out)
    ahead = None
    if X_future is not None:
        n_ahead = 0 if future_ahead is None else len(future_ahead)
        if n_ahead < horizon:
            raise ValueError(f"--future needs the known-future values of the {horizon} steps to "
                             f"forecast; the CSV has {n_ahead} row(s) after the last value of "
                             f"the target: add {horizon - n_ahead} more, with the target empty")
        if n_ahead > horizon:
            say(f"{n_ahead} rows after the last observation, {horizon} forecast: the first "
                f"{horizon} are used")
        X_future = np.asarray(X_future, dtype=float)
        ahead = np.asarray(future_ahead, dtype=float)[:horizon]
    model = AttentionForecaster(horizon=horizon, season=season, **params)
    if n_origins is None:
        n_origins = default_origins(model, len(y), say)
    say(f"backtest: {n_origins} origins, horizon {horizon}, encoder {model.encoder}"
        + (", refitted at every origin" if refit else ""))
    bt = model.backtest(y, X, n_origins=n_origins, refit=refit, baselines=CLI_BASELINES,
                        X_future=X_future)
    for note in bt.notes:
        say(note)
    evaluated = bt.model.base_name_
    if model.base == "auto":                 # the saved model is the evaluated configuration
        model.set_params(base=evaluated)
        say(f"base: {evaluated} (auto's choice before the first origin; the saved model and "
            "its forecast use it too)")
    say("fitting the final model on the whole series")
    model.fit(y, X, X_future=X_future)
    for note in model.notes_:
        say(note)
    if not model.network_in_use_:
        say(f"the network's correction is off (w = 0 on the validation windows): the forecast "
            f"is the {model.base_name_} base alone")
    future = model.predict(X_future=ahead)    # once; both intervals are widths around it
    bounds = model.interval_bounds(future)
    interval_notes = model.interval_notes()
    for note in interval_notes:
        say(note)
    (lo80, hi80), (lo95, hi95) = bounds[0.8], bounds[0.95]
    first_w = model.attention_
    index = getattr(y, "index", None)
    dates = _future_index(index, horizon)
    metrics = {"series": name, "n_obs": int(len(y)), "horizon": horizon,
               "season": season, "lookback": model.effective_lookback, "encoder": model.encoder,
               "n_origins": n_origins, "refit": refit,
               "origins": [time_label(index, t) for t in bt.origins],
               "base": params.get("base", "auto"), "base_backtest": evaluated,
               "base_final": model.base_name_, "base_scores": bt.model.base_scores_,
               "network_weight_w": model.shrink_, "network_in_use": bool(model.network_in_use_),
               "backtest": bt.metrics, "epochs_final": model.history_.epochs,
               "best_epoch_final": model.history_.best_epoch,
               "interval_notes": interval_notes,
               "notes": [*bt.notes, *model.notes_],
               "forecast": {"step": list(range(1, horizon + 1)), "value": future.tolist(),
                            "time": dates}}
    with result_folder(out) as d:
        write_text_atomic(d / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        write_text_atomic(d / "backtest.md", bt.table() + "\n")
        paper_folder(d / "paper", bt, index, name, y)
        write_text_atomic(d / "forecast.csv", pd.DataFrame(
            {"step": range(1, horizon + 1), "time": dates or [""] * horizon,
             "forecast": future, "lower_80": lo80, "upper_80": hi80, "lower_95": lo95,
             "upper_95": hi95}).to_csv(index=False))
        figs = [save_backtest(y, bt, d / "backtest.png", name),
                save_forecast_attention(bt, d / "attention.png", index, name),
                save_future(y, future, first_w, model.effective_lookback, d / "forecast.png",
                            name, dates=dates, bt=bt,
                            intervals={0.8: (lo80, hi80), 0.95: (lo95, hi95)})]
        write_text_atomic(d / "model.tex", model.to_latex())
        write_text_atomic(d / "model.md", model.to_markdown())
        model.save(d / "model")
    metrics["files"] = [str(out / Path(p).name) for p in figs] + [str(out / n) for n in (
        "metrics.json", "backtest.md", "forecast.csv", "model.tex", "model.md", "model")]
    return metrics


def _future_index(index, horizon: int) -> list[str] | None:
    import pandas as pd

    if not isinstance(index, pd.DatetimeIndex) or len(index) < 3:
        return None
    with warnings.catch_warnings():     # pandas 3 warns that infer_freq will return an offset
        warnings.simplefilter("ignore")
        freq = index.freq or pd.infer_freq(index)
    if freq is None:
        return None
    dates = pd.date_range(index[-1], periods=horizon + 1, freq=freq)[1:]
    return [d.strftime("%Y-%m-%d") for d in dates]



def fit_global(long, out: str | Path, *, horizon: int, season: int | None = None,
               base: str = "theta", say: Say = quiet, **params) -> dict:
    """Many series in one long frame: hold out each series' last ``horizon`` values and score
    the global forecaster against seasonal naive, ETS and Theta there (sMAPE, MASE, interval
    coverage), then fit on every value and write the forecasts, the model and the metrics."""
    from attnlab.models.forecast.backtest import base_history
    from attnlab.models.forecast.evaluation import holdout_panel
    from attnlab.models.forecast.global_model import GlobalForecaster, as_panel

    out = Path(out)
    check_out(out)
    ids, series, _ = as_panel(long, "--csv")
    m = season or 1
    held = [i for i, y in enumerate(series) if len(y) >= horizon + base_history(m)]
    say(f"{len(series)} series; held-out evaluation on the last {horizon} values of the "
        f"{len(held)} long enough for it")
    evaluation, cover = {}, {}
    if held:
        model = GlobalForecaster(horizon, season=season, base=base, **params)
        r = holdout_panel(model, {ids[i]: series[i] for i in held},
                          baselines=("seasonal_naive", "ets", "theta"))
        cover = {f"{q:g}": c for q, c in r.coverage().items()}
        evaluation = {("global forecaster" if k == "attention" else k):
                      {"sMAPE": v["sMAPE"], "MASE": v["MASE"], "series": len(held)}
                      for k, v in r.metrics.items()}
    say("fitting on every value")
    model = GlobalForecaster(horizon, season=season, base=base, **params).fit(long)
    for note in model.notes_:
        say(note)
    frame = model.predict()
    metrics = {"series": len(series), "horizon": horizon, "season": season, "base": base,
               "held_out": evaluation, "coverage_held_out": cover,
               "network_weight_w": model.shrink_, "notes": model.notes_}
    with result_folder(out) as d:
        write_text_atomic(d / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        write_text_atomic(d / "forecast.csv", frame.assign(
            ds=[v.strftime("%Y-%m-%d") if hasattr(v, "strftime") else v for v in frame.ds]
        ).to_csv(index=False))
        model.save(d / "model")
    metrics["files"] = [str(out / n) for n in ("metrics.json", "forecast.csv", "model")]
    return metrics



# ---- predicting from a saved model ----------------------------------------------------------

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
        if csv is not None or exog or future:
            raise ValueError("a global forecaster predicts the series it was fitted on; give "
                             "--model only (refit with `attnlab fit forecast --id` for new "
                             "data)")
        frame = model.predict(horizon)
        frame["ds"] = [v.strftime("%Y-%m-%d") if hasattr(v, "strftime") else v
                       for v in frame["ds"]]
        path = write_text_atomic(out_csv, frame.to_csv(index=False))
        return path, len(frame)
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
            dates = _future_index(index, len(pred)) if index is not None else None
        else:
            if exog:
                raise ValueError("--exog reads the covariates of --csv: give --csv with the "
                                 "series and its covariates")
            pred = model.predict(horizon)
            dates = _dates_from_fit(Path(model_dir), len(pred))
        frame = pd.DataFrame({"step": range(1, len(pred) + 1),
                              "time": dates or [""] * len(pred), "forecast": pred})
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
