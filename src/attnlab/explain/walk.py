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


@dataclass
class _RealLayer:
    path: object
    tok: object
    batch: dict
    tokens: list[str]
    res: object                      # the model's output (weights, hidden states)
    mha: object                      # the layer's MultiheadAttention
    x: torch.Tensor                  # (N, E) the layer's input, float64
    q: torch.Tensor                  # (N, E) X W_q^T + b_q, every head side by side
    k: torch.Tensor
    v: torch.Tensor


def _real_layer(text: str, model: str, layer: int, head: int | None = None) -> _RealLayer:
    """A BERT model's layer ``layer`` on ``text``: its input and its Q, K, V projections in
    float64, with the checks explain needs first (layer and head in range, text not empty,
    at most MAX_TOKENS tokens)."""
    from attnlab.nn.bert import BertModel, load_tokenizer, resolve_model_path

    path = resolve_model_path(model)
    ours = BertModel.from_pretrained(path)
    cfg = ours.config
    limits = [("layer", layer, cfg.num_hidden_layers)]
    if head is not None:
        limits.append(("head", head, cfg.num_attention_heads))
    for name, val, hi in limits:
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
    with torch.no_grad():
        res = ours(batch["input_ids"], batch["attention_mask"], return_weights=True,
                   return_hidden_states=True)
        x = res.hidden_states[layer][0].double()                    # (N, E), the layer's input
        mha = ours.encoder.layers[layer].self_attn
        e = mha.embed_dim
        w = mha.in_proj_weight.double().view(3, e, e)               # (q|k|v, E_out, E_in)
        b = mha.in_proj_bias.double().view(3, e)
        q, k, v = (x @ w[i].T + b[i] for i in range(3))             # (N, E) each
    return _RealLayer(path, tok, batch, tokens, res, mha, x, q, k, v)


def model_walk(text: str, model: str = "default", layer: int = 0, head: int = 0) -> Walkthrough:
    """The walk-through for one head of a real BERT-style model on ``text``.

    Q, K, V are that head's projections of the layer's input hidden states, computed by
    attnlab's :class:`~attnlab.nn.BertModel` (float64 for the walk); the checks add the largest
    difference between the formula's A and the attention map of ``transformers``' own
    implementation of the same checkpoint (and of attnlab's BertModel).
    """
    rl = _real_layer(text, model, layer, head)
    path, tokens, batch, n, tok = rl.path, rl.tokens, rl.batch, len(rl.tokens), rl.tok
    unknown = tokens.count(getattr(tok, "unk_token", None) or "[UNK]")
    if unknown:
        wt_note = (f"{unknown} of {n} tokens are {tok.unk_token}: the model's vocabulary does "
                   "not cover this text (for example Chinese in an English model)")
    else:
        wt_note = None
    dh = rl.mha.head_dim
    rows = slice(head * dh, (head + 1) * dh)
    q, k, v = (t[:, rows] for t in (rl.q, rl.k, rl.v))                # (N, D_h) each
    res = rl.res
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


def unscaled_note(wt: Walkthrough) -> list[str]:
    """What the 1/sqrt(D_k) scale prevents, on this walk's own Q and K: the largest weight of
    each row and the rows' entropy with and without the scale."""
    keep = wt.keep
    lines = []
    for tag, c in (("with 1/sqrt(D_k)", wt.scale / wt.temperature),
                   ("without the scale", 1.0 / wt.temperature)):
        s = (wt.s * c).masked_fill(~keep, float("-inf"))
        live = keep.any(-1)
        a = torch.softmax(s[live], dim=-1)
        ent = -(a * torch.log(torch.where(a > 0, a, 1.0))).sum(-1)
        lines.append(f"{tag}: score std {float((wt.s * c)[keep].std()):.2f}, largest weight per "
                     f"row {float(a.amax(-1).mean()):.2f} on average, entropy "
                     f"{float(ent.mean()):.2f} nats (uniform: {math.log(keep.shape[1]):.2f})")
    return lines


@dataclass
class HeadsWalk:
    """Multi-head attention of one real layer, step by step: the projections, the split into
    heads, each head's attention, the concatenation and the output projection."""

    tokens: list[str]
    x: torch.Tensor                   # (N, E) the layer's input
    q: torch.Tensor                   # (N, E) X W_q^T + b_q, all heads side by side
    heads: list[Walkthrough]          # one per head
    concat: torch.Tensor              # (N, E)
    out: torch.Tensor                 # (N, E) concat W_o^T + b_o
    checks: list[Check] = field(default_factory=list)
    source: str = ""

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks) and all(h.ok for h in self.heads)


def heads_walk(text: str, model: str = "default", layer: int = 0) -> HeadsWalk:
    """Every step of multi-head attention on a real layer of a BERT model (float64), checked
    against the layer's own attention output."""
    rl = _real_layer(text, model, layer)
    tokens, x, mha, path = rl.tokens, rl.x, rl.mha, rl.path
    q_all, k_all, v_all = rl.q, rl.k, rl.v
    h, dh = mha.num_heads, mha.head_dim
    with torch.no_grad():
        walks = []
        for hh in range(h):
            cols = slice(hh * dh, (hh + 1) * dh)                      # head hh's D_h columns
            walks.append(walk(tokens, q_all[:, cols], k_all[:, cols], v_all[:, cols]))
        concat = torch.cat([wt.o for wt in walks], dim=-1)            # (N, E)
        out = concat @ mha.out_proj.weight.double().T + mha.out_proj.bias.double()
        ref = mha.double()(x[None], x[None], x[None], need_weights=False)[0][0]
        mha.float()
    hw = HeadsWalk(tokens, x, q_all, walks, concat, out)
    err = float((out - ref).abs().max())
    hw.checks.append(Check("concat(heads) W_o + b equals the layer's attention output",
                           err <= 1e-10, f"max difference {err:.2e}, float64"))
    name = "all-MiniLM-L6-v2" if str(model) == "default" else path.name
    hw.source = f"{name}, layer {layer}, text {text!r}"
    return hw


def render_heads(hw: HeadsWalk, console: Console) -> None:
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


@dataclass
class AdditiveWalk:
    """Additive (Bahdanau) scoring on the same Q and K as a walk, beside the dot product."""

    tokens: list[str]
    scores: torch.Tensor              # (N, N) v^T tanh(W_q q_i + W_k k_j + b)
    a: torch.Tensor                   # (N, N)
    dot: Walkthrough
    checks: list[Check] = field(default_factory=list)


def additive_walk(wt: Walkthrough, hidden: int | None = None, seed: int = 0) -> AdditiveWalk:
    """Score the walk's queries and keys with a (seeded, untrained) additive scorer, compute
    its softmax by the formula and check it against :class:`attnlab.nn.AdditiveAttention`."""
    from attnlab.nn import AdditiveAttention

    d = wt.q.shape[1]
    torch.manual_seed(seed)
    add = AdditiveAttention(d, d, hidden_dim=hidden or d).double()
    with torch.no_grad():
        hq = wt.q @ add.w_q.weight.T                                     # (N_q, H)
        hk = wt.k @ add.w_k.weight.T + add.w_k.bias                      # (N_k, H)
        s = (torch.tanh(hq[:, None, :] + hk[None, :, :]) @ add.v.weight.T).squeeze(-1)
        s = s.masked_fill(~wt.keep, float("-inf"))
        a = torch.zeros_like(s)
        live = wt.keep.any(-1)
        a[live] = torch.softmax(s[live], dim=-1)
        res = add(wt.q, wt.k, wt.v, mask=wt.keep, return_weights=True)
    aw = AdditiveWalk(wt.tokens, s, a, wt)
    err = float((res.weights - a).abs().max())
    aw.checks.append(Check("formula = AdditiveAttention", err <= 1e-12, f"max |dA| = {err:.2e}"))
    return aw


def render_additive(aw: AdditiveWalk, console: Console) -> None:
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
