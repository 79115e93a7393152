"""``attnlab paper``: the model section of a paper from a backtest, an ablation and a
sensitivity analysis, in English or Chinese, compiled to PDF when a TeX engine is installed.
On one series the paper's model is the single-series forecaster with its rolling-origin
backtest; on many (``--id`` of a long CSV, or a bundled panel) it is the global forecaster with
the competitions' held-out split."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.app import UsageError, command, console, one_of, say, working
from attnlab.cli.jobs import ENGINES, write_paper


@command("paper")
def paper_cmd(
    example: Optional[str] = typer.Option(None, help="Bundled series: co2, sunspots, elnino "
                                          "or unemployment; or the panel us_employment."),
    csv: Optional[Path] = typer.Option(None, help="CSV with the series instead of --example."),
    target: Optional[str] = typer.Option(None, help="Column of --csv to forecast."),
    time: Optional[str] = typer.Option(None, help="Date column of --csv."),
    id: Optional[str] = typer.Option(None, "--id", help="Column naming the series of a long "
                                     "--csv (one row per series and step): the paper is on "
                                     "the global forecaster."),
    horizon: Optional[int] = typer.Option(None, min=1, help="Steps forecast at once."),
    season: Optional[int] = typer.Option(None, min=1, help="Seasonal period."),
    origins: Optional[int] = typer.Option(None, min=1, help="Backtest origins."),
    lang: str = typer.Option("en", help="en (pdflatex) or zh (xelatex + ctex)."),
    seeds: int = typer.Option(5, min=1, help="Seeds of the ablation and of the seed sensitivity."),
    quick: bool = typer.Option(False, "--quick", help="Few epochs, 2 seeds, 2 values per "
                               "setting: a draft in a minute, not numbers to report."),
    compile_pdf: Optional[bool] = typer.Option(None, "--compile/--no-compile",
                                               help="Compile to PDF (default: when the TeX "
                                               "engine is installed)."),
    out: Path = typer.Option(Path("out/paper"), help="Folder for paper.tex, its figures and "
                             "the PDF."),
):
    """Write the model section of a paper (assumptions, symbols, formulation, architecture,
    attention of typical cases, comparison, ablation, sensitivity) from measurements."""
    from attnlab.cli import jobs, readers
    from attnlab.models import datasets
    from attnlab.models.forecast import AttentionForecaster
    from attnlab.models.forecast.ablation import ablation
    from attnlab.models.forecast.backtest import rolling_origin
    from attnlab.models.forecast.paper import LANGS, PaperInputs
    from attnlab.plots.forecast import time_label

    one_of(lang, "--lang", LANGS)
    if compile_pdf and shutil.which(ENGINES[lang]) is None:
        raise UsageError(f"--compile needs {ENGINES[lang]} on the PATH (TeX Live; for --lang zh "
                         "also ctex: Debian's texlive-xetex and texlive-lang-chinese)")
    panel = None
    if id is not None:
        if csv is None or target is None or example is not None:
            raise UsageError("--id needs --csv F --target COL (a long file: one row per "
                             "series and step)")
        if origins is not None:
            raise UsageError("--origins is for one series; with --id the last --horizon "
                             "values of each series are held out")
        import pandas as pd

        panel, name = readers.panel_from_csv(csv, target, time, id), target
        if season is None and time is not None:
            first = panel[panel.unique_id == panel.unique_id.iloc[0]]
            season = readers.season_of(pd.DatetimeIndex(first.ds.sort_values()))
        horizon = horizon or (season or 12)
    elif example in datasets.PANELS:
        if csv is not None:
            raise UsageError("give either --csv or --example, not both")
        frame = datasets.load_panel(example)
        panel, name = {c: frame[c] for c in frame.columns}, example
        season = season or readers.season_of(frame.index)
        horizon = horizon or (season or 12)
    elif example is not None:
        if csv is not None:
            raise UsageError("give either --csv or --example, not both")
        ex = datasets.load_series(example)
        y, name = ex.y, example
        horizon, season = horizon or ex.horizon, season or ex.season
        origins = origins or ex.n_origins
    else:
        if csv is None or target is None:
            raise UsageError("give --example NAME, or --csv F --target COL")
        y, _ = readers.series_from_csv(csv, target, time, None)
        name = target
        season = season or readers.season_of(y.index)
        horizon = horizon or (season or 12)
    jobs.check_out(out)                      # before minutes of fitting
    if panel is not None:
        _panel_paper(panel, name, horizon, season, lang, seeds, quick, compile_pdf, out)
        return
    epochs = 15 if quick else 300
    n_seeds = min(seeds, 2) if quick else seeds
    model = AttentionForecaster(horizon=horizon, season=season, max_epochs=epochs)
    if origins is None:
        origins = jobs.default_origins(model, len(y), say)
    if origins == 0:                  # too short for any backtest: the paper says so
        with working("fitting the base on the whole series"):
            model.fit(y)
        for note in model.notes_:
            say(note)
        with jobs.result_folder(out) as d:
            files = write_paper(d, PaperInputs(model, None, name, [], y=y, draft=None),
                                lang, compile_pdf)
        console.print(f"paper written to {out}/: {', '.join(files)}"
                      + ("" if "paper.pdf" in files else
                         f" (compile with: cd {out} && {ENGINES[lang]} paper.tex)"))
        return
    values = y.to_numpy(dtype=float)
    with working("backtest"):
        bt = model.backtest(y, n_origins=origins, baselines=jobs.CLI_BASELINES)
    with working(f"ablation over {n_seeds} seeds"):
        ab = ablation(model, values, n_origins=origins, seeds=range(n_seeds), series=name,
                      progress=None)
    L = model.effective_lookback
    grid = {"lookback": [max(2, L // 2), L] + ([] if quick else [L + L // 2]),
            "hidden_size": [16, 32] + ([] if quick else [64])}
    # the seed row is the ablation's own (same model, same origins): not fitted again
    sens = {"seed": list(zip(range(n_seeds), ab.mase["base + attention"]))}
    with working("sensitivity: lookback, hidden size, seed"):
        for key, vals in grid.items():
            rows = []
            for v in vals:
                if v == getattr(model, key if key != "lookback" else "effective_lookback"):
                    rows.append((v, bt.metrics["attention"]["MASE"]))   # the backtest itself
                    continue
                m = model.__class__(**{**model.get_params(), key: v})
                try:
                    r = rolling_origin(m, values, None, n_origins=origins, baselines=())
                    rows.append((v, r.metrics["attention"]["MASE"]))
                except ValueError as exc:           # a lookback the series cannot give
                    say(f"sensitivity: {key}={v} skipped ({exc})")
            sens[key] = rows
    index = getattr(y, "index", None)
    draft = {"en": f"a quick run ({epochs} epochs, {n_seeds} seeds); rerun it in full before "
                   "citing its numbers",
             "zh": f"快速运行（{epochs} 个训练轮次，{n_seeds} 个随机种子）；引用数字前请完整重跑"
             } if quick else None
    inputs = PaperInputs(bt.model, bt, name, [time_label(index, t) for t in bt.origins],
                         ablation=ab, sensitivity=sens, y=y, draft=draft)
    with jobs.result_folder(out) as d:
        files = write_paper(d, inputs, lang, compile_pdf)
    console.print(f"paper written to {out}/: {', '.join(files)}"
                  + ("" if "paper.pdf" in files else
                     f" (compile with: cd {out} && {ENGINES[lang]} paper.tex)"))


def _panel_paper(Y, name: str, horizon: int, season, lang: str, seeds: int, quick: bool,
                 compile_pdf, out: Path) -> None:
    """The paper on the global forecaster: the competitions' held-out split, the ablation
    over seeds on the same split, and the sensitivity to the lookback and the hidden size."""
    from attnlab.cli import jobs
    from attnlab.models.forecast.evaluation import holdout_panel, panel_ablation, split_panel
    from attnlab.models.forecast.global_model import GlobalForecaster
    from attnlab.models.forecast.paper import PaperInputs

    epochs = 10 if quick else 60
    n_seeds = min(seeds, 2) if quick else seeds
    model = GlobalForecaster(horizon, season=season, max_epochs=epochs, seed=0)
    with working("held-out evaluation (every series' base, then the network)"):
        r = holdout_panel(model, Y)
    for note in r.notes:
        say(note)
    with working(f"ablation over {n_seeds} seeds"):
        ab = panel_ablation(model, Y, seeds=range(n_seeds), series=name, done=r)
    L = model.effective_lookback
    sens = {"seed": list(zip(range(n_seeds), ab.mase["base + attention"]))}
    grid = {"lookback": [max(2, L // 2), L], "hidden_size": [16, 32]}
    with working("sensitivity: lookback, hidden size"):
        for key, vals in grid.items():
            rows = []
            for v in vals:
                current = L if key == "lookback" else model.hidden_size
                if v == current:
                    rows.append((v, r.metrics["attention"]["MASE"]))
                    continue
                m = holdout_panel(model.__class__(**{**model.get_params(), key: v}), Y,
                                  baselines=())
                rows.append((v, m.metrics["attention"]["MASE"]))
            sens[key] = rows
    draft = {"en": f"a quick run ({epochs} epochs, {n_seeds} seeds); rerun it in full before "
                   "citing its numbers",
             "zh": f"快速运行（{epochs} 个训练轮次，{n_seeds} 个随机种子）；引用数字前请完整重跑"
             } if quick else None
    inputs = PaperInputs(r.model, r, name, [str(i) for i in r.ids], ablation=ab,
                         sensitivity=sens, draft=draft)
    train = split_panel(Y, horizon)[1]
    with jobs.result_folder(out) as d:
        files = jobs.write_paper(d, inputs, lang, compile_pdf, train=train)
    console.print(f"paper written to {out}/: {', '.join(files)}"
                  + ("" if "paper.pdf" in files else
                     f" (compile with: cd {out} && {ENGINES[lang]} paper.tex)"))
