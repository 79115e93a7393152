"""``attnlab predict``: a saved model's forecast, or one prediction per CSV row."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.app import command, console


@command()
def predict(
    model: Path = typer.Option(..., help="Model folder written by `attnlab fit` (its model/)."),
    csv: Optional[Path] = typer.Option(None, help="Rows to predict (tabular), or the series to "
                                       "continue (forecast, with --target)."),
    target: Optional[str] = typer.Option(None, help="Series column (forecast) or a column to "
                                         "ignore (tabular)."),
    time: Optional[str] = typer.Option(None, help="Date column of --csv (forecast)."),
    horizon: Optional[int] = typer.Option(None, min=1, help="Steps to forecast (default: as "
                                          "fitted)."),
    exog: Optional[str] = typer.Option(None, help="Comma-separated covariate columns of --csv "
                                       "(a forecaster fitted with --exog)."),
    future: Optional[str] = typer.Option(None, help="Comma-separated known-future columns of "
                                         "--csv (a forecaster fitted with --future): the rows "
                                         "after the last value of --target hold them."),
    id: Optional[str] = typer.Option(None, "--id", help="Column of --csv copied into the "
                                     "predictions to identify each row (tabular)."),
    out: Path = typer.Option(Path("out/predictions.csv"), help="CSV to write."),
):
    """Predict with a saved model: a forecast, or one prediction per CSV row."""
    from attnlab.cli import jobs

    cols = [c.strip() for c in exog.split(",") if c.strip()] if exog else None
    fcols = [c.strip() for c in future.split(",") if c.strip()] if future else None
    path, rows = jobs.predict_saved(model, out, csv=csv, target=target, time=time,
                                    horizon=horizon, exog=cols, future=fcols, id_column=id,
                                    warn=lambda m: console.print(f"[yellow]note[/yellow]: "
                                                                 f"{m}"))
    console.print(f"{rows} prediction(s) written to {path}")
