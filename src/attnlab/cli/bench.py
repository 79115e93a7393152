"""``attnlab bench``: time, memory and error of every method against SDPA and FlexAttention, or
the approximations inside the embedded model (``--model default``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from attnlab.cli.app import UsageError, command, console


@command()
def bench(
    quick: bool = typer.Option(False, "--quick", help="N = 1024 and 2048 only (about 3 minutes)."),
    n: Optional[list[int]] = typer.Option(None, "--n", help="Sequence length (repeatable)."),
    out: Path = typer.Option(Path("out/bench"), help="Folder for results.json and the plots."),
    model: Optional[str] = typer.Option(None, help="'default': instead of random inputs, swap "
                                        "the embedded model's attention for each "
                                        "approximation and measure it on bundled text."),
    pairs: int = typer.Option(32, min=2, max=40, help="With --model: passage pairs of the "
                              "retrieval task."),
    finetune: int = typer.Option(0, min=0, max=5000, help="With --model: also fine-tune the "
                                 "model with each "
                                 "approximation for this many steps (about 0.4 s each) to match "
                                 "the exact embeddings on other passages, and measure again."),
):
    """Time, memory and error of every backend and approximation against SDPA and FlexAttention."""
    from attnlab.bench import cells as B
    from attnlab.plots.bench import save_bench

    if model is not None:
        if model != "default":
            raise UsageError(f"--model takes 'default' (the embedded all-MiniLM-L6-v2), got "
                             f"{model!r}")
        if quick or n:
            raise UsageError("--quick and --n size the random-input benchmark; --model default "
                             "takes --pairs")
        _bench_model(pairs, finetune, out)
        return

    sizes = n or (B.QUICK_SIZES if quick else B.SIZES)
    if any(s < 64 or s > 65536 for s in sizes):
        raise UsageError(f"--n must be between 64 and 65536, got {sizes}")
    result = B.run(sorted(set(sizes)), out, console)
    result["plots"] = [str(p) for p in save_bench(result, out)]
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


def _bench_model(pairs: int, finetune: int, out: Path) -> None:
    import json

    from rich.progress import Progress

    from attnlab._files import write_text_atomic
    from attnlab.bench.model import run

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
