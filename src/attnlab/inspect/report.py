"""The offline HTML report: one self-contained file, no network.

Figures are inlined as data URIs; the maps, metrics and labels travel as a JSON island that a
small vanilla script draws (the model-wide grid as canvases, the clicked head as an SVG with its
tokens). A Content-Security-Policy forbids every request the page could make. All user text is
escaped: in HTML with :func:`html.escape`, in the JSON island with ``<`` written as ``\\u003c``,
and the script only ever inserts text with ``textContent``.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from attnlab import __version__
from attnlab._files import write_text_atomic
from attnlab.inspect.metrics import METRIC_TITLES, HeadMetrics
from attnlab.inspect.run import Inspection
from attnlab.inspect.taxonomy import LABELS


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1300px}
h1{margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}
#grid{display:grid;gap:3px;align-items:center;justify-items:center}
#grid .lab{font-size:12px;color:#555} button.head{padding:0;border:2px solid transparent;background:none;cursor:pointer}
button.head.sel{border-color:#d62728} button.head canvas{display:block;width:56px;height:56px;image-rendering:pixelated}
#detail{display:flex;gap:24px;flex-wrap:wrap;align-items:flex-start} #detail svg text{font-size:11px}
.figs img{max-width:100%;border:1px solid #eee;margin:6px 0} .note{color:#8a5300}
.tag{display:inline-block;padding:1px 6px;border-radius:8px;color:#fff;font-size:12px}
"""

SCRIPT = r"""
(function(){
const D = JSON.parse(document.getElementById('data').textContent);
const V = [[68,1,84],[59,82,139],[33,145,140],[94,201,98],[253,231,37]];
function color(x){x=Math.max(0,Math.min(1,x));const p=x*(V.length-1),i=Math.min(Math.floor(p),V.length-2),f=p-i;
 const c=V[i].map((v,k)=>Math.round(v+(V[i+1][k]-v)*f));return 'rgb('+c.join(',')+')';}
const grid=document.getElementById('grid');
grid.style.gridTemplateColumns='40px repeat('+D.heads+', 60px)';
grid.appendChild(document.createElement('div'));
for(let h=0;h<D.heads;h++){const d=document.createElement('div');d.className='lab';d.textContent='H'+h;grid.appendChild(d);}
for(let l=0;l<D.layers;l++){
 const lab=document.createElement('div');lab.className='lab';lab.textContent='L'+l;grid.appendChild(lab);
 for(let h=0;h<D.heads;h++){
  const b=document.createElement('button');b.className='head';b.dataset.layer=l;b.dataset.head=h;
  b.title='layer '+l+', head '+h+': '+D.labels[l][h];
  const c=document.createElement('canvas');const n=D.tokens.length;c.width=n;c.height=n;
  const ctx=c.getContext('2d');const m=D.maps[l][h];
  for(let i=0;i<n;i++)for(let j=0;j<n;j++){ctx.fillStyle=color(m[i][j]);ctx.fillRect(j,i,1,1);}
  b.appendChild(c);b.addEventListener('click',()=>show(l,h));grid.appendChild(b);}}
const NS='http://www.w3.org/2000/svg';
function el(tag,attrs){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);return e;}
function show(l,h){
 document.querySelectorAll('button.head').forEach(b=>b.classList.toggle('sel',+b.dataset.layer===l&&+b.dataset.head===h));
 document.getElementById('detail-title').textContent='Layer '+l+', head '+h+' \u2014 '+D.labels[l][h];
 const n=D.tokens.length,cell=Math.max(10,Math.min(28,Math.floor(520/n))),pad=90;
 const svg=el('svg',{width:pad+n*cell+10,height:pad+n*cell+10,id:'detail-svg'});
 const m=D.maps[l][h];
 for(let i=0;i<n;i++){
  const ty=el('text',{x:pad-4,y:pad+i*cell+cell*0.7,'text-anchor':'end'});ty.textContent=D.tokens[i];svg.appendChild(ty);
  const tx=el('text',{x:0,y:0,transform:'translate('+(pad+i*cell+cell*0.7)+','+(pad-4)+') rotate(-60)'});tx.textContent=D.tokens[i];svg.appendChild(tx);
  for(let j=0;j<n;j++){const r=el('rect',{x:pad+j*cell,y:pad+i*cell,width:cell,height:cell,fill:color(m[i][j])});
   const t=el('title',{});t.textContent=D.tokens[i]+' \u2192 '+D.tokens[j]+': '+m[i][j].toFixed(3);r.appendChild(t);svg.appendChild(r);}}
 const box=document.getElementById('detail-map');box.replaceChildren(svg);
 const tb=document.getElementById('detail-metrics');tb.replaceChildren();
 for(const k of Object.keys(D.metrics)){const tr=document.createElement('tr');const a=document.createElement('th');a.textContent=D.metric_titles[k]||k;
  const b=document.createElement('td');b.textContent=D.metrics[k][l][h].toFixed(3);tr.append(a,b);tb.appendChild(tr);}
}
show(0,0);
})();
"""


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


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


def write_report(ins: Inspection, figures: dict[str, Path], path: Path,
                 settings: dict[str, str]) -> Path:
    """Write the report to ``path`` (temporary name, then rename)."""
    e = html.escape
    data = {
        "layers": ins.layers, "heads": ins.heads, "tokens": ins.tokens,
        "maps": [[[[round(float(x), 4) for x in row] for row in head] for head in layer]
                 for layer in ins.maps],
        "labels": ins.taxonomy.labels, "metrics": _metric_dict(ins.metrics),
        "metric_titles": METRIC_TITLES,
    }
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in settings.items())
    counts = ins.taxonomy.counts()
    tax_head = "".join(f"<th>H{h}</th>" for h in range(ins.heads))
    tax_rows = "".join(
        f"<tr><th>L{layer}</th>" + "".join(f"<td>{e(lab)}</td>" for lab in labels) + "</tr>"
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
    metric_imgs = "".join(_img(p, f"metric grid {k}") for k, p in figures.items()
                          if k.startswith("metric_"))
    attrib = "".join(_img(figures[k], k) for k in ("rollout", "flow", "gradient") if k in figures)
    summary = ins.layer_summary
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>attnlab inspect: {e(ins.model)}</title><style>{CSS}</style></head><body>
<h1>Attention report</h1>
<p>{e(ins.model)} on {len(ins.texts)} text{'s' if len(ins.texts) != 1 else ''}. Maps and attributions
are for the first text; metrics, head distances and labels are averaged over all texts.</p>
<section id="settings"><h2>Settings</h2><table>{rows}</table></section>
<section><h2>Every head</h2><p>Click a head to see its map and metrics.</p><div id="grid"></div></section>
<section><h2 id="detail-title">Layer 0, head 0</h2><div id="detail"><div id="detail-map"></div>
<table id="detail-metrics"></table></div></section>
<section id="taxonomy"><h2>Head taxonomy</h2>
<div style="overflow-x:auto"><table><tr><th></th>{tax_head}</tr>{tax_rows}</table></div>
<h3>Counts</h3><table>{count_rows}</table><h3>Flags</h3>{flag_html}
<p>Jensen-Shannon distance between heads: same layer {summary['same_layer']:.3f},
different layers {summary['cross_layer']:.3f}.</p>
<div class="figs">{_img(figures['head_embedding'], 'head embedding')}</div></section>
<section id="attribution"><h2>Attribution</h2>{notes}<div class="figs">{attrib}</div></section>
<section id="metrics"><h2>Metric grids</h2><div class="figs">{metric_imgs}</div></section>
<footer><p>attnlab {e(__version__)}; labels: {e(', '.join(LABELS))}.</p></footer>
<script type="application/json" id="data">{_json_island(data)}</script>
<script>{SCRIPT}</script>
</body></html>
"""
    return write_text_atomic(path, doc)
