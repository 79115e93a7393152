"""``attnlab demo seq2seq``: a small end-to-end demonstration (reversal with additive attention)."""

from __future__ import annotations

from pathlib import Path

import typer

from attnlab.cli.app import UsageError, app, command, console, working

demo_app = typer.Typer(help="Small end-to-end demonstrations.", no_args_is_help=True,
                       rich_markup_mode=None)
app.add_typer(demo_app, name="demo")


@command("seq2seq", on=demo_app)
def demo_seq2seq(
    out: Path = typer.Option(Path("out/seq2seq"), help="Folder for the alignment figures."),
    seed: int = typer.Option(0, help="Random seed."),
    text: str = typer.Option("31415926", help="Digits to reverse for the alignment figure."),
):
    """Train a GRU encoder-decoder with additive attention to reverse digit strings (about a
    minute on CPU) and draw its alignment."""
    import json

    from attnlab._files import write_text_atomic
    from attnlab.models.seq2seq import ReversalSeq2Seq
    from attnlab.plots.seq2seq import save_alignment

    if not text or not text.isdigit() or len(text) > 12:
        raise UsageError(f"--text must be 1 to 12 digits, got {text!r}")
    with working("training the reversal seq2seq model"):
        model = ReversalSeq2Seq(seed=seed, verbose=True).fit()
    acc = model.exact_match(1000)
    tr = model.translate([text])[0]
    fig = save_alignment(tr, out / "alignment.png")
    write_text_atomic(out / "metrics.json", json.dumps(
        {"exact_match": acc, "epochs": model.history_.epochs, "example": text,
         "output": tr.output}, indent=2) + "\n")
    write_text_atomic(out / "model.tex", model.to_latex())
    console.print(f"exact match on 1000 held-out strings: {acc:.1%}; {text} -> {tr.output}")
    console.print(f"results written to {out}/: {fig.name}, metrics.json, model.tex")
