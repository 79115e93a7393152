"""The core commands: ``attnlab explain``, ``backends``, ``inspect`` and ``bench``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from attnlab.cli.app import UsageError, app, console, parse_window, working


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
    heads: bool = typer.Option(False, "--heads", help="Multi-head attention of --layer step by "
                               "step: project, split, every head, concatenate, W_o (checked "
                               "against the layer's output)."),
    additive: bool = typer.Option(False, "--additive", help="Also score the same Q and K with "
                                  "additive (Bahdanau) attention, beside the dot product."),
    no_scale: bool = typer.Option(False, "--no-scale", help="Also show what the 1/sqrt(D_k) "
                                  "scale prevents on these Q and K (score spread, peakedness)."),
):
    """Show every step of attention on real numbers and check the code equals the formula."""
    from attnlab.explain import (additive_walk, example, heads_walk, model_walk, render,
                                 render_additive, render_heads, unscaled_note, walk)
    from attnlab.plots.explain import write_heatmaps

    if plots and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the heatmaps")
    for name, val, lo, hi in (("--n", n, 1, 64), ("--d", d, 1, 64)):
        if val is not None and not lo <= val <= hi:
            raise UsageError(f"{name} must be between {lo} and {hi} (it is printed in full), got {val}")
    if (text is not None or heads) and model is None:
        model = "default"
    if heads:
        try:
            hw = heads_walk("The cat sat on the mat." if text is None else text, model,
                            layer=layer)
        except (ValueError, TypeError, FileNotFoundError) as exc:
            raise UsageError(str(exc)) from None
        render_heads(hw, console)
        if not hw.ok:
            console.print("[red]some checks failed[/red]")
            raise typer.Exit(1)
        return
    try:
        if model is not None:
            if (causal or window is not None or seed is not None or n is not None
                    or d is not None or temperature != 1.0):
                raise UsageError("--causal, --window, --seed, --n, --d and --temperature apply "
                                 "to the built-in example, not to --model (its attention is "
                                 "what it is)")
            wt = model_walk("The cat sat on the mat." if text is None else text, model,
                            layer=layer, head=head)
        else:
            tokens, q, k, v = example(n=n, d=d, seed=seed)
            wt = walk(tokens, q, k, v, causal=causal, window=parse_window(window),
                      temperature=temperature)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    render(wt, console)
    if no_scale:
        console.rule("[bold]what the 1/sqrt(D_k) scale prevents")
        for line in unscaled_note(wt):
            console.print(line)
    if additive:
        aw = additive_walk(wt)
        render_additive(aw, console)
        wt.checks.extend(aw.checks)
    if plots:
        paths = write_heatmaps(wt, out)
        console.print(f"\nheatmaps written to {out}/: " + ", ".join(p.name for p in paths))
    if not wt.ok:
        console.print("[red]some checks failed[/red]")
        raise typer.Exit(1)


@app.command()
def backends():
    """List the attention backends and what each can do."""
    from rich.markup import escape

    from attnlab.core import list_backends

    table = Table(title="attention backends", title_justify="left")
    for col in ("name", "kind", "returns", "also takes"):
        table.add_column(col, no_wrap=col != "also takes")   # narrow consoles wrap the last
    for name, b in list_backends().items():
        c = b.capabilities
        returns = " ".join(["out"] + ["weights"] * c.weights + ["lse"] * c.lse)
        takes = " ".join(f for f, on in (("dropout", c.dropout), ("softcap", c.softcap),
                                         ("gqa", c.gqa), ("score_mod", c.score_mod)) if on)
        table.add_row(name, "exact" if c.exact else "approx", returns, takes or "-")
    console.print(table)
    for name, b in list_backends().items():
        c = b.capabilities
        dtypes = "" if len(c.dtypes) == 4 else "; dtypes: " + " ".join(sorted(
            str(t).replace("torch.", "") for t in c.dtypes))
        why = b.unavailable()
        note = "" if why is None else f"; [yellow]unavailable here[/yellow]: {escape(why)}"
        console.print(f"[bold]{escape(name)}[/bold]: {escape(b.description)}; masks: "
                      f"{', '.join(sorted(c.masks)) or 'none'}{dtypes}{note}")
    console.print("backend='auto' picks the fastest exact backend that can serve a request; "
                  "every backend with a backward pass differentiates all it takes.")


@app.command("inspect")
def inspect_cmd(
    text: Optional[str] = typer.Argument(None, help="Text to inspect (default: a short sentence)."),
    file: Optional[Path] = typer.Option(None, "--file", help="Corpus: one text per line "
                                        "(a tab separates the two sentences of a pair)."),
    model: str = typer.Option("default", help="'default' (embedded all-MiniLM-L6-v2), "
                              "'induction' (embedded causal model; TEXT = token ids 1-63), "
                              "'dates' (embedded encoder-decoder; TEXT = a date), or a local "
                              "Hugging Face folder (BERT, a decoder or an encoder-decoder)."),
    out: Path = typer.Option(Path("out/inspect"), help="Folder for the report (and figures)."),
    pair: Optional[str] = typer.Option(None, help="Second sentence of a pair (for TEXT)."),
    truncate: bool = typer.Option(False, "--truncate", help="Cut texts longer than the model's "
                                  "positions (512) instead of stopping; said in the report."),
    figures: bool = typer.Option(False, "--figures", help="Also write PNG and SVG figures."),
    target: str = typer.Option("norm", help="What gradient relevance explains: norm (of the "
                               "pooled embedding) or similarity (of a pair's two sentences)."),
    start_layer: int = typer.Option(0, help="First layer of rollout, flow and gradient "
                                    "relevance."),
    position: int = typer.Option(0, help="Output position whose attention flow is computed at "
                                 "any length (0 = [CLS])."),
    flow: Optional[bool] = typer.Option(None, "--flow/--no-flow", help="Attention flow into "
                                        "--position at any length (about 50 s at 512 tokens); "
                                        "default: up to 128 tokens."),
):
    """Capture, measure and label every attention head; write an offline HTML report."""
    from rich.progress import Progress

    from attnlab.inspect.run import DEFAULT_TEXT, TextTooLong, inspect_texts

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
        if text is not None and not text.strip():
            raise UsageError("TEXT is empty; give the text to inspect, or leave TEXT out for "
                             "the default sentence")
        if pair is not None and not pair.strip():
            raise UsageError("--pair is empty; give the second sentence or leave --pair out")
        texts = [(text or DEFAULT_TEXT, pair)]
    if target == "similarity" and texts[0][1] is None:
        raise UsageError("--target similarity explains a pair: give --pair (or a tab in the "
                         "first line of --file)")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the report")
    generative = _generative_kind(model)
    if generative is not None:
        if file is not None or pair is not None:
            raise UsageError(f"--model {model} inspects one text: give TEXT, not --file or "
                             "--pair")
        if target != "norm" or start_layer != 0 or position != 0 or flow:
            raise UsageError(f"--target, --start-layer, --position and --flow apply to the "
                             f"encoder models; --model {model} takes none of them")
        from attnlab.inspect import generative as G

        try:
            with working(f"inspecting with {model}"):
                ins = (G.inspect_induction(text) if generative == "induction"
                       else G.inspect_dates(text) if generative == "dates"
                       else G.inspect_hf(Path(model), text or DEFAULT_TEXT))
        except (ValueError, FileNotFoundError) as exc:
            raise UsageError(str(exc)) from None
        settings = {"model": ins.model, "text": ins.texts[0][0],
                    "tokens": len(ins.tokens),
                    "layers x heads": f"{ins.layers} x {ins.heads}",
                    "captures": ", ".join(c.kind for c in ins.captures)}
        _finish(ins, out, settings, figures, len(ins.texts))
        return
    try:
        with Progress(console=console, transient=True, disable=len(texts) < 2) as progress:
            task = progress.add_task("inspecting texts", total=len(texts))
            ins = inspect_texts(texts, model=model,
                                progress=lambda i: progress.update(task, completed=i),
                                truncate=truncate, target=target, start_layer=start_layer,
                                position=position, flow_mode=flow)
    except TextTooLong as exc:
        raise UsageError(f"text {exc.index + 1} has {exc.tokens} tokens, more than the "
                         f"{exc.limit} positions of the model; shorten it or pass --truncate "
                         f"to cut it to {exc.limit}") from None
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    settings = {"model": ins.model, "texts": len(texts), "first text": texts[0][0],
                "pair": texts[0][1] or "-", "tokens (first text)": len(ins.tokens),
                "layers x heads": f"{ins.layers} x {ins.heads}",
                "gradient target": target, "start layer": start_layer,
                "flow position": f"{position} ({ins.tokens[position]})",
                "truncate": "yes" if truncate else "no"}
    _finish(ins, out, settings, figures, len(texts))


def _bench_model(pairs: int, finetune: int, out: Path) -> None:
    import json

    from rich.progress import Progress

    from attnlab._files import write_text_atomic
    from attnlab.bench_model import run

    if not 2 <= pairs <= 40:
        raise UsageError(f"--pairs must be between 2 and 40 (pairs of 6-sentence passages from "
                         f"the bundled corpus), got {pairs}")
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("approximations on all-MiniLM-L6-v2", total=None)
        res = run(pairs, finetune=finetune,
                  progress=lambda i, n: progress.update(task, completed=i, total=n))
    table = Table(title=f"all-MiniLM-L6-v2, attention swapped at inference: {res['texts']} "
                        f"passages of {res['tokens']['min']}-{res['tokens']['max']} tokens",
                  title_justify="left")
    for col in ("method", "rel. error per layer (1..6)", "embedding cosine mean / min",
                "rank Spearman", "top-1 agree", "recall@1"):
        table.add_column(col, overflow="fold")
    table.add_row("exact", "-", "1 / 1", "1", "1", f"{res['exact']['recall@1']:.2f}")
    for m, d in res["methods"].items():
        for label, row in ((m, d), (f"{m}, fine-tuned", d.get("finetuned"))):
            if row is not None:
                table.add_row(label, " ".join(f"{x:.2f}" for x in row["layer_rel_error"]),
                              f"{row['cosine_mean']:.3f} / {row['cosine_min']:.3f}",
                              f"{row['rank_spearman']:.3f}", f"{row['top1_agreement']:.2f}",
                              f"{row['recall@1']:.2f}")
    console.print(table)
    path = write_text_atomic(out / "approx_model.json", json.dumps(res, indent=1) + "\n")
    console.print(f"results written to {path}")


def _generative_kind(model: str) -> str | None:
    """``induction`` / ``dates`` / ``hf`` for the models the generative job inspects, None for
    the BERT-style encoders of the main job."""
    if model in ("induction", "dates"):
        return model
    config = Path(model) / "config.json"
    if model != "default" and config.is_file():
        import json

        try:
            cfg = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"--model {model}: {config} is not valid JSON ({exc}); restore "
                             "the checkpoint's config.json") from None
        if cfg.get("model_type") not in (None, "bert"):
            return "hf"
    return None


def _finish(ins, out: Path, settings: dict, figures: bool, n_texts: int) -> None:
    from attnlab.inspect.report import write_report

    report = write_report(ins, out / "report.html", settings)
    counts = ", ".join(f"{k}: {v}" for k, v in ins.taxonomy.counts().items() if v)
    console.print(f"{ins.layers} layers x {ins.heads} heads on {n_texts} text(s); {counts}")
    console.print(f"JS distance between heads: same layer {ins.layer_summary['same_layer']:.3f}, "
                  f"across layers {ins.layer_summary['cross_layer']:.3f}")
    for note in ins.notes:
        console.print(note)
    if figures:
        from attnlab.plots.inspect import write_figures

        write_figures(ins, out)
        console.print(f"report: {report}  (figures in {out}/, PNG and SVG)")
    else:
        console.print(f"report: {report}  (--figures also writes PNG and SVG)")


@app.command()
def bench(
    quick: bool = typer.Option(False, "--quick", help="N = 1024 and 2048 only (about 3 minutes)."),
    n: Optional[list[int]] = typer.Option(None, "--n", help="Sequence length (repeatable)."),
    out: Path = typer.Option(Path("out/bench"), help="Folder for results.json and the plots."),
    model: Optional[str] = typer.Option(None, help="'default': instead of random inputs, swap "
                                        "the embedded model's attention for each "
                                        "approximation and measure it on bundled text."),
    pairs: int = typer.Option(32, help="With --model: passage pairs of the retrieval task."),
    finetune: int = typer.Option(0, help="With --model: also fine-tune the model with each "
                                 "approximation for this many steps (about 0.4 s each) to match "
                                 "the exact embeddings on other passages, and measure again."),
):
    """Time, memory and error of every backend and approximation against SDPA and FlexAttention."""
    from attnlab import bench as B
    from attnlab.plots.bench import plot

    if model is not None:
        if model != "default":
            raise UsageError(f"--model takes 'default' (the embedded all-MiniLM-L6-v2), got "
                             f"{model!r}")
        if quick or n:
            raise UsageError("--quick and --n size the random-input benchmark; --model default "
                             "takes --pairs")
        if not 0 <= finetune <= 5000:
            raise UsageError(f"--finetune must be between 0 and 5000 steps, got {finetune}")
        _bench_model(pairs, finetune, out)
        return

    sizes = n or (B.QUICK_SIZES if quick else B.SIZES)
    if any(s < 64 or s > 65536 for s in sizes):
        raise UsageError(f"--n must be between 64 and 65536, got {sizes}")
    result = B.run(sorted(set(sizes)), out, console)
    result["plots"] = [str(p) for p in plot(result, out)]
    cells = result["cells"]
    get = {(c["group"], c["method"], c["n"], c["mode"]): c for c in cells}
    # As many method columns per table as the terminal holds (80 in a pipe): cells are never
    # wrapped or cut, a wide group is printed as several tables.
    per_table = max(1, (console.width - 18) // 17)
    for group, methods in B.GROUPS.items():
        for start in range(0, len(methods), per_table):
            chunk = methods[start:start + per_table]
            part = "" if len(methods) <= per_table else \
                f" ({start // per_table + 1}/{-(-len(methods) // per_table)})"
            table = Table(title=f"{group}{part}: time s / extra peak MiB (B=1, H=8, D=64, "
                                "fp32)", title_justify="left")
            table.add_column("pass", no_wrap=True)
            table.add_column("N", justify="right", no_wrap=True)
            for m in chunk:
                table.add_column(m, justify="right", no_wrap=True)
            for mode in ("fwd", "fwd+bwd"):
                for size in result["sizes"]:
                    row = []
                    for m in chunk:
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


@app.command()
def check(
    target: str = typer.Argument(..., help="package.module:function to check (or a backend "
                                 "name registered in attnlab)."),
    supports: str = typer.Option("", help="Comma-separated features the function takes: "
                                 "causal, window, mask, float_mask, dropout, lse, gqa, softcap, "
                                 "sinks, scale."),
    dtypes: str = typer.Option("float64,float32,bfloat16", help="Comma-separated precisions."),
):
    """Run an attention function through attnlab's conformance cases; exit 1 if one fails."""
    import importlib

    import torch

    from attnlab.core.registry import list_backends
    from attnlab.testing import FEATURES, check_attention, check_backend

    wanted = [d.strip() for d in dtypes.split(",") if d.strip()]
    bad = [d for d in wanted if d not in ("float64", "float32", "bfloat16", "float16")]
    if bad or not wanted:
        raise UsageError(f"--dtypes takes float64, float32, bfloat16 or float16, got {dtypes!r}")
    chosen = [getattr(torch, d) for d in wanted]
    feats = {f.strip() for f in supports.split(",") if f.strip()}
    unknown = feats - set(FEATURES)
    if unknown:
        raise UsageError(f"--supports: unknown feature(s) {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(FEATURES)}")
    if ":" not in target:
        if target not in list_backends():
            raise UsageError(f"{target!r} is neither package.module:function nor a registered "
                             f"backend ({', '.join(list_backends())})")
        report = check_backend(target, dtypes=chosen)
    else:
        mod_name, _, fn_name = target.partition(":")
        try:
            fn = getattr(importlib.import_module(mod_name), fn_name)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot import {target}: {exc}; give package.module:function "
                             "importable from here") from None
        report = check_attention(fn, supports=feats, dtypes=chosen, name=target)
    console.print(report.table())
    if not report.passed:
        raise typer.Exit(1)
