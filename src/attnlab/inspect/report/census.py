"""The census report: a long sequence's attention as statistics, one self-contained page (or a
notebook fragment) with no N x N map in it.

What it holds, for a :class:`~attnlab.inspect.census.Census`:

* a layers x heads grid per statistic (the head's mean over the positions), coloured, with the
  head's label; clicking a cell opens that head;
* the head's curves along the sequence: entropy, sink mass, mean attention distance and the
  attention each key receives, as bin means over at most :data:`CURVE_POINTS` bins;
* the head's pooled map (tile-pooled mean or max weight, at most 256 x 256 cells, from the
  census's second pass), on a log colour scale, the cell's query and key ranges and value under
  the cursor;
* exact weight rows: for each query the census kept (the ones named with ``rows=`` and each
  layer's sharpest late rows), the :data:`ROW_KEYS` largest weights of every head exactly, with
  their tokens, and the mass of the rest;
* the keys that receive the most attention, with their tokens.

Maps travel as one byte per cell on a log scale (:func:`log_codes`: 0 is an exact zero, codes
1..255 span 1e-9..1 in steps of 8.5%), zlib-compressed per head and decoded only when the head
is opened, so that the page paints at once. A plain-HTML table of the labels stands where the
script does not run.
"""

from __future__ import annotations

import base64
import html
import math
import uuid
import zlib
from pathlib import Path
from string import Template

import torch

from attnlab import __version__
from attnlab._files import write_text_atomic
from attnlab.inspect import labels as table
from attnlab.inspect.labels import LABEL_COLORS, LETTERS
from attnlab.inspect.report import _json_island, asset
from attnlab.inspect.tokens import reading_pieces

CURVE_POINTS = 2048     # curves: bin means over at most this many bins
CURVE_VALUES = 1_000_000  # ... and fewer where all heads' curves would hold more values
MAP_CELLS = 5_000_000     # pooled maps: cells of one kind over all heads, halved until fewer
ROW_KEYS = 64           # exact rows: each head's largest weights kept, the rest as one mass
LOG_DECADES = 9         # map codes 1..255 cover 1e-9 .. 1
# (statistic, title): curves along the sequence and the head grid; units from labels.UNITS
TITLES = {"sink_mass": "first-token (sink) mass", "prev_mass": "previous-token mass",
          "local_mass": "local mass", "match_mass": "prefix-matching (induction) mass",
          "self_mass": "self mass", "dup_mass": "duplicate-token mass", "entropy": "entropy",
          "entropy_ratio": "entropy / uniform entropy", "distance": "mean attention distance",
          "max_weight": "largest weight", "received": "attention received"}
CURVES = tuple((k, TITLES[k], table.UNITS[k]) for k in (
    "sink_mass", "prev_mass", "local_mass", "match_mass", "entropy", "distance", "received"))
GRID_STATS = tuple((k, TITLES[k], table.UNITS[k]) for k in (
    "sink_mass", "prev_mass", "local_mass", "match_mass", "self_mass", "dup_mass",
    "entropy_ratio", "distance", "max_weight"))
# the questions a reader asks first: which heads are of these kinds, or that none is
FINDINGS = ("sink", "previous token", "local", "induction")
_COLORS = LABEL_COLORS


def log_codes(w: torch.Tensor) -> bytes:
    """Weights in [0, 1] -> one byte each: 0 for 0, else ``1 + round(254 (log10 w + 9) / 9)``
    clamped to 1..255 (report.js inverts it; a code is within 4.3% of its weight above 1e-9)."""
    w = w.double().clamp(0, 1)
    code = torch.where(w > 0, 1 + torch.round((torch.log10(w.clamp_min(1e-300)) + LOG_DECADES)
                                              * (254 / LOG_DECADES)), torch.zeros_like(w))
    return code.clamp(0, 255).to(torch.uint8).numpy().tobytes()


def _pack(b: bytes) -> str:
    return base64.b64encode(zlib.compress(b, 6)).decode("ascii")


def _round(t: torch.Tensor, digits: int = 4) -> list:
    return [float(f"{v:.{digits}g}") for v in t.tolist()]


def _binned(t: torch.Tensor, size: int, seen: torch.Tensor | None = None) -> torch.Tensor:
    """Means of ``t (..., N)`` over bins of ``size`` positions (the last may be short),
    counting only the ``seen`` positions where given."""
    n = t.shape[-1]
    pad = (-n) % size
    keep = torch.ones_like(t, dtype=torch.float64) if seen is None else seen.double()
    vals = torch.nn.functional.pad(t.double() * keep, (0, pad)).unflatten(-1, (-1, size))
    cnt = torch.nn.functional.pad(keep, (0, pad)).unflatten(-1, (-1, size))
    return vals.sum(-1) / cnt.sum(-1).clamp_min(1)


def _coarsen(mean, top, n: int, cq: int, ck: int):
    """Pooled maps ``(L, H, G_q, G_k)`` of cells of ``cq x ck`` weights pooled again 2 x 2:
    the mean weighted by each cell's area (the last row and column of cells may be short),
    the largest as the largest; returns the maps and the new cell sides."""
    def sizes(g, cell):
        s = torch.full((g,), float(cell), dtype=torch.float64)
        s[-1] = n - cell * (g - 1)
        return s

    gq, gk = mean.shape[-2:]
    area = sizes(gq, cq)[:, None] * sizes(gk, ck)[None, :]
    pq, pk = gq % 2, gk % 2
    pad = (0, pk, 0, pq)
    total = torch.nn.functional.pad(mean.double() * area, pad)
    cover = torch.nn.functional.pad(area, pad)
    blocks = total.unflatten(-2, (-1, 2)).unflatten(-1, (-1, 2)).sum((-3, -1))
    areas = cover.unflatten(-2, (-1, 2)).unflatten(-1, (-1, 2)).sum((-3, -1))
    top = torch.nn.functional.pad(top, pad).unflatten(-2, (-1, 2)).unflatten(-1, (-1, 2))
    return ((blocks / areas).to(mean.dtype), top.amax((-3, -1)), 2 * cq, 2 * ck)


SINK_WEIGHT, SINK_OUTPUT = 0.5, 0.1      # a sink of weight whose output is not one


def sink_in_weight_only(c) -> list[tuple[int, int]]:
    """The heads whose weight is a sink (``sink_mass`` >= 0.5) while their output is not
    (``sink_mass_vw`` <= 0.1: the sink key's share of ``sum_j a_ij ||v_j W_O||``), the
    strongest first; empty where the value-weighted shares were not measured."""
    vw = c.summary.get("sink_mass_vw")
    if vw is None:
        return []
    w = c.summary["sink_mass"]
    heads = [(la, h) for la in range(c.layers) for h in range(c.heads)
             if float(w[la, h]) >= SINK_WEIGHT and float(vw[la, h]) <= SINK_OUTPUT]
    return sorted(heads, key=lambda g: -float(w[g]))


def findings(c) -> list[str]:
    """One line per kind of :data:`FINDINGS` and per other label some head carries: the heads
    with the label and their statistic, or, where none has it, the largest value and its head
    beside the threshold ("no sink: largest first-token mass 0.003 (L0H4); a sink needs more
    than 0.3"); with the value-weighted shares, the sinks of weight whose output is not one."""
    out = []
    idle = sink_in_weight_only(c)
    if idle:
        w, vw = c.summary["sink_mass"], c.summary["sink_mass_vw"]
        shown = ", ".join(f"L{la}H{h} ({float(w[la, h]):.2f} of the weight, "
                          f"{float(vw[la, h]):.2f} of the output)" for la, h in idle[:8])
        out.append(f"sink in weight only ({len(idle)}): {shown}"
                   f"{f' and {len(idle) - 8} more' if len(idle) > 8 else ''} -- at least "
                   f"{SINK_WEIGHT} of the weight on the first token, at most {SINK_OUTPUT} of "
                   "what the head writes (Kobayashi et al. 2020: weight times ||v W_O||)")
    units = table.UNITS
    present = {x for row in c.labels for x in row}
    kinds = list(FINDINGS) + [r.label for r in table.RULES
                              if r.label in present and r.label not in FINDINGS]
    where = (f" (queries before {c.trained:,}, the trained length)"
             if c.trained is not None else "")
    for label in kinds:
        rule = table.rule(label)
        stat = c.summary.get(rule.statistic)
        if stat is None:
            out.append(f"{label}: not measured ({rule.statistic} needs the token ids)")
            continue
        heads = sorted(((la, h) for la in range(c.layers) for h in range(c.heads)
                        if c.labels[la][h] == label), key=lambda g: -float(stat[g]))
        if heads:                                        # the strongest first
            shown = ", ".join(f"L{la}H{h} ({float(stat[la, h]):.2f})" for la, h in heads[:12])
            more = f" and {len(heads) - 12} more" if len(heads) > 12 else ""
            unit = units.get(rule.statistic, "")
            out.append(f"{label} ({len(heads)}): {shown}{more} -- {rule.statistic}"
                       f"{', ' + unit if unit else ''}{where}")
        else:
            flat = int(stat.flatten().argmax())
            la, h = divmod(flat, c.heads)
            op = ">" if rule.strict else ">="
            unit = units.get(rule.statistic, "")
            out.append(f"no {label} head: largest {rule.statistic} {float(stat[la, h]):.3f}"
                       f"{' (' + unit + ')' if unit else ''} at L{la}H{h}; the label needs "
                       f"{op} {rule.threshold:g}{where}")
    return out


def census_data(c, *, row_keys: int = ROW_KEYS) -> dict:
    """What the page's script draws for a :class:`~attnlab.inspect.census.Census`, as one
    JSON-able dict (see the module docstring)."""
    n, L, H = c.length, c.layers, c.heads
    names = [x for x in CURVES if x[0] in c.stats]
    points = max(256, min(CURVE_POINTS, CURVE_VALUES // max(1, L * H * len(names))))
    size = max(1, math.ceil(n / points))
    seen = torch.isfinite(c.stats["lse"])
    # each head's curves, one after the other, as float16 (float32 where a value passes
    # float16's range), zlib and base64: decoded when the head is opened, as the maps are
    binned = torch.stack([_binned(c.stats[name], size, None if name == "received" else seen)
                          for name, _, _ in names], 2)              # (L, H, curves, bins)
    wide = bool((binned.abs() > 60000).any())
    dtype = torch.float32 if wide else torch.float16
    curves = [[_pack(binned[layer, h].to(dtype).contiguous().numpy().tobytes())
               for h in range(H)] for layer in range(L)]
    summary = {name: [_round(c.summary[name][layer]) for layer in range(L)]
               for name, _, _ in GRID_STATS if name in c.summary}
    past = {name: [_round(c.summary_past[name][layer]) for layer in range(L)]
            for name, _, _ in GRID_STATS if name in c.summary_past}
    sinks = sum(row.count("sink") for row in c.labels)
    # the grid opens on the statistic of the commonest label (other than none of them)
    counts = {k: v for k, v in c.counts().items() if k != table.NONE}
    first = table.rule(max(counts, key=counts.get)).statistic if counts else "entropy_ratio"
    first = first if first in summary else next(iter(summary))
    data = {
        "model": c.model, "n": n, "L": L, "H": H, "tokens": c.tokens, "bin": size,
        "layer_names": c.layer_names, "labels": c.labels,
        "colors": {k: _COLORS.get(k, "#888") for row in c.labels for k in row},
        "letters": LETTERS,
        "grid": [[k, t, u] for k, t, u in GRID_STATS if k in summary], "summary": summary,
        "thresholds": {r.statistic: [r.threshold, r.label] for r in table.RULES},
        "legend": table.legend(),
        "curve_titles": [list(x) for x in names], "curves": curves,
        "curve_bytes": 4 if wide else 2, "curve_bins": binned.shape[-1],
        "trained": c.trained, "summary_past": past, "labels_past": c.labels_past,
        "causal": list(c.causal) or [False] * L,
        "text": c.pieces or reading_pieces(None, c.tokens),
        "sinks": sinks, "first_stat": first,
        "top_received": _top(c.stats["received"]),
        "sink_keys": c.sink_keys, "band": c.band, "version": __version__,
        "top_received_vw": _top(c.stats.get("received_vw")),
        "top_relevance": _top(_relevance(c)),
    }
    if c.maps:
        mean, top_w = c.maps["mean"], c.maps["max"]
        cq, ck = math.ceil(n / mean.shape[-2]), math.ceil(n / mean.shape[-1])
        while L * H * mean.shape[-2] * mean.shape[-1] > MAP_CELLS and min(mean.shape[-2:]) > 32:
            mean, top_w, cq, ck = _coarsen(mean, top_w, n, cq, ck)
        gq, gk = mean.shape[-2:]
        data["maps"] = {
            "gq": gq, "gk": gk, "cq": cq, "ck": ck, "decades": LOG_DECADES,
            "mean": [[_pack(log_codes(mean[layer, h])) for h in range(H)] for layer in range(L)],
            "max": [[_pack(log_codes(top_w[layer, h])) for h in range(H)] for layer in range(L)]}
    rows = {}
    for layer, (index, weights) in c.rows.items():         # weights (H, R, N)
        k = min(row_keys, weights.shape[-1])
        best = weights.double().topk(k, dim=-1)
        rest = weights.double().sum(-1) - best.values.sum(-1)
        rows[str(layer)] = {
            "index": index.tolist(),
            "heads": [[{"keys": best.indices[h, r].tolist(),
                        "w": [float(f"{v:.6g}") for v in best.values[h, r].tolist()],
                        "rest": float(f"{max(float(rest[h, r]), 0.0):.4g}")}
                       for r in range(index.numel())] for h in range(H)]}
    data["rows"] = rows
    return data


def _still_table(c) -> str:
    e = html.escape
    head = "".join(f"<th>H{h}</th>" for h in range(c.heads))
    body = "".join(
        f"<tr><th>L{layer}</th>" + "".join(
            f'<td style="color:{_COLORS.get(lab, "#888")}">{e(lab)}</td>' for lab in labels)
        + "</tr>" for layer, labels in enumerate(c.labels))
    return ('<div class="still" data-el="still"><p><b>This report draws itself with JavaScript, '
            "which did not run here</b> (an untrusted notebook, or a preview such as GitHub's). "
            "Trust the notebook, or open the saved HTML file in a browser. The heads' labels:"
            f"</p><table><tr><th></th>{head}</tr>{body}</table></div>")


def _top(per_layer, k: int = 20) -> list | None:
    """The ``k`` keys with the largest value, averaged over layers and heads ``(L, H, N)``
    (or as given ``(N,)``), as ``[[key, value], ...]``; None without the statistic."""
    if per_layer is None:
        return None
    v = per_layer.double()
    v = v.mean((0, 1)) if v.dim() == 3 else v
    top = v.topk(min(k, v.numel()))
    return [[int(i), float(f"{x:.4g}")] for x, i in zip(top.values.tolist(),
                                                       top.indices.tolist())]


def _relevance(c):
    """Each token's relevance summed over layers and heads, where the census measured it."""
    imp = getattr(c, "importance", None)
    return None if imp is None or imp.relevance is None else imp.token_relevance()


IDLE = 0.01        # a labelled head below this share of the largest importance "does little"


def _matters(c) -> str:
    """The "What matters" section: each head's importance for the text's loss beside its label
    by weight (a picture, one dot per head), the heads that matter most, and the labelled heads
    that matter least; empty without ``Census.importance``."""
    imp = getattr(c, "importance", None)
    if imp is None:
        return ""
    e = html.escape
    values = imp.importance.abs()
    top = float(values.max()) or 1.0
    share = values / top
    heads = [(layer, h) for layer in range(c.layers) for h in range(c.heads)]
    order = [r.label for r in table.RULES] + [table.NONE]
    present = [lab for lab in order if any(c.labels[la][h] == lab for la, h in heads)]
    w, hgt, left, bottom = 960, 280, 58, 52
    span = (w - left - 10) / max(1, len(present))
    floor = -4.0                                   # 1e-4 of the largest, the picture's bottom
    dots, ticks = [], []
    for k, lab in enumerate(present):
        members = [(la, h) for la, h in heads if c.labels[la][h] == lab]
        for m, (la, h) in enumerate(members):
            y = max(floor, math.log10(max(float(share[la, h]), 1e-12)))
            px = left + span * (k + 0.2 + 0.6 * ((m * 0.618) % 1.0))
            py = 10 + (hgt - bottom - 10) * (y / floor)
            dots.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" '
                        f'fill="{_COLORS.get(lab, "#888")}" fill-opacity="0.8">'
                        f"<title>L{la}H{h} {e(lab)}: importance {float(values[la, h]):.3g} "
                        f"({float(share[la, h]):.1%} of the largest)</title></circle>")
        cx = left + span * (k + 0.5)
        lines = [*lab.split(" "), f"({len(members)})"]           # one word a line
        ticks.append(f'<text x="{cx:.1f}" y="{hgt - bottom + 14}" text-anchor="middle" '
                     'font-size="10">' + "".join(
                         f'<tspan x="{cx:.1f}" dy="{0 if i == 0 else 12}">{e(t)}</tspan>'
                         for i, t in enumerate(lines)) + "</text>")
    for p in range(0, int(-floor) + 1):
        py = 10 + (hgt - bottom - 10) * (-p / floor)
        ticks.append(f'<line x1="{left}" x2="{w - 10}" y1="{py:.1f}" y2="{py:.1f}" '
                     'stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end" '
                     f'font-size="11">{"1" if p == 0 else f"1e-{p}"}</text>')
    svg = (f'<svg data-el="matters-plot" width="{w}" height="{hgt}" role="img" '
           f'aria-label="importance against label, one dot per head">'
           f'<text x="12" y="{(hgt - bottom) / 2:.0f}" font-size="11" transform="rotate(-90 12 '
           f'{(hgt - bottom) / 2:.0f})" text-anchor="middle">share of the largest importance'
           f"</text>{''.join(ticks)}{''.join(dots)}</svg>")
    ranked = sorted(heads, key=lambda x: -float(values[x]))
    vw = c.summary.get("sink_mass_vw")

    def own(la, h) -> str:          # the label's statistic by weight, then by output
        lab = c.labels[la][h]
        if lab in (table.NONE, "broad") or lab not in {r.label for r in table.RULES}:
            return "<td></td>"
        stat = table.rule(lab).statistic
        if c.summary.get(stat + "_vw") is None:
            return f"<td>{e(stat)} {float(c.summary[stat][la, h]):.2f}</td>"
        return (f"<td>{e(stat)} {float(c.summary[stat][la, h]):.2f} &#8594; "
                f"{float(c.summary[stat + '_vw'][la, h]):.2f}</td>")
    rows = "".join(
        f"<tr><td>{i + 1}</td><td>L{la}H{h}</td><td>{e(c.labels[la][h])}</td>"
        f"<td>{float(values[la, h]):.3g}</td><td>{float(share[la, h]):.1%}</td>"
        f"<td>{float(c.summary['sink_mass'][la, h]):.2f}</td>"
        + (f"<td>{float(vw[la, h]):.2f}</td>{own(la, h)}" if vw is not None else "") + "</tr>"
        for i, (la, h) in enumerate(ranked[:10]))
    idle = [(la, h) for la, h in ranked[::-1]
            if c.labels[la][h] not in (table.NONE, "broad") and float(share[la, h]) < IDLE]
    idle_text = (f"{len(idle)} heads with a label by weight matter least, each under "
                 f"{IDLE:.0%} of the largest importance: " + ", ".join(
                     f"L{la}H{h} ({e(c.labels[la][h])}, {float(share[la, h]):.2%})"
                     for la, h in idle[:12]) + (f" and {len(idle) - 12} more" if len(idle) > 12
                                                else "")
                 if idle else f"Every head with a label by weight holds at least {IDLE:.0%} of "
                 "the largest importance.")
    start, end = imp.target
    what = (f"tokens {start:,} to {end - 1:,}" if (start, end) != (1, c.length)
            else "every token after the first")
    kind = ("attribution patching against the corrupted input" if imp.patched else
            "the first-order cost of removing it (Michel et al. 2019)")
    return (f'<section data-el="matters"><h2>What matters</h2>'
            f'<p class="explain">A label says where a head looks; this says whether what it '
            f"writes moves the prediction. Each head's importance for the loss of {what} "
            f"({imp.loss:.3f} nats per token) is |&#8721;<sub>t</sub> &#10216;o<sub>h,t</sub>, "
            f"&#8706;L/&#8706;o<sub>h,t</sub>&#10217;|, {kind}, from one backward pass on the "
            f"tiled backend. It is a first-order estimate, not an ablation.</p>{svg}"
            f'<table data-el="matters-top"><tr><th>rank</th><th>head</th><th>label by weight'
            f"</th><th>importance (nats)</th><th>of the largest</th><th>sink mass</th>"
            + ("<th>sink share of the output</th><th>its label's statistic, weight &#8594; "
               "output</th>" if vw is not None else "") + "</tr>"
            f'{rows}</table><p data-el="matters-idle">{idle_text}</p>'
            + ('<h3>Tokens that matter</h3><p class="explain">Token relevance through attention '
               "(Chefer et al. 2021): &#8721;<sub>i</sub> (P<sub>ij</sub> dP<sub>ij</sub>)"
               "<sup>+</sup> for each key j, summed over the queries, heads and layers, from "
               "the same backward pass. Masking the most relevant tokens was measured no better "
               "than masking random ones on SmolLM2 (docs/inspect.md): read it as where the "
               'gradient flows, not as proof.</p><table data-el="matters-tokens"></table>'
               if _relevance(c) is not None else "") + "</section>")


def render_census(c, *, standalone: bool = False, inline: bool = False,
                  uid: str | None = None, settings: dict[str, str] | None = None) -> str:
    """The census report as HTML: a whole page (``standalone``) or the fragment a notebook
    shows inline."""
    e = html.escape
    uid = uid or f"attnlab-census-{uuid.uuid4().hex[:12]}"
    settings = settings or {}
    settings = {"model": c.model, "tokens": str(c.length),
                "sink keys": str(c.sink_keys), "band": str(c.band), **settings}
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in settings.items())
    counts = ", ".join(f"{v} {e(k)}" for k, v in c.counts().items())
    notes = "".join(f'<p class="note">{e(x)}</p>' for x in c.notes)
    found = "".join(f"<li>{e(x)}</li>" for x in findings(c))
    trained_note = (f" before {c.trained:,} (the length the model was trained at; the value "
                    f"from {c.trained:,} on is under the cursor)" if c.trained is not None
                    else "")
    fragment = Template(asset("census.html")).substitute(
        uid=uid, model=e(c.model), n=f"{c.length:,}", layers=c.layers, heads=c.heads,
        counts=counts, notes=notes, settings_rows=rows, still=_still_table(c),
        findings=found, legend=e(table.legend()), trained_note=e(trained_note),
        matters=_matters(c),
        version=e(__version__), data=_json_island(census_data(c)))
    script = asset("census.js") + f"\nattnlabCensus(document.getElementById({uid!r}));\n"
    out = f"<style>{asset('report.css')}</style>\n{fragment}<script>{script}</script>"
    if not standalone:
        return out
    return Template(asset("page.html")).substitute(title=e(c.model), report=out)


def write_census(c, path: Path, settings: dict[str, str] | None = None) -> Path:
    """Write the standalone census report to ``path`` (temporary name, then rename)."""
    return write_text_atomic(Path(path), render_census(c, standalone=True, settings=settings))
