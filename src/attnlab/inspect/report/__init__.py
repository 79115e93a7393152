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
import math
import uuid
from importlib import resources
from pathlib import Path
from string import Template

import torch

from attnlab import __version__
from attnlab._files import write_text_atomic
from attnlab.inspect.labels import LABEL_COLORS, LABELS
from attnlab.inspect.metrics import METRIC_TITLES, HeadMetrics


def asset(name: str) -> str:
    """A file of the report (``report.html``, ``page.html``, ``report.css``, ``report.js``)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _json_island(obj) -> str:
    # "<" escaped so that no "</script>" (or comment opener) can close the island early.
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c")


# The report embeds q and k (float32, exact: the neuron view recomputes each score from them)
# for as many layers as fit in this many floats; more with
# show(..., options=ShowOptions(neuron_layers=[...])).
NEURON_FLOATS = 250_000
FLOOR = 1e-6      # the report's absolute tolerance on a weight (below SPLIT)
SPLIT = 1e-4      # weights below it are coded in absolute steps of 2 FLOOR, above in ratios
RATIO = 1.008     # ratio step above SPLIT: half a step is 0.4%, so 3 significant digits of
                  # the decoded value stay within the 1% the report promises
SMALL_CODES = int(round(SPLIT / (2 * FLOOR)))   # 50 codes below SPLIT
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
        if name == "sink_mass" and tokens and tokens[0] == "[CLS]":
            continue
        out[name] = [[round(float(x), 4) for x in row] for row in t]
    return out


def encode_weights(w: torch.Tensor) -> torch.Tensor:
    """Nonnegative weights -> 16-bit codes that keep each within 1% or :data:`FLOOR`:
    below :data:`SPLIT` in absolute steps of ``2 * FLOOR`` (error <= FLOOR), above it in
    ratio steps of :data:`RATIO` (error <= 0.4%). A weight needs about 10 bits at this
    precision: a 512-token map of the embedded model compresses to about 19 MB for its 72
    heads, against 27 MB as bfloat16."""
    w = w.float().clamp_min(0)
    # float32 logs err by ~1e-7, far inside a code's 1.8% step
    large = torch.log(w.clamp_min(SPLIT) * (1.0 / SPLIT)).mul_(1.0 / math.log(RATIO))
    large.round_().add_(SMALL_CODES)
    small = torch.round(w * (1.0 / (2 * FLOOR)))
    return torch.where(w < SPLIT, small, large).clamp_(0, 65535).to(torch.int32)


def decode_weights(code: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`encode_weights` (report.js does the same)."""
    code = code.double()
    return torch.where(code < SMALL_CODES, code * 2 * FLOOR,
                       SPLIT * RATIO ** (code - SMALL_CODES))


class _Packer:
    """Byte sections appended to one buffer: weights as 16-bit codes
    (:func:`encode_weights`), each map's low bytes then its high bytes (the high bytes are
    nearly constant and compress to little); float32 arrays as they are.

    Every weight keeps its value within 1% or 1e-6, however small beside the map's largest.
    (One byte per weight scaled to the map's maximum, as before, turned every weight below
    1/254 of it into 0: at 1,000 tokens 93% of the nonzero weights read 0.0000 under the
    cursor.)"""

    def __init__(self):
        self.parts: list[bytes] = []
        self.size = 0

    def _append(self, data: bytes) -> int:
        offset = self.size
        self.parts.append(data)
        self.size += len(data)
        return offset

    def _align(self, k: int) -> None:
        pad = (-self.size) % k
        if pad:
            self._append(b"\0" * pad)

    def add(self, mats: torch.Tensor) -> int:
        """``mats (k, n, m)`` of nonnegative weights -> the byte offset of their codes: map
        i's ``n m`` low bytes at ``offset + 2 i n m``, its high bytes right after."""
        offset = self.size
        for mat in mats.reshape(mats.shape[0], -1):          # one map at a time: bounded memory
            code = encode_weights(mat)
            self._append((code & 0xFF).to(torch.uint8).numpy().tobytes())
            self._append((code >> 8).to(torch.uint8).numpy().tobytes())
        return offset

    def add_floats(self, t: torch.Tensor) -> int:
        """A float32 array; its offset is a multiple of 4 (a Float32Array view)."""
        self._align(4)
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


def report_data(ins, neuron_layers=None) -> tuple[dict, str]:
    """The JSON metadata and the base64 blob of the report.

    Weights are bfloat16 (see :class:`_Packer`); large reports compress harder (gzip level 6
    instead of 1).
    """
    captures = ins.captures or []
    cells = sum(c.maps.numel() for c in captures)
    big = cells > 4_000_000
    packer = _Packer()
    texts = []
    for c in captures:
        L, H, n, m = c.maps.shape
        offset = packer.add(c.maps.reshape(L * H, n, m))
        thumbs = _thumbs(c.maps)
        t_off = packer.add(thumbs)
        label = c.text if c.pair is None else f"{c.text} | {c.pair}"
        if c.kind != "self":
            label = f"{c.kind}: {label}"
        entry = {"label": label[:120], "tokens": c.tokens, "offset": offset,
                 "thumbs": {"offset": t_off, "r": thumbs.shape[1], "c": thumbs.shape[2]},
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
            first[kind] = {"offset": packer.add(mats), "per_layer": True}
    if ins.flow is not None:
        first["flow"] = {"offset": packer.add(ins.flow[None]), "per_layer": False}
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
            "gzip": use_gzip, "bytes": len(raw),
            "code": {"small": SMALL_CODES, "step": 2 * FLOOR, "split": SPLIT, "ratio": RATIO}}
    return data, blob


# viridis in ten stops, as report.js draws it
_VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
            [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]]


def _still_png(maps: torch.Tensor, cell: int = 40) -> bytes:
    """The model view as a PNG: one tile per head (rows: layers, columns: heads), each map
    max-pooled to ``cell`` pixels, on a square-root scale of its own largest weight."""
    import io

    from PIL import Image

    L, H, n, m = maps.shape
    a = maps.float().reshape(L * H, 1, n, m)
    r, c = min(n, cell), min(m, cell)
    if (r, c) != (n, m):
        a = torch.nn.functional.adaptive_max_pool2d(a, (r, c))
    a = (a[:, 0] / a.amax((-2, -1), keepdim=True)[:, 0].clamp_min(1e-12)).sqrt()
    stops = torch.tensor(_VIRIDIS, dtype=torch.float32)
    pos = a.clamp(0, 1) * (len(_VIRIDIS) - 1)
    lo = pos.floor().long().clamp(max=len(_VIRIDIS) - 2)
    rgb = stops[lo] + (stops[lo + 1] - stops[lo]) * (pos - lo)[..., None]     # (LH, r, c, 3)
    gap = 3
    img = torch.full((L * (r + gap) - gap, H * (c + gap) - gap, 3), 255.0)
    for k in range(L * H):
        y, x = divmod(k, H)
        img[y * (r + gap):y * (r + gap) + r, x * (c + gap):x * (c + gap) + c] = rgb[k]
    picture = Image.fromarray(img.round().to(torch.uint8).numpy())
    zoom = max(1, cell // max(r, c))                  # short texts: pixels enlarged, not blurred
    if zoom > 1:
        picture = picture.resize((picture.width * zoom, picture.height * zoom), Image.NEAREST)
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    return buf.getvalue()


def _still_html(ins) -> str:
    """What a reader sees where the report's script does not run (an untrusted notebook,
    GitHub's preview of one): a line saying so and the model view as a still PNG. The
    script hides it as its first act."""
    maps = ins.captures[0].maps if ins.captures else ins.maps
    L, H = maps.shape[:2]
    png = base64.b64encode(_still_png(maps)).decode("ascii")
    return ('<div class="still" data-el="still"><p><b>This report draws itself with '
            "JavaScript, which did not run here</b> (an untrusted notebook, or a preview such "
            "as GitHub's). Trust the notebook, or open the saved HTML file in a browser. The "
            f"model view as a still picture ({L} layers as rows, {H} heads as columns, each "
            "map on a square-root scale of its largest weight):</p>"
            f'<img alt="attention maps of every layer and head" '
            f'src="data:image/png;base64,{png}"></div>')


FLAG_GROUPS = 12     # near-duplicate groups listed by name; the rest are counted


def _flags_html(near_uniform, duplicates) -> str:
    """The flags as a short list: near-uniform heads on one line, near-duplicate pairs joined
    into groups (heads linked by a chain of pairs), the largest groups first, at most
    :data:`FLAG_GROUPS` of them named. (One line per pair ran to 120 lines for 16 heads.)"""
    name = lambda lh: f"L{lh[0]}H{lh[1]}"                            # noqa: E731
    items = []
    if near_uniform:
        items.append(f"near-uniform ({len(near_uniform)}): "
                     + ", ".join(name(x) for x in near_uniform))
    parent: dict = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    worst: dict = {}
    for a, b, _ in duplicates:
        parent[root(tuple(a))] = root(tuple(b))
    for a, _, d in duplicates:
        r = root(tuple(a))
        worst[r] = max(worst.get(r, 0.0), float(d))
    groups: dict = {}
    for x in list(parent):
        groups.setdefault(root(x), []).append(x)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), sorted(kv[1])))
    for r, members in ordered[:FLAG_GROUPS]:
        items.append(f"near-duplicates ({len(members)} heads, JS distance up to "
                     f"{worst[r]:.3f}): " + ", ".join(name(x) for x in sorted(members)))
    if len(ordered) > FLAG_GROUPS:
        rest = ordered[FLAG_GROUPS:]
        items.append(f"and {len(rest)} more near-duplicate groups "
                     f"({sum(len(m) for _, m in rest)} heads)")
    if not items:
        return "<p>none</p>"
    return "<ul>" + "".join(f"<li>{html.escape(t)}</li>" for t in items) + "</ul>"


def render_report(ins, settings: dict[str, str] | None = None, *,
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
            f'{e(lab)}</span></td>'
            for lab in labels) + "</tr>"
        for layer, labels in enumerate(ins.taxonomy.labels))
    count_rows = "".join(f"<tr><td>{e(k)}</td><td>{v}</td></tr>" for k, v in counts.items())
    flag_html = _flags_html(ins.taxonomy.near_uniform, ins.taxonomy.duplicates)
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
    still = _still_html(ins)
    fragment = Template(asset("report.html")).substitute(
        still=still,
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


def write_report(ins, path: Path, settings: dict[str, str] | None = None, *,
                 neuron_layers=None) -> Path:
    """Write the standalone report to ``path`` (temporary name, then rename)."""
    return write_text_atomic(path, render_report(ins, settings, neuron_layers=neuron_layers))
