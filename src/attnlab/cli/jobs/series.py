"""The forecasting jobs: ``fit forecast`` (one series, or many with ``--id``); ``predict`` from
a saved forecaster is :mod:`attnlab.cli.jobs.predict`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from attnlab._files import write_text_atomic
from attnlab.cli.jobs.folder import CLI_BASELINES, Say, check_out, quiet, result_folder
from attnlab.cli.jobs.paper import paper_folder, write_paper

DEFAULT_ORIGINS = 10
# the panel's held-out comparison (ARIMA, slow on hundreds of series, enters the combination)
CLI_PANEL_BASELINES = ("seasonal_naive", "ets", "theta", "combination")


def default_origins(model, n: int, say: Say = quiet) -> int:
    """The backtest's origins when none are asked for: 10, or as many as a series of ``n``
    observations holds (said), with the network fitted before the first where it can be;
    0 (said, with the horizon that would allow one) when the series holds no origin: its
    forecast is then made without a measured error."""
    from attnlab.models.forecast.backtest import base_history

    k = most_origins_any(model, n)
    if k == 0:
        H, before = model.horizon, base_history(model.effective_season)
        fix = (f"--horizon {n - before} or less would allow one" if n - before >= 1 else
               "a longer series would allow one")
        say(f"no backtest: {n} observations hold no origin with horizon {H} (it needs "
            f"{before + H}: two seasons or 4 observations before it); the forecast's error "
            f"is not measured ({fix})")
        return 0
    if k < DEFAULT_ORIGINS:
        say(f"backtest over {k} origin(s), not the default {DEFAULT_ORIGINS}: the most "
            f"{n} observations hold with horizon {model.horizon} and the model trained before "
            "the first; --origins chooses")
    return min(k, DEFAULT_ORIGINS)


def most_origins_any(model, n: int) -> int:
    """The origins a series of ``n`` observations holds: with the network trained before the
    first where it can be, else with the base alone from two seasons (or 4 observations)."""
    from attnlab.models.forecast.backtest import base_history, most_origins

    k = most_origins(model, n)
    if k == 0:
        k = max(0, (n - base_history(model.effective_season) - model.horizon)
                // model.horizon + 1)
    return k


def fit_forecast(y, out: str | Path, *, X=None, X_future=None, future_ahead=None,
                 horizon: int = 12, season: int | None = None, n_origins: int | None = None,
                 name: str = "series", say: Say = quiet, refit: bool = False,
                 force_model: bool = False, time_column: str | None = None,
                 value_column: str | None = None, **params) -> dict:
    """Backtest (``refit``: a model fitted at every origin; ``n_origins``: default 10, or as
    many as the series holds), fit on the whole series, forecast ahead; write everything
    under ``out``. Known-future covariates: ``X_future`` over the observed rows and
    ``future_ahead`` over the next ``horizon`` steps (at least that many rows)."""
    import pandas as pd

    from attnlab.models.forecast import AttentionForecaster
    from attnlab.models.forecast.bases import DEFAULT
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
    bt = evaluated = None
    if n_origins:
        say(f"backtest: {n_origins} origins, horizon {horizon}, encoder {model.encoder}"
            + (", refitted at every origin" if refit else ""))
        bt = model.backtest(y, X, n_origins=n_origins, refit=refit, baselines=CLI_BASELINES,
                            X_future=X_future)
        for note in bt.notes:
            say(note)
        evaluated = bt.model.base_name_
        if model.base == "auto":             # the saved model is the evaluated configuration
            model.set_params(base=evaluated)
            say(f"base: {evaluated} (auto's choice before the first origin; the saved model "
                "and its forecast use it too)")
    winner = _better_baseline(bt) if bt is not None else None
    if winner is not None:
        b, theirs, ours = winner
        if force_model:
            say(f"{b} beats the model on the backtest (MASE {theirs:.3f} against {ours:.3f}); "
                "--force-model keeps the model")
        else:
            say(f"{b} beats the model on the backtest (MASE {theirs:.3f} against {ours:.3f}): "
                f"the forecast is {b}'s alone; --force-model keeps the model")
            model.set_params(base=b, network=False)
    say("fitting the final model on the whole series")
    model.fit(y, X, X_future=X_future)
    for note in model.notes_:
        say(note)
    if not model.network_in_use_ and model.network and not model.base_only_:
        say(f"the network's correction is off (w = 0 on the validation windows): the forecast "
            f"is the {model.base_name_} base alone")
    say(f"base: {model.base_name_}, network weight w = {model.shrink_:.2f}")
    future = model.predict(X_future=ahead)    # once; both intervals are widths around it
    bounds = model.interval_bounds(future)
    interval_notes = model.interval_notes()
    for note in interval_notes:
        say(note)
    (lo80, hi80), (lo95, hi95) = bounds[0.8], bounds[0.95]
    first_w = model.attention_ if model.network_in_use_ else None
    index = getattr(y, "index", None)
    dates = future_index(index, horizon)
    no_backtest = None if bt is not None else (
        f"{len(y)} observations hold no backtest origin with horizon {horizon}: the forecast's "
        "error is not measured")
    metrics = {"series": name, "n_obs": int(len(y)), "horizon": horizon,
               "season": season, "lookback": model.effective_lookback, "encoder": model.encoder,
               "n_origins": n_origins, "refit": refit,
               "origins": [] if bt is None else [time_label(index, t) for t in bt.origins],
               "base": model.get_params()["base"] if bt is None else params.get("base", DEFAULT),
               "base_backtest": evaluated,
               "base_final": model.base_name_,
               "base_scores": {} if bt is None else bt.model.base_scores_,
               "network_weight_w": model.shrink_, "network_in_use": bool(model.network_in_use_),
               "forecast_by": (model.base_name_ if not model.network_in_use_
                               else "model"),
               "baseline_won": None if winner is None else
               {"baseline": winner[0], "MASE": winner[1], "model_MASE": winner[2],
                "forced_model": bool(force_model)},
               "backtest": {} if bt is None else bt.metrics,
               "backtest_note": no_backtest,
               "epochs_final": model.history_.epochs,
               "best_epoch_final": model.history_.best_epoch,
               "interval_notes": interval_notes,
               "notes": [*([] if bt is None else bt.notes), *model.notes_],
               "forecast": {"step": list(range(1, horizon + 1)), "value": future.tolist(),
                            "time": dates},
               "columns": {"time": time_column, "value": value_column}}
    value = value_column or "forecast"
    with result_folder(out) as d:
        write_text_atomic(d / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        figs = []
        if bt is not None:
            write_text_atomic(d / "backtest.md", bt.table() + "\n")
            figs += [save_backtest(y, bt, d / "backtest.png", name),
                     save_forecast_attention(bt, d / "attention.png", index, name)]
        paper_folder(d / "paper", bt, index, name, y, model=model)
        write_text_atomic(d / "forecast.csv", pd.DataFrame(
            {"step": range(1, horizon + 1), time_column or "time": dates or [""] * horizon,
             value: future, "lower_80": lo80, "upper_80": hi80, "lower_95": lo95,
             "upper_95": hi95}).to_csv(index=False))
        figs.append(save_future(y, future, first_w, model.effective_lookback,
                                d / "forecast.png", name, dates=dates, bt=bt,
                                intervals={0.8: (lo80, hi80), 0.95: (lo95, hi95)}))
        write_text_atomic(d / "model.tex", model.to_latex())
        write_text_atomic(d / "model.md", model.to_markdown())
        model.save(d / "model")
    metrics["files"] = [str(out / Path(p).name) for p in figs] + [str(out / n) for n in (
        ["metrics.json"] + (["backtest.md"] if bt is not None else [])
        + ["forecast.csv", "model.tex", "model.md", "model", "paper"])]
    return metrics


def _better_baseline(bt) -> tuple[str, float, float] | None:
    """``(name, its MASE, the model's)`` of the backtest's best baseline where its MASE is below
    the model's and it can serve as the model's base; else None."""
    from attnlab.models.forecast.bases import NAMES

    ours = bt.metrics["attention"]["MASE"]
    rivals = {k: v["MASE"] for k, v in bt.metrics.items()
              if k != "attention" and k in NAMES and np.isfinite(v["MASE"])}
    if not rivals:
        return None
    best = min(rivals, key=rivals.get)
    return (best, float(rivals[best]), float(ours)) if rivals[best] < ours else None


def future_index(index, horizon: int) -> list[str] | None:
    """The ``horizon`` dates after a regular date index (``YYYY-MM-DD``), or None where the
    index is not dated or its frequency cannot be inferred."""
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
               base: str | None = None, say: Say = quiet, force_model: bool = False,
               id_column: str | None = None, time_column: str | None = None,
               value_column: str | None = None, name: str = "panel", **params) -> dict:
    """Many series in one long frame: hold out each series' last ``horizon`` values and score
    the global forecaster against seasonal naive, ETS, Theta and their combination there
    (sMAPE, MASE, interval coverage); when a baseline scores better (and not
    ``force_model``), say so and let it forecast. Then fit on every value and write what a
    single series' fit writes: the forecasts (columns named as in the input), the metrics,
    the held-out and attention figures, model.tex/model.md, paper/ and the model."""
    from attnlab.models.forecast.backtest import base_history
    from attnlab.models.forecast.bases import DEFAULT
    from attnlab.models.forecast.evaluation import holdout_panel, split_panel
    from attnlab.models.forecast.global_model import GlobalForecaster
    from attnlab.models.forecast.panel import as_panel
    from attnlab.models.forecast.paper import PaperInputs
    from attnlab.plots import paper as figures

    base = base or DEFAULT
    out = Path(out)
    check_out(out)
    ids, series, _ = as_panel(long, "--csv")
    m = season or 1
    held = [i for i, y in enumerate(series) if len(y) >= horizon + base_history(m)]
    say(f"{len(series)} series; held-out evaluation on the last {horizon} values of the "
        f"{len(held)} long enough for it")
    evaluation, cover, r, winner = {}, {}, None, None
    panel = {ids[i]: series[i] for i in held}
    if held:
        model = GlobalForecaster(horizon, season=season, base=base, **params)
        r = holdout_panel(model, panel, baselines=CLI_PANEL_BASELINES)
        cover = {f"{q:g}": c for q, c in r.coverage().items()}
        evaluation = {("global forecaster" if k == "attention" else k):
                      {"sMAPE": v["sMAPE"], "MASE": v["MASE"], "series": len(held)}
                      for k, v in r.metrics.items()}
        winner = _better_baseline(r)
    final = dict(base=base)
    if winner is not None:
        b, theirs, ours = winner
        if force_model:
            say(f"{b} beats the global forecaster on the held-out values (MASE {theirs:.3f} "
                f"against {ours:.3f}); --force-model keeps the model")
        else:
            say(f"{b} beats the global forecaster on the held-out values (MASE {theirs:.3f} "
                f"against {ours:.3f}): the forecasts are {b}'s alone; --force-model keeps "
                "the model")
            final = dict(base=b, network=False)
    say("fitting on every value")
    model = GlobalForecaster(horizon, season=season, **final, **params).fit(long)
    for note in model.notes_:
        say(note)
    say(f"base: {model.base}, network weight w = {model.shrink_:.2f}")
    frame = model.predict()
    frame["ds"] = [v.strftime("%Y-%m-%d") if hasattr(v, "strftime") else v for v in frame.ds]
    frame = frame.rename(columns={"unique_id": id_column or "unique_id",
                                  "ds": time_column or "ds",
                                  "forecast": value_column or "forecast"})
    metrics = {"series": len(series), "horizon": horizon, "season": season, "base": base,
               "base_final": model.base, "network_weight_w": model.shrink_,
               "network_in_use": bool(model.network_in_use_),
               "forecast_by": "model" if model.network_in_use_ else f"{model.base} alone",
               "baseline_won": None if winner is None else
               {"baseline": winner[0], "MASE": winner[1], "model_MASE": winner[2],
                "forced_model": bool(force_model)},
               "held_out": evaluation, "coverage_held_out": cover, "notes": model.notes_,
               "columns": {"id": id_column, "time": time_column, "value": value_column}}
    with result_folder(out) as d:
        write_text_atomic(d / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        write_text_atomic(d / "forecast.csv", frame.to_csv(index=False))
        figs = []
        if r is not None:
            train = split_panel(panel, horizon)[1]
            figs.append(figures.save_panel(r, train, d / "held_out.png")[0])
            inputs = PaperInputs(r.model, r, name, [str(i) for i in r.ids])
            write_paper(d / "paper", inputs, "en", False, train=train)
        att = model.attention_weights()
        rows = np.flatnonzero(np.isfinite(att).all(1))[:30]
        if len(rows) and model.network_in_use_:
            figs.append(figures.save_attention(att[rows], [str(model.ids_[i]) for i in rows],
                                               d / "attention.png", "en", True))
        write_text_atomic(d / "model.tex", model.to_latex())
        write_text_atomic(d / "model.md", model.equations().to_markdown())
        model.save(d / "model")
    metrics["files"] = [str(out / Path(p).name) for p in figs] + [str(out / n) for n in (
        "metrics.json", "forecast.csv", "model.tex", "model.md", "model")] + (
        [str(out / "paper")] if r is not None else [])
    return metrics
