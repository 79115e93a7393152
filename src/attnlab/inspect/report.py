"""The offline HTML report: one self-contained file that draws itself, no network.

Every text's maps travel in the page as bytes (one per weight, scaled by the map's largest
weight), gzip-compressed and base64-encoded; the small metadata (tokens, labels, metrics) as a
JSON island. The script in :mod:`attnlab.inspect.report_js` decompresses them with the
browser's ``DecompressionStream`` and draws the model view, a bertviz-style head view, the
heatmap of any head with the value under the cursor, rollout / gradient relevance per layer,
attention flow, the head map and the metric grids. A Content-Security-Policy forbids every
request the page could make. All user text is escaped: in HTML with :func:`html.escape`, in the
JSON island with ``<`` written as ``\\u003c``, and the script only ever inserts text with
``textContent``.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from pathlib import Path

import torch

from attnlab import __version__
from attnlab._files import write_text_atomic
from attnlab.inspect.metrics import METRIC_TITLES, HeadMetrics
from attnlab.inspect.report_js import SCRIPT
from attnlab.inspect.run import Inspection
from attnlab.inspect.taxonomy import LABEL_COLORS, LABELS

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}
.controls{display:flex;gap:18px;flex-wrap:wrap;align-items:center;background:#f6f6f6;padding:8px 12px;border-radius:6px}
#grid{display:grid;gap:3px;align-items:center;justify-items:center}
#grid .lab{font-size:12px;color:#555}
button.head{padding:0;border:3px solid transparent;background:none;cursor:pointer}
button.head.sel{outline:3px solid #000} button.head canvas{display:block;width:56px;height:56px;image-rendering:pixelated}
#hv{display:flex;gap:0;align-items:flex-start} #hv .col{width:150px;overflow:hidden}
#hv-q .tok{text-align:right;padding-right:6px} #hv-k .tok{padding-left:6px}
.tok{white-space:nowrap;cursor:default;font-family:ui-monospace,monospace} .tok.on{background:#ffe08a}
#hv-heads label{margin-right:8px;font-size:12px} .sw{display:inline-block;width:10px;height:10px;margin:0 3px;border-radius:2px}
.panel{display:flex;gap:16px;align-items:flex-start;flex-wrap:wrap}
canvas.heat{image-rendering:pixelated;border:1px solid #ccc}
.rowlabels{display:flex;flex-direction:column;justify-content:space-around;font-size:10px;text-align:right;font-family:ui-monospace,monospace}
.bar{font-size:12px} .bar canvas{width:200px;height:12px;vertical-align:middle;margin:0 4px}
.collabels{display:flex;font-size:10px;font-family:ui-monospace,monospace}
.collabels div{writing-mode:vertical-rl;text-align:left;overflow:hidden;max-height:70px}
.value{font-family:ui-monospace,monospace;font-size:12px;min-height:1.4em}
.note{color:#8a5300} .tag{display:inline-block;padding:1px 6px;border-radius:8px;color:#fff;font-size:12px;margin:2px}
table.mg{display:inline-table;margin:6px 10px 6px 0} table.mg td{padding:1px 3px;font-size:10px;text-align:center}
table.mg caption{font-size:12px;text-align:left}
"""


def _json_island(obj) -> str:
    # "<" escaped so that no "</script>" (or comment opener) can close the island early.
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c")


def _metric_dict(m: HeadMetrics) -> dict[str, list]:
    out = {}
    for name in METRIC_TITLES:
        t = getattr(m, name, None)
        if t is not None:
            out[name] = [[round(float(x), 4) for x in row] for row in t]
    return out


class _Packer:
    """Matrices as bytes: each scaled by its own largest value to 0..255 (so a head whose
    largest weight is 0.2 uses the whole range), appended to one buffer."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, mats: torch.Tensor) -> tuple[int, list[float]]:
        """``mats (k, n, m)`` -> (offset, per-matrix scales)."""
        mats = mats.float().clamp_min(0)
        flat = mats.reshape(mats.shape[0], -1)
        scales = flat.amax(-1).clamp_min(1e-12)                          # (k,)
        q = torch.round(flat / scales[:, None] * 255).to(torch.uint8)
        offset = self.size
        data = q.numpy().tobytes()
        self.parts.append(data)
        self.size += len(data)
        return offset, [float(s) for s in scales]


def report_data(ins: Inspection) -> tuple[dict, str]:
    """The JSON metadata and the base64 blob of the report."""
    packer = _Packer()
    texts = []
    captures = ins.captures or []
    for c in captures:
        L, H, n, m = c.maps.shape
        offset, scales = packer.add(c.maps.reshape(L * H, n, m))
        label = c.text if c.pair is None else f"{c.text} | {c.pair}"
        if c.kind != "self":
            label = f"{c.kind}: {label}"
        texts.append({"label": label[:120], "tokens": c.tokens, "offset": offset,
                      "scales": scales, "keys": c.keys, "align": c.align, "labels": c.labels,
                      "segments": None if c.segments is None else c.segments.tolist()})
    first = {}
    eye = torch.eye(len(ins.tokens), dtype=torch.float64)
    for kind, mats in (("rollout", ins.rollout_layers),
                       ("gradient", None if ins.gradient_layers is None
                        else ins.gradient_layers - eye)):
        if mats is not None:
            offset, scales = packer.add(mats)
            first[kind] = {"offset": offset, "scales": scales, "per_layer": True}
    if ins.flow is not None:
        offset, scales = packer.add(ins.flow[None])
        first["flow"] = {"offset": offset, "scales": scales, "per_layer": False}
    if ins.flow_from is not None:
        first["flow_from"] = {"values": [round(float(x), 6) for x in ins.flow_from],
                              "position": ins.flow_position}
    raw = b"".join(packer.parts)
    packed = gzip.compress(raw, compresslevel=1, mtime=0)   # 3x faster than 6, 10% larger
    use_gzip = len(packed) < 0.9 * len(raw)
    blob = base64.b64encode(packed if use_gzip else raw).decode("ascii")
    data = {"layers": ins.layers, "heads": ins.heads, "texts": texts, "first": first,
            "labels": ins.taxonomy.labels, "metrics": _metric_dict(ins.metrics),
            "metric_titles": METRIC_TITLES, "label_colors": LABEL_COLORS,
            "xy": [[round(float(a), 4), round(float(b), 4)] for a, b in ins.xy],
            "gzip": use_gzip, "bytes": len(raw)}
    return data, blob


def write_report(ins: Inspection, path: Path, settings: dict[str, str]) -> Path:
    """Write the report to ``path`` (temporary name, then rename)."""
    e = html.escape
    data, blob = report_data(ins)
    def shown(v):
        v = str(v)
        return v if len(v) <= 300 else f"{v[:300]}… ({len(v)} characters)"

    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(shown(v))}</td></tr>" for k, v in settings.items())
    counts = ins.taxonomy.counts()
    tax_head = "".join(f"<th>H{h}</th>" for h in range(ins.heads))
    tax_rows = "".join(
        f"<tr><th>L{layer}</th>" + "".join(
            f'<td><span class="tag" style="background:{LABEL_COLORS[lab]}">{e(lab)}</span></td>'
            for lab in labels) + "</tr>"
        for layer, labels in enumerate(ins.taxonomy.labels))
    count_rows = "".join(f"<tr><td>{e(k)}</td><td>{v}</td></tr>" for k, v in counts.items())
    flags = []
    for layer, head in ins.taxonomy.near_uniform:
        flags.append(f"<li>near-uniform: layer {layer}, head {head}</li>")
    for a, b, d in ins.taxonomy.duplicates[:50]:
        flags.append(f"<li>near-duplicates: L{a[0]}H{a[1]} and L{b[0]}H{b[1]} "
                     f"(JS distance {d:.3f})</li>")
    flag_html = "<ul>" + "".join(flags) + "</ul>" if flags else "<p>none</p>"
    notes = "".join(f'<p class="note">{e(n)}</p>' for n in ins.notes)
    table = ""
    if ins.head_table is not None:
        t = ins.head_table
        head = "".join(f"<th>{e(c)}</th>" for c in t["columns"])
        body = "".join("<tr>" + "".join(
            f"<td>{e(f'{v:.3f}' if isinstance(v, float) else str(v))}</td>" for v in row)
            + "</tr>" for row in t["rows"])
        table = (f'<section id="head-table"><h2>{e(t["title"])}</h2><p>{e(t["caption"])}</p>'
                 f'<div style="overflow-x:auto"><table><tr>{head}</tr>{body}</table></div>'
                 "</section>")
    summary = ins.layer_summary
    target = {"norm": "the norm of the pooled embedding",
              "similarity": "the cosine similarity of the two sentences' embeddings",
              "loss": "the model's next-token loss"}.get(ins.target, ins.target)

    attr_text = ("Rollout and attention flow (Abnar &amp; Zuidema 2020) and gradient-weighted "
                 f"relevance (Chefer et al. 2021, target: {e(target)}; shown as R &#8722; I) "
                 f"from layer {ins.start_layer}.")
    if ins.gradient_layers is None:
        attr_text = ("Rollout and attention flow (Abnar &amp; Zuidema 2020) from layer "
                     f"{ins.start_layer}; gradient relevance is computed for the encoder "
                     "models only.")

    def bar(prefix):
        return (f'<div class="bar" id="{prefix}-bar"><span class="lo"></span><canvas></canvas>'
                f'<span class="hi"></span> <span class="what"></span></div>')

    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data: blob:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>attnlab inspect: {e(ins.model)}</title><style>{CSS}</style></head><body>
<h1>Attention report</h1>
<p>{e(ins.model)} on {len(ins.texts)} text{'s' if len(ins.texts) != 1 else ''}. Metrics, head
distances and labels are averaged over all texts; maps are shown for the text you pick;
attribution is for the first text.</p>
{notes}
<section id="settings"><h2>Settings</h2><table>{rows}</table></section>
<div class="controls">
<label id="texts-control">text <select id="text"></select></label>
<label><input type="checkbox" id="words"> word level (pieces merged: sum over attended, mean over attending)</label>
<label id="pair-control">view <select id="pair"><option value="all">all tokens</option>
<option value="ab">sentence A &#8594; B</option><option value="ba">sentence B &#8594; A</option></select></label>
</div>
<section><h2>Model view</h2><p>Every layer and head; the border colour is the head's class
(legend under the head map); thumbnails on a square-root colour scale of each map's largest
weight. Click a head to open it below.</p><div id="grid"></div></section>
<section><h2>Head view</h2><p>Left: queries, right: keys; line strength is the attention
weight. Hover a token to see what it attends to (left) or what attends to it (right).</p>
<div class="controls"><select id="hv-layer"></select><span id="hv-heads"></span></div>
<div id="hv"><div class="col" id="hv-q"></div><canvas id="hv-canvas" width="260"></canvas>
<div class="col" id="hv-k"></div></div></section>
<section><h2 id="detail-title">Layer 0, head 0</h2>
<label><input type="checkbox" id="shared"> shared colour scale (0&#8211;1) instead of per map</label>
<div class="panel"><div id="map-axes"></div><div><canvas class="heat" id="map-canvas"></canvas><div class="collabels" id="map-cols"></div></div>
<div>{bar('map')}<div class="value" id="map-value">move over the map for its values</div>
<table id="detail-metrics"></table></div></div></section>
<section id="attribution"><h2>Attribution</h2>
<p>{attr_text}</p>
<div class="controls"><select id="attr-kind"></select>
<input type="range" id="attr-layer" min="0" step="1"> <span id="attr-layer-label"></span></div>
<div class="panel"><div id="attr-axes"></div><div><canvas class="heat" id="attr-canvas"></canvas><div class="collabels" id="attr-cols"></div></div>
<div>{bar('attr')}<div class="value" id="attr-value"></div></div></div>
<div id="flow-from"></div><div class="value" id="flow-value"></div></section>
<section id="taxonomy"><h2>Head taxonomy</h2>
<div style="overflow-x:auto"><table><tr><th></th>{tax_head}</tr>{tax_rows}</table></div>
<h3>Counts</h3><table>{count_rows}</table><h3>Flags</h3>{flag_html}
<p>Jensen-Shannon distance between heads: same layer {summary['same_layer']:.3f},
different layers {summary['cross_layer']:.3f}.</p>
<h3>Heads by Jensen-Shannon distance (classical MDS; label layer.head)</h3>
<canvas id="mds" width="760" height="420"></canvas><div id="legend"></div></section>
{table}
<section id="metrics"><h2>Metric grids</h2><div id="metric-grids"></div></section>
<footer><p>attnlab {e(__version__)}; labels: {e(', '.join(LABELS))}.</p></footer>
<script type="application/json" id="data">{_json_island(data)}</script>
<script type="text/plain" id="blob">{blob}</script>
<script>{SCRIPT}</script>
</body></html>
"""
    return write_text_atomic(path, doc)
