"""The HTML report: one self-contained fragment that draws itself, no network, as a file or
inline in a notebook.

Every text's maps travel in the page as bytes (one per weight, scaled by the map's largest
weight), gzip-compressed and base64-encoded; the small metadata (tokens, labels, metrics) as a
JSON island. ``report.js`` (package data, beside ``report.html``, ``page.html`` and
``report.css``) decompresses them with the browser's ``DecompressionStream`` and draws the
model view, a bertviz-style head view, the heatmap of any head with the value under the
cursor, rollout / gradient relevance per layer, attention flow, the head map and the metric
grids. Everything lives under one root element with a unique id, found relative to it, so
several reports share a notebook without clashing. The standalone page adds a
Content-Security-Policy that forbids every request it could make. All user text is escaped:
in HTML with :func:`html.escape`, in the JSON island with ``<`` written as ``\\u003c``, and
the script only ever inserts text with ``textContent``.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import uuid
from importlib import resources
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

import torch

from attnlab import __version__
from attnlab._files import write_text_atomic
from attnlab.inspect.metrics import METRIC_TITLES, HeadMetrics
from attnlab.inspect.taxonomy import LABEL_COLORS, LABELS

if TYPE_CHECKING:
    from attnlab.inspect.run import Inspection


def asset(name: str) -> str:
    """A file of the report (``report.html``, ``page.html``, ``report.css``, ``report.js``)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _json_island(obj) -> str:
    # "<" escaped so that no "</script>" (or comment opener) can close the island early.
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c")


# The report embeds q and k (float32, exact: the neuron view recomputes each score from them)
# for as many layers as fit in this many floats; more with show(..., neuron_layers=[...]).
NEURON_FLOATS = 250_000
THUMB = 64        # model-view thumbnails: each map max-pooled to at most THUMB x THUMB


def _metric_dict(m: HeadMetrics, tokens: list[str]) -> dict[str, list]:
    """The metric grids worth showing: a metric of tokens the text lacks ([CLS], [SEP] of a
    model without them) is all zeros, and first-token mass is [CLS] mass when the first token
    is [CLS]; both are left out."""
    out = {}
    for name in METRIC_TITLES:
        t = getattr(m, name, None)
        if t is None:
            continue
        if name in ("cls", "sep") and f"[{name.upper()}]" not in tokens:
            continue
        if name == "first" and tokens and tokens[0] == "[CLS]":
            continue
        out[name] = [[round(float(x), 4) for x in row] for row in t]
    return out


class _Packer:
    """Byte sections appended to one buffer: maps as bytes, each scaled by its own largest
    value to 0..levels (a head whose largest weight is 0.2 uses the whole range); float32
    arrays as they are."""

    def __init__(self, levels: int = 255):
        self.parts: list[bytes] = []
        self.size = 0
        self.levels = levels

    def _append(self, data: bytes) -> int:
        offset = self.size
        self.parts.append(data)
        self.size += len(data)
        return offset

    def add(self, mats: torch.Tensor) -> tuple[int, list[float]]:
        """``mats (k, n, m)`` -> (offset, per-matrix scales: value = byte * scale)."""
        mats = mats.float().clamp_min(0)
        flat = mats.reshape(mats.shape[0], -1)
        top = flat.amax(-1).clamp_min(1e-12)                            # (k,)
        q = torch.round(flat / top[:, None] * self.levels).to(torch.uint8)
        return self._append(q.numpy().tobytes()), [float(t) / self.levels for t in top]

    def add_floats(self, t: torch.Tensor) -> int:
        """A float32 array; its offset is a multiple of 4 (a Float32Array view)."""
        pad = (-self.size) % 4
        if pad:
            self._append(b"\0" * pad)
        return self._append(t.detach().float().contiguous().numpy().tobytes())


def _thumbs(maps: torch.Tensor) -> torch.Tensor:
    """``(L*H, r, c)``: every map max-pooled to at most THUMB x THUMB (a peak stays a peak)."""
    L, H, n, m = maps.shape
    a = maps.reshape(L * H, 1, n, m).float()
    r, c = min(n, THUMB), min(m, THUMB)
    if (r, c) != (n, m):
        a = torch.nn.functional.adaptive_max_pool2d(a, (r, c))
    return a[:, 0]


def _neuron(c, packer: _Packer, layers) -> dict | None:
    """q and k of the capture's chosen layers (float32), for the neuron view."""
    if c.q is None or c.k is None:
        return None
    L, H, n, d = c.q.shape
    per_layer = H * (n + c.k.shape[2]) * d
    if layers is None:                                   # as many as fit, from layer 0
        layers = list(range(min(L, NEURON_FLOATS // max(per_layer, 1))))
    layers = [int(x) for x in layers if 0 <= int(x) < L]
    out = {"d": d, "scale": [float(x) for x in c.scale], "layers": {}}
    for layer in layers:
        out["layers"][layer] = {"q": packer.add_floats(c.q[layer]),
                                "k": packer.add_floats(c.k[layer])}
    return out


def report_data(ins: Inspection, neuron_layers=None) -> tuple[dict, str]:
    """The JSON metadata and the base64 blob of the report.

    Large reports quantize maps to 127 levels instead of 255 and compress harder (gzip level 6
    instead of 1): a 512-token report of the embedded model fits in 5 MB inline in a notebook.
    """
    captures = ins.captures or []
    cells = sum(c.maps.numel() for c in captures)
    big = cells > 4_000_000
    packer = _Packer(127 if big else 255)
    texts = []
    for c in captures:
        L, H, n, m = c.maps.shape
        offset, scales = packer.add(c.maps.reshape(L * H, n, m))
        thumbs = _thumbs(c.maps)
        t_off, t_scales = packer.add(thumbs)
        label = c.text if c.pair is None else f"{c.text} | {c.pair}"
        if c.kind != "self":
            label = f"{c.kind}: {label}"
        entry = {"label": label[:120], "tokens": c.tokens, "offset": offset, "scales": scales,
                 "thumbs": {"offset": t_off, "scales": t_scales, "r": thumbs.shape[1],
                            "c": thumbs.shape[2]},
                 "keys": c.keys, "align": c.align, "labels": c.labels, "kind": c.kind,
                 "segments": None if c.segments is None else c.segments.tolist()}
        if c.vnorm is not None:
            entry["vnorm"] = packer.add_floats(c.vnorm)               # (L, H, n_k)
        neuron = _neuron(c, packer, neuron_layers if c is captures[0] else [])
        if neuron is not None:
            entry["neuron"] = neuron
        texts.append(entry)
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
    # level 1 is 3x faster than 6 and 10% larger: worth it only where the size matters
    packed = gzip.compress(raw, compresslevel=6 if big else 1, mtime=0)
    use_gzip = len(packed) < 0.9 * len(raw)
    blob = base64.b64encode(packed if use_gzip else raw).decode("ascii")
    data = {"layers": ins.layers, "heads": ins.heads, "texts": texts, "first": first,
            "labels": ins.taxonomy.labels, "metrics": _metric_dict(ins.metrics, ins.tokens),
            "metric_titles": METRIC_TITLES, "label_colors": LABEL_COLORS,
            "xy": [[round(float(a), 4), round(float(b), 4)] for a, b in ins.xy],
            "gzip": use_gzip, "bytes": len(raw)}
    return data, blob


def render_report(ins: Inspection, settings: dict[str, str] | None = None, *,
                  standalone: bool = True, uid: str | None = None,
                  neuron_layers=None) -> str:
    """The report as HTML: a whole page (``standalone``, with its Content-Security-Policy) or
    the fragment a notebook shows inline (its style and script, no page around it).
    ``uid``: the root element's id (default: a fresh one); ``neuron_layers``: the layers whose
    q and k the neuron view embeds (default: as many as :data:`NEURON_FLOATS` allows)."""
    e = html.escape
    settings = settings or {"model": ins.model}
    data, blob = report_data(ins, neuron_layers)
    def shown(v):
        v = str(v)
        return v if len(v) <= 300 else f"{v[:300]}… ({len(v)} characters)"

    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(shown(v))}</td></tr>" for k, v in settings.items())
    counts = ins.taxonomy.counts()
    tax_head = "".join(f"<th>H{h}</th>" for h in range(ins.heads))
    tax_rows = "".join(
        f"<tr><th>L{layer}</th>" + "".join(
            f'<td><span class="tag" title="{e(lab)}" style="background:{LABEL_COLORS[lab]}">'
            f'{e(lab[:6])}</span></td>'
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
        table = (f'<section data-el="head-table"><h2>{e(t["title"])}</h2><p>{e(t["caption"])}</p>'
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
        return (f'<div class="bar" data-el="{prefix}-bar"><span class="lo"></span><canvas>'
                f'</canvas><span class="hi"></span> <span class="what"></span></div>')

    uid = uid or f"attnlab-{uuid.uuid4().hex[:12]}"
    fragment = Template(asset("report.html")).substitute(
        uid=uid, model=e(ins.model), n_texts=len(ins.texts),
        plural="s" if len(ins.texts) != 1 else "", notes=notes, settings_rows=rows,
        map_bar=bar("map"), attr_bar=bar("attr"), vw_bar=bar("vw"), attr_text=attr_text,
        tax_head=tax_head,
        tax_rows=tax_rows, count_rows=count_rows, flags=flag_html,
        js_same=f"{summary['same_layer']:.3f}", js_cross=f"{summary['cross_layer']:.3f}",
        head_table=table, version=e(__version__), labels=e(", ".join(LABELS)),
        data=_json_island(data), blob=blob)
    # The script runs once the fragment is in the page and finds its root by id; as a
    # classic inline script it runs in Jupyter's output area as in a file.
    script = (asset("report.js") + f"\nattnlabReport(document.getElementById({uid!r}));\n")
    report = f"<style>{asset('report.css')}</style>\n{fragment}<script>{script}</script>"
    if not standalone:
        return report
    return Template(asset("page.html")).substitute(title=e(ins.model), report=report)


def write_report(ins: Inspection, path: Path, settings: dict[str, str] | None = None, *,
                 neuron_layers=None) -> Path:
    """Write the standalone report to ``path`` (temporary name, then rename)."""
    return write_text_atomic(path, render_report(ins, settings, neuron_layers=neuron_layers))
