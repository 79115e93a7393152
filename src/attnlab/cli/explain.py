"""``attnlab explain``: every step of attention on real numbers, printed; the numbers and
checks come from :mod:`attnlab.explain`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnlab.cli.app import UsageError, command, console, parse_window


@command()
def explain(
    seed: Optional[int] = typer.Option(None, help="Random example with this seed (default: the "
                                       "built-in sentence)."),
    n: Optional[int] = typer.Option(None, min=1, max=64, help="Number of tokens of a random "
                                    "example (printed in full: at most 64)."),
    d: Optional[int] = typer.Option(None, min=1, max=64, help="Head dimension D_k of a random "
                                    "example."),
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
    from attnlab.explain import additive_walk, example, heads_walk, model_walk, unscaled_note, walk
    from attnlab.plots.explain import save_heatmaps

    if plots and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the heatmaps")
    if (text is not None or heads) and model is None:
        model = "default"
    if heads:
        hw = heads_walk("The cat sat on the mat." if text is None else text, model,
                        layer=layer)
        render_heads(hw, console)
        if not hw.ok:
            console.print("[red]some checks failed[/red]")
            raise typer.Exit(1)
        return
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
        paths = save_heatmaps(wt, out)
        console.print(f"\nheatmaps written to {out}/: " + ", ".join(p.name for p in paths))
    if not wt.ok:
        console.print("[red]some checks failed[/red]")
        raise typer.Exit(1)


def _cell(x: float) -> str:
    return "-inf" if x == float("-inf") else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3f}"


def _show(console: Console, caption: str, m: torch.Tensor, rows: list[str],
          cols: list[str]) -> None:
    """A caption line, then the matrix with token labels (labels are user text: escaped).

    Every number is printed whole: where the columns do not fit the console's width (80 in a
    pipe), the matrix is printed in blocks of columns, as numpy does, never with cells cut
    to an ellipsis."""
    console.print()
    console.print(escape(caption), style="bold")
    cells = [[_cell(x) for x in row] for row in m.tolist()]
    label_w = max((len(r) for r in rows), default=1)
    widths = [max(len(c), *(len(r[j]) for r in cells)) if cells else len(c)
              for j, c in enumerate(cols)]
    room = max(console.width - label_w - 2, 8)
    blocks, start, used = [], 0, 0
    for j, w in enumerate(widths):
        if j > start and used + w + 2 > room:
            blocks.append((start, j))
            start, used = j, 0
        used += w + 2
    blocks.append((start, len(cols)))
    for a, b in blocks:
        if len(blocks) > 1:
            console.print(f"[dim]columns {a}-{b - 1} of {len(cols)}[/dim]")
        table = Table(show_edge=False, pad_edge=False, box=box.SIMPLE_HEAD, collapse_padding=True)
        table.add_column("", no_wrap=True)
        for c in cols[a:b]:
            table.add_column(escape(c), justify="right", no_wrap=True)
        for label, row in zip(rows, cells):
            table.add_row(escape(label), *(f"[dim]{x}[/dim]" if x == "-inf" else x
                                           for x in row[a:b]))
        console.print(table)


def render(wt, console: Console, max_dims: int = 8) -> None:
    """Print every step with its formula and the checks. Matrices over the head dim show
    their first ``max_dims`` columns."""
    n, d = wt.q.shape
    shown = min(d, max_dims)
    dims = [f"d{j}" for j in range(shown)]
    more = f", first {shown} of {d} dims shown" if shown < d else ""
    keys = wt.tokens
    mask_desc = []
    if wt.causal:
        mask_desc.append("causal")
    if wt.window is not None:
        mask_desc.append(f"window (left={wt.window[0]}, right={wt.window[1]})")
    console.rule("[bold]attention, step by step")
    console.print(escape(f"source: {wt.source}"))
    console.print(f"N = {n} tokens, D_k = {d}, scale = 1/sqrt({d}) = {wt.scale:.4f}, "
                  f"temperature = {wt.temperature:g}, mask: {', '.join(mask_desc) or 'none'}")
    console.print("Each token has a query (what it looks for), a key (what it offers) and a value "
                  "(what it passes on).")
    for name, m in (("Q", wt.q), ("K", wt.k), ("V", wt.v)):
        _show(console, f"{name} ({n} x {d}{more})", m[:, :shown], wt.tokens, dims)
    _show(console, "1. S = Q K^T: S[i, j] is the dot product of query i and key j", wt.s,
          wt.tokens, keys)
    _show(console, "2. S * scale / T, then -inf where query i may not attend key j "
          "(scale = 1/sqrt(D_k) keeps the variance of a score near 1 whatever D_k is)",
          wt.scaled, wt.tokens, keys)
    _show(console, "3. A = softmax of each row: exp(s - max) / sum exp(s - max); each row is a "
          "probability distribution over the keys", wt.a, wt.tokens, keys)
    _show(console, f"4. O = A V: each output row is a weighted average of the value rows{more}",
          wt.o[:, :shown], wt.tokens, dims)
    console.print()
    console.rule("[bold]checks (float64)")
    for c in wt.checks:
        mark = "[green]PASS[/green]" if c.passed else "[red]FAIL[/red]"
        console.print(f"{mark}  {escape(c.name)}  [dim]({escape(c.detail)})[/dim]")
    for name, line in wt.backends.items():
        console.print(f"[yellow]NOTE[/yellow]  backend {name}: {escape(line)}")




def render_heads(hw, console: Console) -> None:
    """Print a :class:`~attnlab.explain.HeadsWalk`: project, split, every head, concatenate, W_o,
    and the checks."""
    n, e = hw.x.shape
    h = len(hw.heads)
    dh = e // h
    console.rule("[bold]multi-head attention, step by step")
    console.print(escape(f"source: {hw.source}"))
    console.print(f"N = {n} tokens, E = {e}, H = {h} heads of D_h = E / H = {dh}")
    console.print(f"1. project: Q = X W_q^T + b_q, K = X W_k^T + b_k, V = X W_v^T + b_v, each "
                  f"({n} x {e}); X is the layer's input")
    console.print(f"2. split: columns h*{dh} .. (h+1)*{dh} - 1 of Q, K, V are head h's "
                  f"({n} x {dh}) query, key and value matrices")
    console.print(f"3. each head: A_h = softmax(Q_h K_h^T / sqrt({dh})), O_h = A_h V_h; "
                  "head 0 in full:")
    w0 = hw.heads[0]
    _show(console, f"A_0 ({n} x {n})", w0.a, hw.tokens, hw.tokens)
    console.print("   what each head's queries attend to most (row argmax of A_h):")
    table = Table(show_header=True, header_style="bold")
    table.add_column("query")
    for hh in range(h):
        table.add_column(f"h{hh}", justify="center")
    for i, t in enumerate(hw.tokens):
        table.add_row(escape(t), *[escape(hw.tokens[int(wt.a[i].argmax())]) for wt in hw.heads])
    console.print(table)
    console.print(f"4. concatenate: [O_0 | O_1 | ... | O_{h - 1}] ({n} x {e})")
    console.print(f"5. output projection: concat W_o^T + b_o ({n} x {e}), what the layer adds "
                  "to its residual stream")
    console.rule("[bold]checks (float64)")
    for c in hw.checks + [c for wt in hw.heads[:1] for c in wt.checks]:
        mark = "[green]PASS[/green]" if c.passed else "[red]FAIL[/red]"
        console.print(f"{mark}  {escape(c.name)}  [dim]({escape(c.detail)})[/dim]")
    failed = sum(not c.passed for wt in hw.heads for c in wt.checks)
    console.print(f"{'[green]PASS[/green]' if not failed else '[red]FAIL[/red]'}  every head's "
                  f"steps checked against the library  [dim]({h} heads, {failed} failures)[/dim]")




def render_additive(aw, console: Console) -> None:
    """Print an :class:`~attnlab.explain.AdditiveWalk`: additive scores and weights beside the
    dot product's."""
    console.rule("[bold]additive (Bahdanau) scoring on the same Q and K")
    console.print("s_ij = v^T tanh(W_q q_i + W_k k_j + b): a one-layer network scores each pair "
                  "(weights drawn at random here, as before training); the dot product scores it "
                  "by q_i . k_j / sqrt(D_k) with no parameters of its own.")
    _show(console, "additive scores s_ij", aw.scores, aw.tokens, aw.tokens)
    _show(console, "A = softmax of each row (additive)", aw.a, aw.tokens, aw.tokens)
    _show(console, "A (scaled dot product, step 3 above)", aw.dot.a, aw.tokens, aw.tokens)
    for c in aw.checks:
        mark = "[green]PASS[/green]" if c.passed else "[red]FAIL[/red]"
        console.print(f"{mark}  {escape(c.name)}  [dim]({escape(c.detail)})[/dim]")
