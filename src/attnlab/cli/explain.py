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
                                  "scale prevents: on these Q and K, and at D_k = 256 where "
                                  "the unscaled softmax saturates."),
    verbose: bool = typer.Option(False, "--verbose", help="Also print notes (backends not "
                                 "compared, and why)."),
):
    """Show every step of attention on real numbers and check the code equals the formula."""
    from attnlab.explain import (
        additive_walk,
        heads_walk,
        inputs_for,
        model_walk,
        saturation,
        unscaled_note,
        walk,
    )
    from attnlab.plots.explain import save_heatmaps

    if plots and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the heatmaps")
    if (text is not None or heads) and model is None:
        model = "default"
    if heads:
        hw = heads_walk("The cat sat on the mat." if text is None else text, model,
                        layer=layer)
        render_heads(hw, console, verbose=verbose)
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
        ex = inputs_for(n=n, d=d, seed=seed)
        wt = walk(ex.tokens, ex.q, ex.k, ex.v, causal=causal, window=parse_window(window),
                  temperature=temperature, inputs=ex)
    render(wt, console, verbose=verbose)
    if no_scale:
        console.rule("[bold]what the 1/sqrt(D_k) scale prevents")
        console.print(f"On these Q and K (D_k = {wt.q.shape[1]}):")
        for line in unscaled_note(wt):
            console.print("  " + line)
        render_saturation(saturation(), console)
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


def _show(console: Console, caption: str, m: torch.Tensor | list, rows: list[str],
          cols: list[str]) -> None:
    """A caption line, then the matrix with token labels (labels are user text: escaped).

    Every number is printed whole: where the columns do not fit the console's width (80 in a
    pipe), the matrix is printed in blocks of columns, as numpy does, never with cells cut
    to an ellipsis."""
    console.print()
    console.print(escape(caption), style="bold")
    cells = m if isinstance(m, list) else [[_cell(x) for x in row] for row in m.tolist()]
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
            table.add_row(escape(label), *(f"[dim]{x}[/dim]" if x == "-inf" else escape(x)
                                           for x in row[a:b]))
        console.print(table)


def _column(console: Console, caption: str, named: dict, rows: list[str]) -> None:
    """Per-row numbers side by side (one column each)."""
    cols = list(named)
    _show(console, caption, torch.stack([named[c] for c in cols], dim=1), rows, cols)


def _checks(console: Console, checks, notes: dict | None = None, verbose: bool = False) -> None:
    console.rule("[bold]checks (float64)")
    for c in checks:
        mark = "[green]PASS[/green]" if c.passed else "[red]FAIL[/red]"
        console.print(f"{mark}  {escape(c.name)}  [dim]({escape(c.detail)})[/dim]")
    notes = notes or {}
    if verbose:
        for name, line in notes.items():
            console.print(f"[yellow]NOTE[/yellow]  {escape(name)}: {escape(line)}")


def render(wt, console: Console, max_dims: int = 8, verbose: bool = False) -> None:
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
    ex = wt.inputs
    if ex is not None:
        dm = ex.x.shape[1]
        console.print("Each token is a vector x_i; three learned projections turn it into a "
                      "query (what it looks for), a key (what it offers) and a value (what it "
                      "passes on).")
        _show(console, f"0. X ({n} x {dm}), one row per token", ex.x, wt.tokens,
              [f"x{j}" for j in range(dm)])
        for name, m in (("W_Q", ex.w_q), ("W_K", ex.w_k), ("W_V", ex.w_v)):
            _show(console, f"{name} ({dm} x {d})", m, [f"x{j}" for j in range(dm)],
                  [f"d{j}" for j in range(d)])
        for name, m in (("Q = X W_Q", wt.q), ("K = X W_K", wt.k), ("V = X W_V", wt.v)):
            _show(console, f"{name} ({n} x {d}{more})", m[:, :shown], wt.tokens, dims)
    else:
        console.print("Each token has a query (what it looks for), a key (what it offers) and "
                      "a value (what it passes on).")
        for name, m in (("Q", wt.q), ("K", wt.k), ("V", wt.v)):
            _show(console, f"{name} ({n} x {d}{more})", m[:, :shown], wt.tokens, dims)
    _show(console, "1. S = Q K^T: S[i, j] is the dot product of query i and key j", wt.s,
          wt.tokens, keys)
    unmasked = wt.unmasked if wt.unmasked is not None else wt.scaled
    _show(console, f"2. S * scale / T = S * {wt.scale:.4f} / {wt.temperature:g} (the scale keeps "
          "a score's variance near 1 whatever D_k is)", unmasked, wt.tokens, keys)
    if bool((~wt.keep).any()):
        _show(console, "3. masked: -inf where query i may not attend key j "
              f"({', '.join(mask_desc)})", wt.scaled, wt.tokens, keys)
    else:
        console.print()
        console.print("3. masked: no mask, the scores are unchanged", style="bold")
    if wt.row_max is not None:
        console.print()
        console.print("4. softmax of each row, in its steps:", style="bold")
        _show(console, "4a. E = exp(s - m): m is the row's largest score, so no exponential "
              "overflows and the largest is exactly 1 (0 where masked)", wt.exps, wt.tokens, keys)
        _column(console, "4b. per row: m = row max, l = sum of E's row, lse = m + log l "
                "(log-sum-exp of the row)", {"m": wt.row_max, "l": wt.row_sum, "lse": wt.lse},
                wt.tokens)
        _show(console, "4c. A = E / l: each row is a probability distribution over the keys",
              wt.a, wt.tokens, keys)
    else:
        _show(console, "4. A = softmax of each row: exp(s - max) / sum exp(s - max)", wt.a,
              wt.tokens, keys)
    _show(console, f"5. O = A V: each output row is a weighted average of the value rows{more}",
          wt.o[:, :shown], wt.tokens, dims)
    console.print()
    _checks(console, wt.checks, {f"backend {k}": v for k, v in wt.backends.items()}, verbose)


def render_saturation(sat, console: Console) -> None:
    """The scaled and unscaled softmax at a D_k where the unscaled one saturates."""
    console.print()
    console.print(f"At D_k = {sat.d_k} (random q, k with unit-variance entries, N = {sat.n}): "
                  f"q . k has standard deviation sqrt({sat.d_k}) = {sat.d_k ** 0.5:.0f}.")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for c in ("", "score std", "largest weight", "entropy (nats)", "uniform",
              "||softmax Jacobian||"):
        table.add_column(c, justify="right" if c else "left", no_wrap=True)
    for tag, std, peak, ent, uniform, jac in sat.rows:
        table.add_row(tag, f"{std:.2f}", f"{peak:.3f}", f"{ent:.3f}", f"{uniform:.3f}",
                      f"{jac:.3f}")
    console.print(table)
    (_, _, peak_s, _, _, jac_s), (_, _, peak_u, _, _, jac_u) = sat.rows
    console.print(f"Unscaled, a row puts {peak_u:.0%} of its weight on one key and the softmax's "
                  f"Jacobian is {jac_u / jac_s:.2f}x the scaled one's: the gradient that reaches "
                  "Q and K through the weights is that much smaller (saturation).")


def render_heads(hw, console: Console, verbose: bool = False, max_dims: int = 8) -> None:
    """Print a :class:`~attnlab.explain.HeadsWalk` with its numbers: project, split, every
    head, concatenate, W_o, and the checks (wide matrices: their first ``max_dims`` columns)."""
    n, e = hw.x.shape
    h = len(hw.heads)
    dh = e // h
    c = min(max_dims, dh)
    toks = hw.tokens
    cols = [f"c{j}" for j in range(c)]
    console.rule("[bold]multi-head attention, step by step")
    console.print(escape(f"source: {hw.source}"))
    console.print(f"N = {n} tokens, E = {e}, H = {h} heads of D_h = E / H = {dh}; matrices "
                  f"wider than {c} columns show their first {c}")
    _show(console, f"X ({n} x {e}), the layer's input (hidden states)", hw.x[:, :c], toks, cols)
    console.print()
    console.print(f"1. project: Q = X W_q^T + b_q, K = X W_k^T + b_k, V = X W_v^T + b_v, each "
                  f"({n} x {e})", style="bold")
    for name, m in (("Q", hw.q), ("K", hw.k), ("V", hw.v)):
        _show(console, f"{name} ({n} x {e})", m[:, :c], toks, cols)
    console.print()
    console.print(f"2. split: columns h*{dh} .. (h+1)*{dh} - 1 of Q, K, V are head h's "
                  f"({n} x {dh}) matrices", style="bold")
    for hh in (0, 1):
        lo = hh * dh
        _show(console, f"Q_{hh} = Q[:, {lo}:{lo + dh}] ({n} x {dh})", hw.q[:, lo:lo + c], toks,
              [f"c{lo + j}" for j in range(c)])
    console.print()
    console.print(f"3. each head: A_h = softmax(Q_h K_h^T / sqrt({dh})), O_h = A_h V_h",
                  style="bold")
    for hh, wt in enumerate(hw.heads):
        _show(console, f"A_{hh} ({n} x {n})", wt.a, toks, toks)
    _show(console, f"O_0 = A_0 V_0 ({n} x {dh})", hw.heads[0].o[:, :c], toks, cols)
    _show(console, "what each head's queries attend to most (row argmax of A_h)",
          [[toks[int(wt.a[i].argmax())] for wt in hw.heads] for i in range(n)], toks,
          [f"h{hh}" for hh in range(h)])
    console.print()
    console.print(f"4. concatenate: [O_0 | O_1 | ... | O_{h - 1}] ({n} x {e})", style="bold")
    edge = [dh - 2, dh - 1, dh, dh + 1]
    _show(console, f"columns {edge[0]}-{edge[-1]}: the last two of O_0, the first two of O_1",
          hw.concat[:, edge], toks, [f"c{j}" for j in edge])
    console.print()
    console.print(f"5. output projection: concat W_o^T + b_o ({n} x {e}), what the layer adds "
                  "to its residual stream", style="bold")
    _show(console, "concat W_o^T + b_o", hw.out[:, :c], toks, cols)
    _show(console, "the layer's own attention output (MultiheadAttention, float64)",
          hw.reference[:, :c], toks, cols)
    console.print()
    failed = sum(not ch.passed for wt in hw.heads for ch in wt.checks)
    from attnlab.explain import Check
    per_head = Check("every head's steps checked against the library", not failed,
                     f"{h} heads, {failed} failures")
    notes = {f"backend {k}": v for k, v in hw.heads[0].backends.items()}
    _checks(console, hw.checks + [per_head], notes, verbose)


def render_additive(aw, console: Console) -> None:
    """Print an :class:`~attnlab.explain.AdditiveWalk`: additive scores and weights beside the
    dot product's."""
    console.rule("[bold]additive (Bahdanau) scoring on the same Q and K")
    console.print("s_ij = v^T tanh(W_q q_i + W_k k_j + b): a one-layer network scores each pair "
                  "(weights drawn at random here, as before training); the dot product scores it "
                  "by q_i . k_j / sqrt(D_k) with no parameters of its own.")
    d, hid = aw.w_q.shape
    hidden = [f"u{j}" for j in range(hid)]
    dims = [f"d{j}" for j in range(d)]
    _show(console, f"W_q ({d} x {hid})", aw.w_q, dims, hidden)
    _show(console, f"W_k ({d} x {hid})", aw.w_k, dims, hidden)
    _show(console, f"b and v ({hid} each)", torch.stack([aw.b, aw.v]), ["b", "v"], hidden)
    _show(console, "additive scores s_ij", aw.scores, aw.tokens, aw.tokens)
    _show(console, "A = softmax of each row (additive)", aw.a, aw.tokens, aw.tokens)
    _show(console, "A (scaled dot product, step 4c above)", aw.dot.a, aw.tokens, aw.tokens)
    for c in aw.checks:
        mark = "[green]PASS[/green]" if c.passed else "[red]FAIL[/red]"
        console.print(f"{mark}  {escape(c.name)}  [dim]({escape(c.detail)})[/dim]")
