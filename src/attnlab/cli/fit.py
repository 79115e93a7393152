"""``attnlab fit forecast|tabular|graph``: train an applied model, evaluate it against
baselines, write the result folder (thin commands over :mod:`attnlab.cli.jobs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from attnlab.cli.app import UsageError, app, command, console, one_of, say, working

fit_app = typer.Typer(help="Train an applied attention model, evaluate it against baselines, "
                      "and write metrics, figures, the model and its LaTeX equations.",
                      no_args_is_help=True, rich_markup_mode=None)
app.add_typer(fit_app, name="fit")


@command("forecast", on=fit_app)
def fit_forecast_cmd(
    csv: Optional[Path] = typer.Option(None, help="CSV with the series (one row per time step)."),
    target: Optional[str] = typer.Option(None, help="Column of --csv to forecast."),
    time: Optional[str] = typer.Option(None, help="Date column of --csv (rows are sorted by it)."),
    exog: Optional[str] = typer.Option(None, help="Comma-separated past-covariate columns."),
    id: Optional[str] = typer.Option(None, "--id", help="Column naming the series of a long "
                                     "CSV (many series): one network across all of them, "
                                     "each with its own statistical base."),
    future: Optional[str] = typer.Option(None, help="Comma-separated known-future covariate "
                                         "columns (holidays, promotions, prices set ahead); "
                                         "the rows after the last value of --target, left "
                                         "empty there, hold their values for the forecast."),
    example: Optional[str] = typer.Option(None, help="Bundled series instead of --csv: co2, "
                                          "sunspots, elnino or unemployment."),
    horizon: Optional[int] = typer.Option(None, min=1, help="Steps to forecast (example "
                                          "default: one "
                                          "season)."),
    season: Optional[int] = typer.Option(None, min=1, help="Seasonal period, e.g. 12 for "
                                         "monthly data."),
    lookback: Optional[int] = typer.Option(None, min=1, help="Past steps the model reads "
                                           "(default 3 seasons, or 24)."),
    encoder: str = typer.Option("gru", help="gru, lstm or transformer."),
    base: str = typer.Option("combination", help="Statistical forecast the network corrects: "
                             "combination (the median of ets, arima and theta), auto (the "
                             "best candidate on the training tail), seasonal_naive, naive, "
                             "drift, ets, ar, arima, theta, or none."),
    force_model: bool = typer.Option(False, "--force-model", help="Forecast with the model "
                                     "even when a baseline beats it on the backtest (by "
                                     "default the better baseline forecasts, said so)."),
    val_fraction: Optional[float] = typer.Option(None, min=0.05, max=0.6, help="Part held "
                                                 "out for early stopping and the intervals' "
                                                 "calibration: of one series' training "
                                                 "windows (default 0.2, at least 38 windows "
                                                 "where a third holds them), or with --id of "
                                                 "the series (default 0.3). Larger: more "
                                                 "calibration windows, so finite 95% "
                                                 "intervals."),
    pool: str = typer.Option("attention", help="attention, or mean (the ablation)."),
    origins: Optional[int] = typer.Option(None, min=1, help="Rolling-origin backtest origins "
                                          "(default 10, or as many as the series holds)."),
    refit: bool = typer.Option(False, "--refit", help="Refit the model at every backtest "
                               "origin (as ETS and AR are); origins times slower."),
    max_epochs: int = typer.Option(300, help="Most training epochs (early stopping decides)."),
    seed: int = typer.Option(0, help="Random seed."),
    out: Path = typer.Option(Path("out/forecast"), help="Folder for the results."),
):
    """Forecast a time series with attention over past steps; backtest against seasonal naive,
    ETS and AR."""
    from attnlab.cli import jobs, readers
    from attnlab.models import datasets
    from attnlab.models.forecast.bases import NAMES
    from attnlab.models.forecast.estimator import ENCODERS

    one_of(encoder, "--encoder", ENCODERS)
    one_of(base, "--base", NAMES)
    one_of(pool, "--pool", ("attention", "mean"))
    F = F_ahead = None
    if id is not None:
        if csv is None or target is None or example is not None:
            raise UsageError("--id needs --csv F --target COL (a long file: one row per "
                             "series and step)")
        if exog or future or refit or origins is not None:
            raise UsageError("--exog, --future, --refit and --origins are for one series; "
                             "with --id the last --horizon values of each series are held out")
        if base == "auto":
            raise UsageError("--base auto picks a base per series' tail and is for one series; "
                             "with --id every series takes one base: combination (the "
                             "default), theta, ets, arima, seasonal_naive, naive, drift, ar "
                             "or none")
        import pandas as pd

        long = readers.panel_from_csv(csv, target, time, id)
        if season is None and time is not None:
            first = long[long.unique_id == long.unique_id.iloc[0]]
            season = readers.season_of(pd.DatetimeIndex(first.ds.sort_values()))
            if season is not None:
                console.print(f"--season {season} inferred from the dates of --time {time!r}; "
                              "pass --season to change it")
        horizon = horizon or (season or 12)
        with working("many series: held-out evaluation, then the final model"):
            m = jobs.fit_global(long, out, horizon=horizon, season=season,
                                base=base, say=say, force_model=force_model,
                                id_column=id, time_column=time, value_column=target,
                                name=target, **({} if val_fraction is None else
                                                 {"holdout": val_fraction}),
                                encoder=encoder, max_epochs=max_epochs, seed=seed,
                                lookback=lookback)
        table = Table(title=f"{m['series']} series: the last {horizon} values held out",
                      title_justify="left")
        for col in ("method", "sMAPE %", "MASE", "series"):
            table.add_column(col, justify="left" if col == "method" else "right")
        for method, v in sorted(m["held_out"].items(), key=lambda kv: kv[1]["MASE"]):
            table.add_row(method, f"{v['sMAPE']:.2f}", f"{v['MASE']:.3f}", str(v["series"]))
        console.print(table)
        console.print(f"results written to {out}/: "
                      + ", ".join(Path(p).name for p in m["files"]))
        return
    if example is not None:
        if csv is not None:
            raise UsageError("give either --csv or --example, not both")
        if future is not None or exog is not None:
            raise UsageError("--exog and --future name columns of --csv; a bundled example has "
                             "none")
        ex = datasets.load_series(example)
        y, X, name = ex.y, None, example
        horizon = horizon or ex.horizon
        season = season or ex.season
        origins = origins or ex.n_origins
    else:
        if csv is None or target is None:
            raise UsageError("give --csv F --target COL (or --example co2|sunspots|elnino|"
                             "unemployment)")
        cols = [c.strip() for c in exog.split(",") if c.strip()] if exog else None
        fcols = [c.strip() for c in future.split(",") if c.strip()] if future else None
        y, X, F, F_ahead = readers.series_with_future(csv, target, time, cols, fcols)
        name = target
        if season is None:
            season = readers.season_of(y.index)
            if season is not None:
                console.print(f"--season {season} inferred from the dates of --time "
                              f"{time!r}; pass --season to change it")
        horizon = horizon or (season or 12)
    with working("fitting (backtest, then the final model)"):
        m = jobs.fit_forecast(y, out, X=X, X_future=F, future_ahead=F_ahead,
                              horizon=horizon, season=season,
                              n_origins=origins, name=name, say=say, refit=refit,
                              encoder=encoder, base=base, pool=pool, force_model=force_model,
                              **({} if val_fraction is None else
                                 {"val_fraction": val_fraction}), time_column=time,
                              value_column=None if example is not None else target,
                              lookback=lookback, max_epochs=max_epochs, seed=seed)
    if not m["backtest"]:
        console.print(f"{name}: {m['backtest_note']}; forecast by the {m['base_final']} base")
        console.print(f"results written to {out}/: "
                      + ", ".join(Path(p).name for p in m["files"]))
        return
    table = Table(title=f"{name}: backtest over {m['n_origins']} origins, horizon {horizon}",
                  title_justify="left")
    for col in ("method", "MAE", "RMSE", "MAPE %", "MASE"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for method, v in sorted(m["backtest"].items(), key=lambda kv: kv[1]["MASE"]):
        table.add_row(method, f"{v['MAE']:.3f}", f"{v['RMSE']:.3f}", f"{v['MAPE']:.2f}",
                      f"{v['MASE']:.3f}")
    console.print(table)
    console.print(f"results written to {out}/: " + ", ".join(Path(p).name for p in m["files"]))


@command("tabular", on=fit_app)
def fit_tabular_cmd(
    csv: Optional[Path] = typer.Option(None, help="CSV with one row per example."),
    target: Optional[str] = typer.Option(None, help="Column of --csv to predict."),
    example: Optional[str] = typer.Option(None, help="Bundled table instead of --csv: diabetes, "
                                          "breast_cancer or wine."),
    task: str = typer.Option("auto", help="auto, classification or regression."),
    drop: Optional[str] = typer.Option(None, help="Comma-separated columns of --csv to leave "
                                       "out (identifiers, leaks)."),
    folds: int = typer.Option(5, min=2, help="Cross-validation folds."),
    max_epochs: int = typer.Option(200, help="Most training epochs (early stopping decides)."),
    seed: int = typer.Option(0, help="Random seed."),
    out: Path = typer.Option(Path("out/tabular"), help="Folder for the results."),
):
    """Attention over table features (FT-Transformer); cross-validate against linear and
    gradient-boosting baselines."""
    from attnlab.cli import jobs, readers
    from attnlab.models import datasets

    if example is not None:
        if csv is not None:
            raise UsageError("give either --csv or --example, not both")
        if drop is not None:
            raise UsageError("--drop names columns of --csv; give --csv")
        X, y, ex_task = datasets.load_table(example)
        task = ex_task if task == "auto" else task
        name = example
    else:
        if csv is None or target is None:
            raise UsageError("give --csv F --target COL (or --example diabetes|"
                             "breast_cancer|wine)")
        dcols = [c.strip() for c in drop.split(",") if c.strip()] if drop else None
        X, y = readers.table_from_csv(csv, target, task, folds, dcols)
        name = target
    with working("cross-validating, then fitting the final model"):
        m = jobs.fit_tabular(X, y, out, task=task, folds=folds, name=name, say=say,
                             max_epochs=max_epochs, seed=seed)
    table = Table(title=f"{name}: {folds}-fold cross-validated {m['scoring']} ({m['task']})",
                  title_justify="left")
    for col in ("model", "mean", "std"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for label, v in sorted(m["cv"].items(), key=lambda kv: -kv[1]["mean"]):
        table.add_row(label, f"{v['mean']:.4f}", f"{v['std']:.4f}")
    console.print(table)
    console.print(f"results written to {out}/: " + ", ".join(Path(p).name for p in m["files"]))


@command("graph", on=fit_app)
def fit_graph_cmd(
    edges: Optional[Path] = typer.Option(None, help="Edge-list CSV: source, target columns."),
    features: Optional[Path] = typer.Option(None, help="Node CSV: node id, then numeric "
                                            "features (default: one-hot node ids)."),
    labels: Optional[Path] = typer.Option(None, help="Labels CSV: node id, label (empty = "
                                          "unknown); labelled nodes are the training set."),
    example: Optional[str] = typer.Option(None, help="'karate': Zachary's karate club, 2 "
                                          "labelled members per faction, 20 seeds vs label "
                                          "propagation."),
    max_epochs: int = typer.Option(200, help="Training epochs."),
    seed: int = typer.Option(0, help="Random seed."),
    out: Path = typer.Option(Path("out/graph"), help="Folder for the results."),
):
    """Node classification with graph attention (GAT); draw the graph with edge width by
    attention."""
    from attnlab.cli import jobs, readers
    from attnlab.models.graph.data import karate

    if example is not None:
        if example != "karate":
            raise UsageError(f"unknown graph example {example!r}; the bundled one is karate")
        if edges is not None:
            raise UsageError("give either --edges or --example, not both")
        with working("karate club: 20 seeds of GAT and label propagation"):
            m = jobs.fit_graph(karate(), out, karate_seeds=20, max_epochs=max_epochs,
                               seed=seed)
    else:
        if edges is None or labels is None:
            raise UsageError("give --edges E.csv --labels Y.csv [--features X.csv] (or "
                             "--example karate)")
        m = jobs.fit_graph(readers.graph_from_csv(edges, features, labels), out,
                           max_epochs=max_epochs, seed=seed)
    if example is not None:
        console.print(f"karate club, 2 labelled members per faction, 20 seeds: GAT accuracy "
                      f"{m['gat_mean']:.3f} ± {m['gat_std']:.3f}, label propagation "
                      f"{m['lp_mean']:.3f} ± {m['lp_std']:.3f} (GAT better on "
                      f"{m['gat_wins']}, tied on {m['ties']}), spectral "
                      f"{m['spectral_mean']:.3f} ± {m['spectral_std']:.3f}; both baselines "
                      "assume linked members share a label")
    else:
        h = m["holdout"]
        held = (f"held-out accuracy over {h['folds']} folds of the labelled nodes: GAT "
                f"{h['gat_mean']:.3f} ± {h['gat_std']:.3f}, label propagation "
                f"{h['label_propagation_mean']:.3f} ± {h['label_propagation_std']:.3f}, "
                f"majority class {h['majority_mean']:.3f}" if h["folds"] else h["note"])
        console.print(f"{m['nodes']} nodes, {m['labelled']} labelled; {held}; training "
                      f"accuracy {m['train_accuracy']:.3f}")
    console.print(f"results written to {out}/: " + ", ".join(Path(p).name for p in m["files"]))
