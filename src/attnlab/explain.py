"""Every step of attention on real numbers, checked against the code.

:func:`walk` computes Q K^T -> scaled and masked scores -> softmax -> A V step by step in
float64, checks the invariants, and runs every exact backend on the same numbers;
:func:`render` prints it; :func:`attnlab.plots.explain.write_heatmaps` draws S, A and the mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnlab.core import attention, list_backends, masks

BUILTIN_TOKENS = ["The", "cat", "sat", "on", "the", "mat"]
MAX_TOKENS = 64          # every matrix is printed in full


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class Walkthrough:
    """All intermediate matrices of one attention call, float64, shapes (N_q, ...)."""

    tokens: list[str]
    q: torch.Tensor            # (N, D)
    k: torch.Tensor            # (N, D)
    v: torch.Tensor            # (N, D)
    scale: float
    temperature: float
    causal: bool
    window: tuple[int | None, int | None] | None
    keep: torch.Tensor         # (N, N) bool, True = may attend
    s: torch.Tensor            # (N, N) Q K^T
    scaled: torch.Tensor       # (N, N) S * scale / temperature, -inf where masked
    a: torch.Tensor            # (N, N) softmax rows
    o: torch.Tensor            # (N, D) A V
    checks: list[Check] = field(default_factory=list)
    backends: dict[str, str] = field(default_factory=dict)   # backends not compared, and why
    source: str = "built-in example"                          # where Q, K, V come from
    label: str = ""                                           # short form for figure titles

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks)


def example(n: int | None = None, d: int | None = None, seed: int | None = None):
    """Tokens and Q, K, V (float64, rounded to one decimal so they can be followed by hand).

    With no arguments: the built-in six-token sentence with D = 4.
    """
    if n is None and d is None and seed is None:
        tokens = list(BUILTIN_TOKENS)
        n, d, seed = len(tokens), 4, 7
    else:
        n = 6 if n is None else n
        d = 4 if d is None else d
        seed = 0 if seed is None else seed
        tokens = [f"t{i}" for i in range(n)]
    g = torch.Generator().manual_seed(seed)
    # + 0.0 turns the -0.0 of rounding into 0.0 so it prints as 0.000
    q, k, v = (torch.round(torch.randn(n, d, generator=g, dtype=torch.float64) * 10) / 10 + 0.0
               for _ in range(3))
    return tokens, q, k, v


def walk(tokens: list[str], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
         causal: bool = False, window: int | tuple[int | None, int | None] | None = None,
         temperature: float = 1.0, tol: float = 1e-12) -> Walkthrough:
    """Compute each step by the formula and check it against the library."""
    n_q, n_k, d = q.shape[0], k.shape[0], q.shape[1]
    # Validate through the core first, so bad options get the core's messages.
    attention(q, k, v, causal=causal, window=window, temperature=temperature, backend="reference")
    scale = 1.0 / math.sqrt(d)
    w = (window, window) if isinstance(window, int) else window
    fns = []
    if causal:
        fns.append(masks.causal(offset=n_k - n_q))
    if w is not None:
        fns.append(masks.window(w[0], w[1], offset=n_k - n_q))
    keep = (masks.materialize(masks.and_masks(*fns), n_q, n_k)[0, 0] if fns
            else torch.ones(n_q, n_k, dtype=torch.bool))

    s = q @ k.T                                                  # (N_q, N_k)
    scaled = (s * scale / temperature).masked_fill(~keep, float("-inf"))
    a = torch.zeros_like(scaled)
    for i in range(n_q):                                         # softmax, one row at a time
        if keep[i].any():
            e = torch.exp(scaled[i] - scaled[i].max())
            a[i] = e / e.sum()
    o = a @ v                                                    # (N_q, D_v)

    wt = Walkthrough(tokens, q, k, v, scale, temperature, causal, w, keep, s, scaled, a, o)
    empty = ~keep.any(-1)
    row_sums = a.sum(-1)
    wt.checks.append(Check("A >= 0", bool((a >= 0).all()), f"min {float(a.min()):.3g}"))
    err_sum = float((row_sums[~empty] - 1).abs().max()) if (~empty).any() else 0.0
    wt.checks.append(Check("rows of A sum to 1", err_sum <= tol, f"max |sum - 1| = {err_sum:.2e}"))
    wt.checks.append(Check("A = 0 where masked", bool((a[~keep] == 0).all()),
                           f"{int((~keep).sum())} masked entries"))
    if empty.any():
        wt.checks.append(Check("fully masked rows give O = 0", bool((o[empty] == 0).all()),
                               f"{int(empty.sum())} rows"))
    ref = attention(q, k, v, causal=causal, window=window, temperature=temperature,
                    backend="reference", return_weights=True)
    err_a = float((ref.weights - a).abs().max())
    wt.checks.append(Check("formula = reference backend", err_a <= tol and
                           float((ref.out - o).abs().max()) <= tol, f"max |dA| = {err_a:.2e}"))

    for name, backend in list_backends().items():
        if not backend.capabilities.exact:
            wt.backends[name] = "approximate: not compared"
            continue
        try:
            out = attention(q, k, v, causal=causal, window=window, temperature=temperature,
                            backend=name)
        except ValueError as exc:
            wt.backends[name] = f"cannot serve: {exc}"
            continue
        err = float((out - o).abs().max())
        wt.checks.append(Check(f"backend {name} gives the same O", err <= tol,
                               f"max |O - O_formula| = {err:.2e}"))
    return wt


def _cell(x: float) -> str:
    return "-inf" if x == float("-inf") else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3f}"


def _show(console: Console, caption: str, m: torch.Tensor, rows: list[str], cols: list[str]) -> None:
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


def render(wt: Walkthrough, console: Console, max_dims: int = 8) -> None:
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


def model_walk(text: str, model: str = "default", layer: int = 0, head: int = 0) -> Walkthrough:
    """The walk-through for one head of a real BERT-style model on ``text``.

    Q, K, V are that head's projections of the layer's input hidden states, computed by
    attnlab's :class:`~attnlab.nn.BertModel` (float64 for the walk); the checks add the largest
    difference between the formula's A and the attention map of ``transformers``' own
    implementation of the same checkpoint (and of attnlab's BertModel).
    """
    from attnlab.nn.bert import BertModel, load_tokenizer, resolve_model_path

    path = resolve_model_path(model)
    ours = BertModel.from_pretrained(path)
    cfg = ours.config
    for name, val, hi in (("layer", layer, cfg.num_hidden_layers), ("head", head,
                                                                    cfg.num_attention_heads)):
        if not 0 <= val < hi:
            raise ValueError(f"{name} must be in 0..{hi - 1} for this model, got {val}")
    if not text.strip():
        raise ValueError("--text is empty; give a sentence to walk through")
    tok = load_tokenizer(path)
    batch = tok([text], return_tensors="pt")
    n = batch["input_ids"].shape[1]
    if n > MAX_TOKENS:
        raise ValueError(f"--text has {n} tokens; explain prints every matrix in full and takes "
                         f"at most {MAX_TOKENS}: shorten it, or use attnlab inspect for long text")
    tokens = tok.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    unknown = tokens.count(getattr(tok, "unk_token", None) or "[UNK]")
    if unknown:
        wt_note = (f"{unknown} of {n} tokens are {tok.unk_token}: the model's vocabulary does "
                   "not cover this text (for example Chinese in an English model)")
    else:
        wt_note = None
    with torch.no_grad():
        res = ours(batch["input_ids"], batch["attention_mask"], return_weights=True,
                   return_hidden_states=True)
        x = res.hidden_states[layer][0].double()                    # (N, E), the layer's input
        mha = ours.encoder.layers[layer].self_attn
        e, dh = mha.embed_dim, mha.head_dim
        w = mha.in_proj_weight.double().view(3, e, e)               # (q|k|v, E_out, E_in)
        b = mha.in_proj_bias.double().view(3, e)
        rows = slice(head * dh, (head + 1) * dh)
        q, k, v = (x @ w[i, rows].T + b[i, rows] for i in range(3))  # (N, D_h) each
    wt = walk(tokens, q, k, v)
    if wt_note is not None:
        wt.backends["tokenizer"] = wt_note
    name = "all-MiniLM-L6-v2" if str(model) == "default" else path.name
    wt.source = f"{name}, layer {layer}, head {head}, text {text!r}"
    wt.label = f" ({name}, layer {layer}, head {head})"
    hf_map = _transformers_map(path, batch, layer, head)
    own_map = res.attentions[layer][0, head].double()
    for name, m in (("transformers", hf_map), ("attnlab BertModel", own_map)):
        if m is None:
            wt.backends[name] = "transformers could not load this checkpoint: not compared"
            continue
        err = float((wt.a - m).abs().max())
        wt.checks.append(Check(f"A equals the {name} attention map", err <= 1e-5,
                               f"max |A - map| = {err:.2e}, float32 model"))
    return wt


def _transformers_map(path, batch, layer: int, head: int) -> torch.Tensor | None:
    """The attention map of transformers' own BERT (eager attention, so it returns maps)."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        hf = AutoModel.from_pretrained(str(path), attn_implementation="eager",
                                       local_files_only=True).eval()
    except (OSError, ValueError):
        return None
    with torch.no_grad():
        maps = hf(**batch, output_attentions=True).attentions
    return maps[layer][0, head].double()
