"""``attnlab diagnose``: the attention health of a model on a text, and the short experiments."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from attnlab.cli.app import UsageError, command, console


def _layer_table(diag, title: str) -> Table:
    import os
    names = [row["layer"] for row in diag.per_layer()]
    prefix = os.path.commonprefix(names) if len(names) > 1 else ""
    prefix = prefix[: prefix.rfind(".") + 1]
    table = Table(title=title + (f" (layers under {prefix})" if prefix else ""))
    table.add_column("layer", no_wrap=True)
    for col in ("score std", "predicted", "max score", "saturated", "H / ln n", "‖J‖", "sink"):
        table.add_column(col, justify="right")
    table.caption = ("predicted: the std 1/√d_k gives unit-variance q, k; saturated: rows with a "
                     "weight > 0.99; H / ln n: entropy over its maximum; ‖J‖: the softmax "
                     "Jacobian's norm (gradient it passes); sink: weight on the first token")
    for row in diag.per_layer():
        table.add_row(row["layer"][len(prefix):], f"{row['score_std']:.2f}",
                      f"{row['predicted_std']:.2f}",
                      f"{row['score_max']:.1f}", f"{row['saturation']:.0%}",
                      f"{row['entropy_ratio']:.2f}", f"{row['jacobian_norm']:.3f}",
                      f"{row['sink_mass']:.2f}")
    return table


@command()
def diagnose(
    text: Optional[str] = typer.Argument(None, help="Text to run the model on (default: a "
                                         "short sentence)."),
    model: str = typer.Option("default", help="'default' (embedded all-MiniLM-L6-v2) or a "
                              "local BERT folder."),
    demo: bool = typer.Option(False, "--demo", help="Also run the short experiments: why "
                              "1/sqrt(d_k), temperature, a model trained with and without the "
                              "scale (about 15 s)."),
    out: Optional[Path] = typer.Option(None, help="Folder for the demo's figure."),
):
    """Score scale, saturation, entropy, softmax gradient and sinks of every attention layer."""
    import torch

    from attnlab.diagnose import AT_INFERENCE, THRESHOLDS, score_alarms
    from attnlab.diagnose import diagnose as run_diagnosis

    if text is not None and not text.strip():
        raise UsageError("TEXT is empty; give a text, or leave it out for the default sentence")
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the figure")
    from attnlab.nn.bert import BertModel, resolve_model_path
    from attnlab.nn.tokenizer import light_tokenizer
    path = resolve_model_path(model)
    net = BertModel.from_pretrained(path).eval()
    tok = light_tokenizer(path)
    sentence = text or "The animal didn't cross the street because it was too tired."
    batch = tok([sentence], return_tensors="pt", truncation=False)
    n = batch["input_ids"].shape[1]
    limit = net.config.max_position_embeddings
    if n > limit:
        raise UsageError(f"TEXT has {n} tokens but the model takes at most {limit}; shorten it")
    with torch.no_grad():
        diag = run_diagnosis(net, batch["input_ids"], batch["attention_mask"])
    console.print(_layer_table(diag, f"attention health of {model} on {n} tokens"))
    flagged = score_alarms(diag.per_layer())
    for name, layer, value in flagged:          # a trained model at inference: what it means
        console.print(f"[yellow]{layer}: {name}[/yellow] ({value:.3g}): {AT_INFERENCE[name]}")
    if not flagged:
        console.print("no layer crosses an alarm threshold "
                      f"(score max > {THRESHOLDS['score_max']:g}, saturated rows > "
                      f"{THRESHOLDS['saturation']:.0%}, entropy/ln n < "
                      f"{THRESHOLDS['entropy_ratio']:g}, softmax gradient < "
                      f"{THRESHOLDS['jacobian_norm']:g})")
    if demo:
        _demo(out)


def _demo(out: Optional[Path]) -> None:
    import math

    from rich.progress import Progress

    from attnlab.diagnose import experiments as E

    sweep = E.scale_sweep(dims=(8, 32, 128, 512, 1024))
    table = Table(title="why 1/√d_k: unit-variance q, k, 128 keys")
    for col in ("d_k", "score std (no scale)", "with 1/√d_k", "saturated (no scale)",
                "with 1/√d_k", "‖J‖ (no scale)", "with 1/√d_k"):
        table.add_column(col, justify="right")
    for i, d in enumerate(sweep["d_k"]):
        table.add_row(str(d), f"{sweep['std_unscaled'][i]:.1f}", f"{sweep['std_scaled'][i]:.2f}",
                      f"{sweep['saturation_unscaled'][i]:.0%}",
                      f"{sweep['saturation_scaled'][i]:.0%}",
                      f"{sweep['jacobian_unscaled'][i]:.3f}", f"{sweep['jacobian_scaled'][i]:.3f}")
    console.print(table)
    temps = E.temperature_sweep(dims=(64,))["rows"]
    console.print("temperature at d_k = 64, q and k of std 2: " + "; ".join(
        f"T={r['T']:g}: entropy/ln n {r['entropy_ratio']:.2f}, saturated {r['saturation']:.0%}"
        for r in temps))
    d, steps = 256, 100
    curves = {"d_k": d}
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("training with and without the scale", total=2 * steps)
        for tag, t in (("scaled", 1.0), ("unscaled", 1 / math.sqrt(d))):
            curves[tag] = E.train_recall(d_model=d, heads=1, n=64, lr=3e-3, steps=steps,
                                         temperature=t, progress=lambda: bar.advance(task))
    for tag in ("scaled", "unscaled"):
        loss = curves[tag]["loss"]
        tail = sum(loss[-10:]) / 10
        console.print(f"d_k = {d}, {tag:8s}: loss at steps 0 / 25 / 50: {loss[0]:.2f} / "
                      f"{loss[25]:.2f} / {loss[50]:.2f}, last 10 steps {tail:.3f}; largest "
                      f"logit {max(curves[tag]['max_logit']):.0f}")
    console.print("Adam at lr 3e-3: the unscaled logits grow past 1e3 and the run ends with a "
                  "far higher loss (3 seeds and d_k = 512: docs/diagnostics.md)")
    if out is not None:
        from attnlab.plots.diagnose import save_why_sqrt_d
        out.mkdir(parents=True, exist_ok=True)
        save_why_sqrt_d(sweep, curves, out / "why_sqrt_d.png")
        console.print(f"figure written to {out / 'why_sqrt_d.png'}")
