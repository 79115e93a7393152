"""The ``attnlab`` command. Usage errors print one line and exit 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="attnlab: attention from the formula to fast, inspectable code.",
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
console = Console()


class UsageError(Exception):
    """Bad input from the command line: one line on stderr, exit status 2."""


def _parse_window(text: Optional[str]):
    """'W' -> W, 'L,R' -> (L, R); 'none' on a side means unbounded."""
    if text is None:
        return None
    parts = [p.strip().lower() for p in text.split(",")]
    try:
        vals = [None if p in ("none", "") else int(p) for p in parts]
    except ValueError:
        raise UsageError(f"--window must be W or L,R with whole numbers (none = unbounded), "
                         f"got {text!r}; e.g. --window 2,0") from None
    if len(vals) == 1 and vals[0] is not None:
        return vals[0]
    if len(vals) == 2:
        return tuple(vals)
    raise UsageError(f"--window must be W or L,R, got {text!r}; e.g. --window 2,0")


@app.command()
def explain(
    seed: Optional[int] = typer.Option(None, help="Random example with this seed (default: the built-in sentence)."),
    n: Optional[int] = typer.Option(None, help="Number of tokens of a random example."),
    d: Optional[int] = typer.Option(None, help="Head dimension D_k of a random example."),
    causal: bool = typer.Option(False, "--causal", help="Causal mask (query i sees keys j <= i)."),
    window: Optional[str] = typer.Option(None, help="Local window: W or L,R (e.g. 2,0)."),
    temperature: float = typer.Option(1.0, help="Softmax temperature T (> 0)."),
    out: Path = typer.Option(Path("attnlab-explain"), help="Folder for the heatmaps."),
    plots: bool = typer.Option(True, help="Write heatmaps of S, A and the mask."),
    model: Optional[str] = typer.Option(None, help="'default' (embedded all-MiniLM-L6-v2) or a "
                                        "local BERT folder: show a real head instead."),
    text: Optional[str] = typer.Option(None, help="Sentence for --model (default: a short one)."),
    layer: int = typer.Option(0, help="Layer of --model (0-based)."),
    head: int = typer.Option(0, help="Head of --model (0-based)."),
):
    """Show every step of attention on real numbers and check the code equals the formula."""
    from attnlab.explain import example, model_walk, render, walk, write_heatmaps

    for name, val, lo, hi in (("--n", n, 1, 64), ("--d", d, 1, 64)):
        if val is not None and not lo <= val <= hi:
            raise UsageError(f"{name} must be between {lo} and {hi} (it is printed in full), got {val}")
    if text is not None and model is None:
        model = "default"
    try:
        if model is not None:
            if causal or window is not None or seed is not None or n is not None or d is not None:
                raise UsageError("--causal, --window, --seed, --n and --d apply to the built-in "
                                 "example, not to --model (its attention is what it is)")
            wt = model_walk(text or "The cat sat on the mat.", model, layer=layer, head=head)
        else:
            tokens, q, k, v = example(n=n, d=d, seed=seed)
            wt = walk(tokens, q, k, v, causal=causal, window=_parse_window(window),
                      temperature=temperature)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    render(wt, console)
    if plots:
        paths = write_heatmaps(wt, out)
        console.print(f"\nheatmaps written to {out}/: " + ", ".join(p.name for p in paths))
    if not wt.ok:
        console.print("[red]some checks failed[/red]")
        raise typer.Exit(1)


@app.command()
def backends():
    """List the attention backends and what each can do."""
    from attnlab.core import list_backends

    table = Table(title="attention backends", title_justify="left")
    for col in ("name", "kind", "returns", "dropout", "backward", "dtypes"):
        table.add_column(col, no_wrap=True)
    for name, b in list_backends().items():
        c = b.capabilities
        returns = " ".join(["out"] + ["weights"] * c.weights + ["lse"] * c.lse)
        dtypes = "all" if len(c.dtypes) == 4 else " ".join(sorted(
            str(t).replace("torch.", "").replace("float", "f") for t in c.dtypes))
        table.add_row(name, "exact" if c.exact else "approx", returns,
                      "yes" if c.dropout else "-", "yes" if c.backward else "-", dtypes)
    console.print(table)
    for name, b in list_backends().items():
        console.print(f"[bold]{name}[/bold]: {b.description}; masks: "
                      f"{', '.join(sorted(b.capabilities.masks)) or 'none'}")
    console.print("backend='auto' picks the fastest exact backend that can serve a request.")


@app.command("inspect")
def inspect_cmd(
    text: Optional[str] = typer.Argument(None, help="Text to inspect (default: a short sentence)."),
    file: Optional[Path] = typer.Option(None, "--file", help="Corpus: one text per line "
                                        "(a tab separates the two sentences of a pair)."),
    model: str = typer.Option("default", help="'default' (embedded all-MiniLM-L6-v2) or a local "
                              "BERT folder."),
    out: Path = typer.Option(Path("out/inspect"), help="Folder for the report and figures."),
    pair: Optional[str] = typer.Option(None, help="Second sentence of a pair (for TEXT)."),
):
    """Capture, measure and label every attention head; write an offline HTML report."""
    from rich.progress import Progress

    from attnlab.inspect.figures import write_figures
    from attnlab.inspect.report import write_report
    from attnlab.inspect.run import DEFAULT_TEXT, inspect_texts

    if file is not None:
        if text is not None or pair is not None:
            raise UsageError("give either TEXT (with --pair) or --file, not both")
        try:
            lines = [ln for ln in file.read_text(encoding="utf-8").splitlines() if ln.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--file {file}: cannot read it ({exc}); pass a UTF-8 text file") from None
        if not lines:
            raise UsageError(f"--file {file} has no non-empty line; put one text per line")
        texts = [tuple(ln.split("\t", 1)) if "\t" in ln else (ln, None) for ln in lines]
    else:
        texts = [(text or DEFAULT_TEXT, pair)]
    try:
        with Progress(console=console, transient=True, disable=len(texts) < 2) as progress:
            task = progress.add_task("inspecting texts", total=len(texts))
            ins = inspect_texts(texts, model=model,
                                progress=lambda i: progress.update(task, completed=i))
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    figs = write_figures(ins, out)
    settings = {"model": ins.model, "texts": len(texts), "first text": texts[0][0],
                "pair": texts[0][1] or "-", "tokens (first text)": len(ins.tokens),
                "layers x heads": f"{ins.layers} x {ins.heads}"}
    report = write_report(ins, figs, out / "report.html", settings)
    counts = ", ".join(f"{k}: {v}" for k, v in ins.taxonomy.counts().items() if v)
    console.print(f"{ins.layers} layers x {ins.heads} heads on {len(texts)} text(s); {counts}")
    console.print(f"JS distance between heads: same layer {ins.layer_summary['same_layer']:.3f}, "
                  f"across layers {ins.layer_summary['cross_layer']:.3f}")
    for note in ins.notes:
        console.print(note)
    console.print(f"report: {report}  (figures in {out}/, PNG and SVG)")


@app.command()
def bench(
    quick: bool = typer.Option(False, "--quick", help="N = 1024 and 2048 only (about 3 minutes)."),
    n: Optional[list[int]] = typer.Option(None, "--n", help="Sequence length (repeatable)."),
    out: Path = typer.Option(Path("out/bench"), help="Folder for results.json and the plots."),
):
    """Time, memory and error of every backend and approximation against SDPA and FlexAttention."""
    from attnlab import bench as B

    sizes = n or (B.QUICK_SIZES if quick else B.SIZES)
    if any(s < 64 or s > 65536 for s in sizes):
        raise UsageError(f"--n must be between 64 and 65536, got {sizes}")
    result = B.run(sorted(set(sizes)), out, console)
    cells = result["cells"]
    get = {(c["group"], c["method"], c["n"], c["mode"]): c for c in cells}
    for group, methods in B.GROUPS.items():
        table = Table(title=f"{group}: time s / extra peak MiB (B=1, H=8, D=64, fp32)",
                      title_justify="left")
        table.add_column("pass")
        table.add_column("N", justify="right")
        for m in methods:
            table.add_column(m, justify="right")
        for mode in ("fwd", "fwd+bwd"):
            for size in result["sizes"]:
                row = []
                for m in methods:
                    c = get.get((group, m, size, mode))
                    row.append("-" if c is None else "error" if "error" in c
                               else f"{c['time_s']:.3f} / {c['peak_mib']:.0f}")
                table.add_row(mode, str(size), *row)
        console.print(table)
    top = max(result["sizes"])
    lines = []
    for mode in ("fwd", "fwd+bwd"):
        r = B.ratio(cells, "window", top, mode, "sdpa+dense", "blocksparse")
        if r:
            lines.append(f"{mode} at N={top}: SDPA + dense mask takes {r:.1f}x blocksparse's time")
    r = B.ratio(cells, "window", top, "fwd", "flex", "blocksparse")
    if r:
        lines.append(f"fwd at N={top}: compiled FlexAttention takes {r:.2f}x blocksparse's time")
    r = B.ratio(cells, "causal", top, "fwd", "auto", "sdpa-causal")
    if r:
        lines.append(f"auto causal fwd at N={top}: {r:.2f}x SDPA's causal time")
    flex = [c for c in cells if c["method"] == "flex" and "setup_s" in c]
    if flex:
        lines.append("FlexAttention compile + block mask: " + ", ".join(
            f"N={c['n']} {c['setup_s']:.0f} s" for c in flex if c["mode"] == "fwd"))
    for c in cells:
        if "error" in c:
            lines.append(f"{c['group']} {c['method']} N={c['n']} {c['mode']} failed: {c['error']}")
    for line in lines:
        console.print(line)
    console.print(f"results and plots written to {out}/: results.json, "
                  + ", ".join(Path(p).name for p in result["plots"]))


fit_app = typer.Typer(help="Train an applied attention model, evaluate it against baselines, "
                      "and write metrics, figures, the model and its LaTeX equations.",
                      no_args_is_help=True, rich_markup_mode=None)
app.add_typer(fit_app, name="fit")


def _say(text: str) -> None:
    console.print(f"[dim]{text}[/dim]")


def _positive(name: str, value: Optional[int]) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{name} must be a whole number >= 1, got {value}")


@fit_app.command("forecast")
def fit_forecast_cmd(
    csv: Optional[Path] = typer.Option(None, help="CSV with the series (one row per time step)."),
    target: Optional[str] = typer.Option(None, help="Column of --csv to forecast."),
    time: Optional[str] = typer.Option(None, help="Date column of --csv (rows are sorted by it)."),
    exog: Optional[str] = typer.Option(None, help="Comma-separated past-covariate columns."),
    example: Optional[str] = typer.Option(None, help="Bundled series instead of --csv: co2 or "
                                          "sunspots."),
    horizon: Optional[int] = typer.Option(None, help="Steps to forecast (example default: one "
                                          "season)."),
    season: Optional[int] = typer.Option(None, help="Seasonal period, e.g. 12 for monthly data."),
    lookback: Optional[int] = typer.Option(None, help="Past steps the model reads (default 3 "
                                           "seasons, or 24)."),
    encoder: str = typer.Option("gru", help="gru, lstm or transformer."),
    origins: Optional[int] = typer.Option(None, help="Rolling-origin backtest origins."),
    max_epochs: int = typer.Option(300, help="Most training epochs (early stopping decides)."),
    seed: int = typer.Option(0, help="Random seed."),
    out: Path = typer.Option(Path("out/forecast"), help="Folder for the results."),
):
    """Forecast a time series with attention over past steps; backtest against seasonal naive
    and ETS."""
    from attnlab.models import datasets, jobs

    _positive("--horizon", horizon)
    _positive("--season", season)
    _positive("--lookback", lookback)
    _positive("--origins", origins)
    try:
        if example is not None:
            if csv is not None:
                raise UsageError("give either --csv or --example, not both")
            ex = datasets.load_series(example)
            y, X, name = ex.y, None, example
            horizon = horizon or ex.horizon
            season = season or ex.season
            origins = origins or ex.n_origins
        else:
            if csv is None or target is None:
                raise UsageError("give --csv F --target COL (or --example co2|sunspots)")
            cols = [c.strip() for c in exog.split(",") if c.strip()] if exog else None
            y, X = jobs.series_from_csv(csv, target, time, cols)
            name = target
            horizon = horizon or (season or 12)
            origins = origins or 10
        with console.status("fitting (backtest, then the final model)"):
            m = jobs.fit_forecast(y, out, X=X, horizon=horizon, season=season,
                                  n_origins=origins, name=name, say=_say, encoder=encoder,
                                  lookback=lookback, max_epochs=max_epochs, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    table = Table(title=f"{name}: backtest over {origins} origins, horizon {horizon}",
                  title_justify="left")
    for col in ("method", "MAE", "RMSE", "MAPE %", "MASE"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for method, v in sorted(m["backtest"].items(), key=lambda kv: kv[1]["MASE"]):
        table.add_row(method, f"{v['MAE']:.3f}", f"{v['RMSE']:.3f}", f"{v['MAPE']:.2f}",
                      f"{v['MASE']:.3f}")
    console.print(table)
    console.print(f"results written to {out}/: " + ", ".join(Path(p).name for p in m["files"]))


@fit_app.command("tabular")
def fit_tabular_cmd(
    csv: Optional[Path] = typer.Option(None, help="CSV with one row per example."),
    target: Optional[str] = typer.Option(None, help="Column of --csv to predict."),
    example: Optional[str] = typer.Option(None, help="Bundled table instead of --csv: diabetes, "
                                          "breast_cancer or wine."),
    task: str = typer.Option("auto", help="auto, classification or regression."),
    folds: int = typer.Option(5, help="Cross-validation folds."),
    max_epochs: int = typer.Option(200, help="Most training epochs (early stopping decides)."),
    seed: int = typer.Option(0, help="Random seed."),
    out: Path = typer.Option(Path("out/tabular"), help="Folder for the results."),
):
    """Attention over table features (FT-Transformer); cross-validate against linear and
    gradient-boosting baselines."""
    from attnlab.models import datasets, jobs

    _positive("--folds", folds)
    if folds < 2:
        raise UsageError(f"--folds must be at least 2, got {folds}")
    try:
        if example is not None:
            if csv is not None:
                raise UsageError("give either --csv or --example, not both")
            X, y, ex_task = datasets.load_table(example)
            task = ex_task if task == "auto" else task
            name = example
        else:
            if csv is None or target is None:
                raise UsageError("give --csv F --target COL (or --example diabetes|"
                                 "breast_cancer|wine)")
            df = jobs.read_csv(csv)
            jobs._column(df, target, "--target", csv)
            if df[target].isna().any():
                raise UsageError(f"--target column {target!r} has empty cells; drop those rows")
            X, y, name = df.drop(columns=[target]), df[target], target
        with console.status("cross-validating, then fitting the final model"):
            m = jobs.fit_tabular(X, y, out, task=task, folds=folds, name=name, say=_say,
                                 max_epochs=max_epochs, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    table = Table(title=f"{name}: {folds}-fold cross-validated {m['scoring']} ({m['task']})",
                  title_justify="left")
    for col in ("model", "mean", "std"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for label, v in sorted(m["cv"].items(), key=lambda kv: -kv[1]["mean"]):
        table.add_row(label, f"{v['mean']:.4f}", f"{v['std']:.4f}")
    console.print(table)
    console.print(f"results written to {out}/: " + ", ".join(Path(p).name for p in m["files"]))


@fit_app.command("graph")
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
    import json

    from attnlab._files import write_text_atomic
    from attnlab.models import graph as G

    try:
        if example is not None:
            if example != "karate":
                raise UsageError(f"unknown graph example {example!r}; the bundled one is karate")
            if edges is not None:
                raise UsageError("give either --edges or --example, not both")
            with console.status("karate club: 20 seeds of GAT and label propagation"):
                study = G.karate_study(max_epochs=max_epochs)
            g = G.karate()
            mask = np.zeros(g.num_nodes, dtype=bool)
            mask[study["rows"][seed % 20]["train_nodes"]] = True
            metrics = {"example": "karate", **study}
        else:
            if edges is None or labels is None:
                raise UsageError("give --edges E.csv --labels Y.csv [--features X.csv] (or "
                                 "--example karate)")
            g = G.from_csv(edges, features, labels)
            mask = np.array([v is not None for v in g.y])
            metrics = {"nodes": g.num_nodes, "edges": int(g.edge_index.shape[1]),
                       "labelled": int(mask.sum())}
        clf = G.GATClassifier(max_epochs=max_epochs, seed=seed).fit(g, mask)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    metrics["train_accuracy"] = clf.score(mask)
    out.mkdir(parents=True, exist_ok=True)
    pred = clf.predict()
    write_text_atomic(out / "predictions.csv", "node,prediction,labelled\n" + "".join(
        f"{n},{p},{int(m)}\n" for n, p, m in zip(g.names, pred, mask)))
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    figs = [G.plot_graph(clf, out / "graph.png", mask),
            G.plot_attention_matrix(clf, out / "attention.png")]
    write_text_atomic(out / "model.tex", clf.to_latex())
    write_text_atomic(out / "model.md", clf.to_markdown())
    clf.save(out / "model")
    if example is not None:
        console.print(f"karate club, 2 labelled members per faction, 20 seeds: GAT accuracy "
                      f"{metrics['gat_mean']:.3f} ± {metrics['gat_std']:.3f}, label propagation "
                      f"{metrics['lp_mean']:.3f} ± {metrics['lp_std']:.3f} (GAT better on "
                      f"{metrics['gat_wins']}, tied on {metrics['ties']})")
    else:
        console.print(f"{g.num_nodes} nodes, {int(mask.sum())} labelled; training accuracy "
                      f"{metrics['train_accuracy']:.3f}")
    console.print(f"results written to {out}/: predictions.csv, metrics.json, "
                  + ", ".join(Path(p).name for p in figs) + ", model.tex, model.md, model")


demo_app = typer.Typer(help="Small end-to-end demonstrations.", no_args_is_help=True,
                       rich_markup_mode=None)
app.add_typer(demo_app, name="demo")


@demo_app.command("seq2seq")
def demo_seq2seq(
    out: Path = typer.Option(Path("out/seq2seq"), help="Folder for the alignment figures."),
    seed: int = typer.Option(0, help="Random seed."),
    text: str = typer.Option("31415926", help="Digits to reverse for the alignment figure."),
):
    """Train a GRU encoder-decoder with additive attention to reverse digit strings (about a
    minute on CPU) and draw its alignment."""
    import json

    from attnlab._files import write_text_atomic
    from attnlab.models.seq2seq import ReversalSeq2Seq, plot_alignment

    if not text or not text.isdigit() or len(text) > 12:
        raise UsageError(f"--text must be 1 to 12 digits, got {text!r}")
    with console.status("training the reversal seq2seq model"):
        model = ReversalSeq2Seq(seed=seed, verbose=True).fit()
    acc = model.exact_match(1000)
    tr = model.translate([text])[0]
    fig = plot_alignment(tr, out / "alignment.png")
    write_text_atomic(out / "metrics.json", json.dumps(
        {"exact_match": acc, "epochs": model.history_.epochs, "example": text,
         "output": tr.output}, indent=2) + "\n")
    write_text_atomic(out / "model.tex", model.to_latex())
    console.print(f"exact match on 1000 held-out strings: {acc:.1%}; {text} -> {tr.output}")
    console.print(f"results written to {out}/: {fig.name}, metrics.json, model.tex")


@app.command()
def predict(
    model: Path = typer.Option(..., help="Model folder written by `attnlab fit` (its model/)."),
    csv: Optional[Path] = typer.Option(None, help="Rows to predict (tabular), or the series to "
                                       "continue (forecast, with --target)."),
    target: Optional[str] = typer.Option(None, help="Series column (forecast) or a column to "
                                         "ignore (tabular)."),
    time: Optional[str] = typer.Option(None, help="Date column of --csv (forecast)."),
    horizon: Optional[int] = typer.Option(None, help="Steps to forecast (default: as fitted)."),
    out: Path = typer.Option(Path("out/predictions.csv"), help="CSV to write."),
):
    """Predict with a saved model: a forecast, or one prediction per CSV row."""
    from attnlab.models import jobs

    _positive("--horizon", horizon)
    try:
        path, rows = jobs.predict_saved(model, out, csv=csv, target=target, time=time,
                                        horizon=horizon)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    console.print(f"{rows} prediction(s) written to {path}")


def app_help() -> str:
    """The top-level --help text."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        try:
            app(args=["--help"], standalone_mode=False)
        except typer.Exit:
            pass
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    try:
        app(args=argv, standalone_mode=False)
    except UsageError as exc:
        print(f"attnlab: error: {exc}", file=sys.stderr)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("attnlab: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:          # typer's usage errors (unknown option, bad value)
        if type(exc).__name__ == "NoArgsIsHelpError":
            print(app_help(), end="")
            return 0
        print(f"attnlab: error: {exc.format_message()} (see attnlab --help)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
