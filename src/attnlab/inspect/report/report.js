// The attnlab inspection report: draws every view in the browser from the data embedded in
// the page. Plain JavaScript, no library, no request. Everything is looked up inside the
// report's own root element, so several reports live side by side in one page (a notebook).
// The maps arrive as one base64 string of gzip-compressed bytes (decompressed by the
// browser's own DecompressionStream), one byte per weight scaled by the map's largest weight.
// Text is only ever inserted with textContent.
async function attnlabReport(root){
'use strict';
const D = JSON.parse(root.querySelector('[data-el="data"]').textContent);
const $ = name => root.querySelector('[data-el="' + name + '"]');
async function unpack(b64){
  const bin = atob(b64), u = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
  if (!D.gzip) return u;
  const s = new Blob([u]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Uint8Array(await new Response(s).arrayBuffer());
}
const BYTES = await unpack($('blob').textContent.trim());
// ---- colours: viridis, 256 steps ---------------------------------------------------------
const VS = [[68,1,84],[72,40,120],[62,74,137],[49,104,142],[38,130,142],[31,158,137],
            [53,183,121],[109,205,89],[180,222,44],[253,231,37]];
const LUT = new Uint8Array(256 * 3);
for (let i = 0; i < 256; i++) { const p = i / 255 * (VS.length - 1), a = Math.min(Math.floor(p), VS.length - 2), f = p - a;
  for (let c = 0; c < 3; c++) LUT[3 * i + c] = Math.round(VS[a][c] + (VS[a + 1][c] - VS[a][c]) * f); }
const LABEL_COLORS = D.label_colors;
// ---- state -------------------------------------------------------------------------------
const S = {text: 0, layer: 0, head: 0, heads: new Set([0]), words: false, shared: false,
           attr: D.first.flow ? 'flow' : 'rollout', attrLayer: D.layers - 1, pair: 'all'};
// A matrix view: values (Float32Array n*n), n, and its labels.
// A cross-attention text carries its key tokens (the source) apart from its query tokens.
function headMatrix(t, l, h){
  const T = D.texts[t], nr = T.tokens.length, cols = T.keys || T.tokens, nc = cols.length;
  const off = T.offset + (l * D.heads + h) * nr * nc;
  const sc = T.scales[l * D.heads + h] / 255, m = new Float32Array(nr * nc);
  for (let i = 0; i < nr * nc; i++) m[i] = BYTES[off + i] * sc;
  return {m, n: T.keys ? null : nr, nr, nc, rows: T.tokens, cols, align: T.align};
}
const labelsOf = t => D.texts[t].labels || D.labels;
function attrMatrix(kind, l){
  const A = D.first[kind];
  if (!A) return null;
  const n = D.texts[0].tokens.length, k = A.per_layer ? l : 0, off = A.offset + k * n * n;
  const sc = A.scales[k] / 255, m = new Float32Array(n * n);
  for (let i = 0; i < n * n; i++) m[i] = BYTES[off + i] * sc;
  return {m, n, rows: D.texts[0].tokens, cols: D.texts[0].tokens};
}
// Word level (Clark et al. 2019): sum over the attended pieces, mean over the attending ones.
function words(T){
  const w = [], names = [];
  T.tokens.forEach((tok, i) => {
    if (tok.startsWith('##') && w.length) { w.push(w[w.length - 1]); names[names.length - 1] += tok.slice(2); }
    else { w.push(names.length); names.push(tok); }
  });
  return {w, names};
}
function toWords(M, T){
  const {w, names} = words(T), k = names.length, out = new Float32Array(k * k), cnt = new Float32Array(k);
  for (let i = 0; i < M.n; i++) cnt[w[i]] += 1;
  for (let i = 0; i < M.n; i++) for (let j = 0; j < M.n; j++) out[w[i] * k + w[j]] += M.m[i * M.n + j];
  for (let a = 0; a < k; a++) for (let b = 0; b < k; b++) out[a * k + b] /= cnt[a];
  return {m: out, n: k, rows: names, cols: names};
}
// Sentence A -> B and B -> A of a pair: the block of rows of one sentence, columns of the other.
function pairBlock(M, T){
  if (S.pair === 'all' || !T.segments) return M;
  const ids = S.words ? (() => { const {w} = words(T), s = []; w.forEach((wi, i) => { s[wi] = T.segments[i]; }); return s; })() : T.segments;
  const a = [], b = [];
  ids.forEach((s, i) => (s === 0 ? a : b).push(i));
  const [R, C] = S.pair === 'ab' ? [a, b] : [b, a];
  const out = new Float32Array(R.length * C.length);
  R.forEach((i, x) => C.forEach((j, y) => { out[x * C.length + y] = M.m[i * M.n + j]; }));
  return {m: out, n: null, nr: R.length, nc: C.length, rows: R.map(i => M.rows[i]), cols: C.map(j => M.cols[j])};
}
function view(M, T){
  if (T.keys) return M;                     // cross-attention: no word merging, no pair blocks
  let V = S.words ? toWords(M, T) : M;
  V = pairBlock(V, T);
  if (V.nr === undefined) { V.nr = V.n; V.nc = V.n; }
  return V;
}
// ---- heatmap on a canvas, value under the cursor, colour bar -------------------------------
function maxOf(m){ let x = 0; for (const v of m) if (v > x) x = v; return x || 1; }
function drawHeat(canvas, V, vmax){
  canvas.width = V.nc; canvas.height = V.nr;
  const ctx = canvas.getContext('2d'), img = ctx.createImageData(V.nc, V.nr);
  for (let i = 0; i < V.m.length; i++) { const c = Math.max(0, Math.min(255, Math.round(V.m[i] / vmax * 255)));
    img.data[4 * i] = LUT[3 * c]; img.data[4 * i + 1] = LUT[3 * c + 1]; img.data[4 * i + 2] = LUT[3 * c + 2]; img.data[4 * i + 3] = 255; }
  ctx.putImageData(img, 0, 0);
}
function colorbar(el, vmax, label){
  const c = el.querySelector('canvas'); c.width = 256; c.height = 1;
  const ctx = c.getContext('2d'), img = ctx.createImageData(256, 1);
  for (let i = 0; i < 256; i++) { img.data.set([LUT[3 * i], LUT[3 * i + 1], LUT[3 * i + 2], 255], 4 * i); }
  ctx.putImageData(img, 0, 0);
  el.querySelector('.lo').textContent = '0';
  el.querySelector('.hi').textContent = vmax.toPrecision(3);
  el.querySelector('.what').textContent = label;
}
// The alignment a model is known to follow, as white outlines on a heatmap drawn at 16 px a
// cell (only small cross-attention maps carry one).
function drawAligned(canvas, V, vmax){
  const k = 16; canvas.width = V.nc * k; canvas.height = V.nr * k;
  const ctx = canvas.getContext('2d');
  for (let i = 0; i < V.nr; i++) for (let j = 0; j < V.nc; j++) {
    const c = Math.max(0, Math.min(255, Math.round(V.m[i * V.nc + j] / vmax * 255)));
    ctx.fillStyle = 'rgb(' + LUT[3 * c] + ',' + LUT[3 * c + 1] + ',' + LUT[3 * c + 2] + ')'; ctx.fillRect(j * k, i * k, k, k); }
  ctx.strokeStyle = '#fff'; ctx.lineWidth = 2;
  V.align.forEach((j, i) => { if (j !== null && j !== undefined) ctx.strokeRect(j * k + 2, i * k + 2, k - 4, k - 4); });
  canvas.dataset.aligned = V.align.filter(j => j !== null && j !== undefined).length;
}
function heatPanel(prefix, V, label){
  const canvas = $(prefix + '-canvas'), vmax = S.shared && prefix === 'map' ? 1 : maxOf(V.m);
  if (V.align && prefix === 'map') drawAligned(canvas, V, vmax); else { drawHeat(canvas, V, vmax); delete canvas.dataset.aligned; }
  const size = Math.min(640, Math.max(240, 12 * Math.max(V.nr, V.nc)));
  canvas.style.width = size * V.nc / Math.max(V.nr, V.nc) + 'px';
  canvas.style.height = size * V.nr / Math.max(V.nr, V.nc) + 'px';
  colorbar($(prefix + '-bar'), vmax, label);
  const ax = $(prefix + '-axes'); ax.replaceChildren();
  if (Math.max(V.nr, V.nc) <= 80) {        // token labels where they can be read
    const rows = document.createElement('div'); rows.className = 'rowlabels';
    V.rows.forEach(t => { const s = document.createElement('div'); s.textContent = t; rows.appendChild(s); });
    rows.style.height = canvas.style.height; ax.appendChild(rows);
  }
  const cl = $(prefix + '-cols'); cl.replaceChildren();
  if (Math.max(V.nr, V.nc) <= 80) {        // and the keys under the map
    cl.style.width = canvas.style.width;
    V.cols.forEach(t => { const s = document.createElement('div'); s.textContent = t; s.style.width = 100 / V.nc + '%'; cl.appendChild(s); });
  }
  canvas.onmousemove = e => { const r = canvas.getBoundingClientRect();
    const j = Math.floor((e.clientX - r.left) / r.width * V.nc), i = Math.floor((e.clientY - r.top) / r.height * V.nr);
    if (i < 0 || j < 0 || i >= V.nr || j >= V.nc) return;
    $(prefix + '-value').textContent = V.rows[i] + ' (' + i + ') \u2192 ' + V.cols[j] + ' (' + j + '): ' + V.m[i * V.nc + j].toFixed(4); };
}
// Thumbnails: max-pooled to at most 96 x 96 (a 512-token map would be 262k pixels each) and
// on a square-root scale of the map's own maximum, so a spread-out head is not drawn black.
function drawThumb(canvas, V){
  const k = Math.max(1, Math.ceil(Math.max(V.nr, V.nc) / 96)), r = Math.ceil(V.nr / k), c = Math.ceil(V.nc / k);
  const pooled = new Float32Array(r * c);
  for (let i = 0; i < V.nr; i++) for (let j = 0; j < V.nc; j++) {
    const p = Math.floor(i / k) * c + Math.floor(j / k), x = V.m[i * V.nc + j]; if (x > pooled[p]) pooled[p] = x; }
  const vmax = maxOf(pooled);
  for (let i = 0; i < pooled.length; i++) pooled[i] = Math.sqrt(pooled[i] / vmax);
  drawHeat(canvas, {m: pooled, nr: r, nc: c}, 1);
}
// ---- model view: every layer x head, labelled by its class ---------------------------------
function modelView(){
  const grid = $('grid'); grid.replaceChildren();
  grid.style.gridTemplateColumns = '36px repeat(' + D.heads + ', 64px)';
  grid.appendChild(document.createElement('div'));
  for (let h = 0; h < D.heads; h++) { const d = document.createElement('div'); d.className = 'lab'; d.textContent = 'H' + h; grid.appendChild(d); }
  for (let l = 0; l < D.layers; l++) {
    const lab = document.createElement('div'); lab.className = 'lab'; lab.textContent = 'L' + l; grid.appendChild(lab);
    for (let h = 0; h < D.heads; h++) {
      const b = document.createElement('button'); b.className = 'head'; b.dataset.layer = l; b.dataset.head = h;
      const cls = labelsOf(S.text)[l][h]; b.title = 'layer ' + l + ', head ' + h + ': ' + cls;
      b.style.borderColor = LABEL_COLORS[cls];
      const c = document.createElement('canvas'); drawThumb(c, view(headMatrix(S.text, l, h), D.texts[S.text]));
      b.appendChild(c);
      b.addEventListener('click', () => { S.layer = l; S.head = h; S.heads = new Set([h]); refresh(); });
      grid.appendChild(b);
    }
  }
}
// ---- head view (bertviz-style): two token columns, lines weighted by attention -------------
const HEAD_COLORS = ['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f','#bcbd22','#17becf','#393b79','#637939'];
let hover = null;   // {side: 'q'|'k', index}
let HV = null;      // the head view's matrices and geometry, built by headView()
function drawLines(){
  const {mats, nr, nc, row, H} = HV, c = $('hv-canvas'), ctx = c.getContext('2d');
  ctx.clearRect(0, 0, c.width, H);
  for (const [h, V] of mats) {
    ctx.strokeStyle = HEAD_COLORS[h % HEAD_COLORS.length];
    const vmax = maxOf(V.m);
    for (let i = 0; i < nr; i++) {
      if (hover && hover.side === 'q' && hover.index !== i) continue;
      for (let j = 0; j < nc; j++) {
        if (hover && hover.side === 'k' && hover.index !== j) continue;
        const w = V.m[i * nc + j] / vmax; if (w < 0.02) continue;
        ctx.globalAlpha = Math.min(1, w); ctx.lineWidth = 1 + 2 * w;
        ctx.beginPath(); ctx.moveTo(0, i * row + row / 2 + 5); ctx.lineTo(c.width, j * row + row / 2 + 5); ctx.stroke();
      }
    }
  }
  ctx.globalAlpha = 1;
  $('hv').dataset.lines = hover ? hover.side + hover.index : 'all';
  root.querySelectorAll('[data-el=hv] .tok').forEach(t => t.classList.toggle('on',
    !!hover && t.parentNode.dataset.el === 'hv-' + hover.side && +t.dataset.index === hover.index));
}
function headView(){
  const T = D.texts[S.text];
  const mats = [...S.heads].sort((a, b) => a - b).map(h => [h, view(headMatrix(S.text, S.layer, h), T)]);
  const V0 = mats.length ? mats[0][1] : view(headMatrix(S.text, S.layer, 0), T);
  const nr = V0.nr, nc = V0.nc, row = Math.max(nr, nc) > 150 ? 3 : Math.max(nr, nc) > 60 ? 8 : 18;
  const H = Math.max(nr, nc) * row + 10;
  HV = {mats, nr, nc, row, H};
  const c = $('hv-canvas'); c.height = H; c.style.height = H + 'px';
  hover = null;
  for (const [side, labels] of [['q', V0.rows], ['k', V0.cols]]) {
    const col = $('hv-' + side); col.replaceChildren(); col.style.height = H + 'px';
    labels.forEach((t, i) => { const s = document.createElement('div'); s.className = 'tok'; s.textContent = t;
      s.style.height = s.style.lineHeight = row + 'px'; s.style.fontSize = Math.min(12, row - 2) + 'px';
      s.dataset.index = i;
      s.addEventListener('mouseenter', () => { hover = {side, index: i}; drawLines(); });
      s.addEventListener('mouseleave', () => { hover = null; drawLines(); });
      col.appendChild(s); });
  }
  const pick = $('hv-heads'); pick.replaceChildren();
  for (let h = 0; h < D.heads; h++) { const lab = document.createElement('label'); const cb = document.createElement('input');
    cb.type = 'checkbox'; cb.checked = S.heads.has(h); cb.dataset.head = h;
    cb.addEventListener('change', () => { cb.checked ? S.heads.add(h) : S.heads.delete(h); headView(); });
    const sw = document.createElement('span'); sw.className = 'sw'; sw.style.background = HEAD_COLORS[h % HEAD_COLORS.length];
    lab.append(cb, sw, document.createTextNode('H' + h)); pick.appendChild(lab); }
  drawLines();
}
// ---- one head: heatmap and metrics ---------------------------------------------------------
function headDetail(){
  const l = S.layer, h = S.head;
  root.querySelectorAll('button.head').forEach(b => b.classList.toggle('sel', +b.dataset.layer === l && +b.dataset.head === h));
  $('detail-title').textContent = 'Layer ' + l + ', head ' + h + ' \u2014 ' + labelsOf(S.text)[l][h] +
    (D.texts[S.text].align ? ' (white outlines: the source token each output token is known to read)' : '');
  heatPanel('map', view(headMatrix(S.text, l, h), D.texts[S.text]), 'attention weight');
  const tb = $('detail-metrics'); tb.replaceChildren();
  if (D.texts[S.text].labels) return;   // the metrics are those of the main capture only
  for (const k of Object.keys(D.metrics)) { const tr = document.createElement('tr'); const a = document.createElement('th');
    a.textContent = D.metric_titles[k] || k; const b = document.createElement('td'); b.textContent = D.metrics[k][l][h].toFixed(3);
    tr.append(a, b); tb.appendChild(tr); }
}
// ---- attribution: rollout / gradient relevance per layer, flow -----------------------------
function attribution(){
  const kind = S.attr, A = D.first[kind];
  $('attr-layer').disabled = !(A && A.per_layer);
  $('attr-layer-label').textContent = A && A.per_layer ? 'after layer ' + S.attrLayer : 'all layers';
  const M = attrMatrix(kind, S.attrLayer);
  if (M) heatPanel('attr', view(M, D.texts[0]), {rollout: 'contribution', gradient: 'relevance R - I', flow: 'flow'}[kind]);
  const f = $('flow-from'); f.replaceChildren();
  if (D.first.flow_from) {
    const {values, position} = D.first.flow_from, toks = D.texts[0].tokens, vmax = Math.max(...values) || 1;
    const h = document.createElement('p'); h.textContent = 'Attention flow into position ' + position + ' (' + toks[position] + ') from every input token:'; f.appendChild(h);
    const c = document.createElement('canvas'); c.width = Math.min(1200, Math.max(300, 3 * values.length)); c.height = 80; c.dataset.el = 'flow-bars';
    const ctx = c.getContext('2d'), w = c.width / values.length;
    values.forEach((v, i) => { ctx.fillStyle = '#2f6db3'; ctx.fillRect(i * w, 80 - 78 * v / vmax, Math.max(1, w - 1), 78 * v / vmax); });
    c.onmousemove = e => { const r = c.getBoundingClientRect(), i = Math.floor((e.clientX - r.left) / r.width * values.length);
      if (i >= 0 && i < values.length) $('flow-value').textContent = toks[i] + ' (' + i + '): ' + values[i].toFixed(4); };
    f.appendChild(c);
  }
}
// ---- head map (MDS of JS distances) and metric grids ---------------------------------------
function headMap(){
  const c = $('mds'), ctx = c.getContext('2d'), xy = D.xy;
  const xs = xy.map(p => p[0]), ys = xy.map(p => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  ctx.clearRect(0, 0, c.width, c.height); ctx.font = '10px sans-serif';
  xy.forEach(([x, y], i) => { const l = Math.floor(i / D.heads), h = i % D.heads;
    const px = 20 + (x - x0) / ((x1 - x0) || 1) * (c.width - 60), py = 20 + (y - y0) / ((y1 - y0) || 1) * (c.height - 40);
    ctx.fillStyle = LABEL_COLORS[D.labels[l][h]]; ctx.beginPath(); ctx.arc(px, py, 5, 0, 7); ctx.fill();
    ctx.fillStyle = '#444'; ctx.fillText(l + '.' + h, px + 6, py + 3); });
  const lg = $('legend'); lg.replaceChildren();
  for (const [k, col] of Object.entries(LABEL_COLORS)) { const s = document.createElement('span'); s.className = 'tag'; s.style.background = col; s.textContent = k; lg.appendChild(s); }
}
function metricGrids(){
  const box = $('metric-grids'); box.replaceChildren();
  for (const [k, vals] of Object.entries(D.metrics)) {
    const t = document.createElement('table'); t.className = 'mg'; const cap = document.createElement('caption'); cap.textContent = D.metric_titles[k] || k; t.appendChild(cap);
    const vmax = Math.max(1e-9, ...vals.flat());
    vals.forEach((row, l) => { const tr = document.createElement('tr'); const th = document.createElement('th'); th.textContent = 'L' + l; tr.appendChild(th);
      row.forEach((v, h) => { const td = document.createElement('td'); const c = Math.round(Math.min(1, v / vmax) * 255);
        td.style.background = 'rgb(' + LUT[3 * c] + ',' + LUT[3 * c + 1] + ',' + LUT[3 * c + 2] + ')'; td.style.color = c > 150 ? '#000' : '#fff';
        td.textContent = v.toFixed(2); td.title = 'L' + l + ' H' + h; tr.appendChild(td); }); t.appendChild(tr); });
    box.appendChild(t);
  }
}
// ---- controls ------------------------------------------------------------------------------
function refresh(){ $('hv-layer').value = S.layer; modelView(); headView(); headDetail(); attribution(); }
const sel = $('text');
D.texts.forEach((T, i) => { const o = document.createElement('option'); o.value = i; o.textContent = (i + 1) + ': ' + T.label; sel.appendChild(o); });
sel.addEventListener('change', () => { S.text = +sel.value; refresh(); });
$('texts-control').hidden = D.texts.length < 2;
const ls = $('hv-layer');
for (let l = 0; l < D.layers; l++) { const o = document.createElement('option'); o.value = l; o.textContent = 'layer ' + l; ls.appendChild(o); }
ls.addEventListener('change', () => { S.layer = +ls.value; headView(); headDetail(); });
$('words').addEventListener('change', e => { S.words = e.target.checked; refresh(); });
$('shared').addEventListener('change', e => { S.shared = e.target.checked; headDetail(); });
$('pair').addEventListener('change', e => { S.pair = e.target.value; refresh(); });
$('pair-control').hidden = !D.texts[0].segments;
const ak = $('attr-kind');
for (const k of ['rollout', 'gradient', 'flow']) if (D.first[k]) { const o = document.createElement('option'); o.value = k; o.textContent = k; ak.appendChild(o); }
ak.value = S.attr; ak.addEventListener('change', () => { S.attr = ak.value; attribution(); });
const al = $('attr-layer'); al.max = D.layers - 1; al.value = S.attrLayer;
al.addEventListener('input', () => { S.attrLayer = +al.value; attribution(); });
refresh(); headMap(); metricGrids();
root.dataset.ready = '1';
}
