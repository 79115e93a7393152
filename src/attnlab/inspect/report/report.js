// The attnlab inspection report: draws every view in the browser from the data embedded in
// the page. Plain JavaScript, no library, no request. Everything is looked up inside the
// report's own root element, so several reports live side by side in one page (a notebook).
// The maps arrive as one base64 string of gzip-compressed bytes (decompressed by the
// browser's own DecompressionStream), each weight a 16-bit code (within 1% or 1e-6).
// Text is only ever inserted with textContent.
async function attnlabReport(root){
'use strict';
const D = JSON.parse(root.querySelector('[data-el="data"]').textContent);
const $ = name => root.querySelector('[data-el="' + name + '"]');
if ($('still')) $('still').hidden = true;      // the still picture stands in where this cannot run
async function unpack(b64){
  const bin = atob(b64), u = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
  if (!D.gzip) return u;
  const s = new Blob([u]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Uint8Array(await new Response(s).arrayBuffer());
}
const BYTES = await unpack($('blob').textContent.trim());
// A weight as the report shows it: four significant digits, whatever its size (a fixed
// number of decimals reads 0.0000 for the weights of a long row).
const num = v => v === 0 ? '0' : v.toPrecision(4);
// A weight from the 16-bit code, with the digits the code carries: below the split its exact
// step (multiples of 2e-6, six decimals), above it 3 significant digits (the code is within
// 0.4%, the rounding within 0.5%: within the 1% the report promises).
const numW = v => v === 0 ? '0' : v < D.code.split ? v.toFixed(6) : v.toPrecision(3);
// count weights from byte offset off: 16-bit codes, low bytes then high bytes; below code
// D.code.small an absolute step, above it a ratio step (within 0.4% or 1e-6 of the weight)
const LUT16 = new Float32Array(65536);
for (let c = 0; c < 65536; c++) LUT16[c] = c < D.code.small ? c * D.code.step
  : D.code.split * Math.pow(D.code.ratio, c - D.code.small);
function weights(off, count){
  const m = new Float32Array(count);
  for (let i = 0; i < count; i++) m[i] = LUT16[BYTES[off + i] | (BYTES[off + count + i] << 8)];
  return m;
}
// ---- colours: viridis, 256 steps ---------------------------------------------------------
const VS = [[68,1,84],[72,40,120],[62,74,137],[49,104,142],[38,130,142],[31,158,137],
            [53,183,121],[109,205,89],[180,222,44],[253,231,37]];
const LUT = new Uint8Array(256 * 3);
for (let i = 0; i < 256; i++) { const p = i / 255 * (VS.length - 1), a = Math.min(Math.floor(p), VS.length - 2), f = p - a;
  for (let c = 0; c < 3; c++) LUT[3 * i + c] = Math.round(VS[a][c] + (VS[a + 1][c] - VS[a][c]) * f); }
const LABEL_COLORS = D.label_colors;
// ---- state -------------------------------------------------------------------------------
const S = {text: 0, layer: 0, head: 0, heads: new Set([0]), words: false, shared: false,
           cmap: D.texts[0].tokens.length > 64 ? 'log' : 'linear', query: 0,
           attr: D.first.flow ? 'flow' : 'rollout', attrLayer: D.layers - 1, pair: 'all'};
// A matrix view: values (Float32Array n*n), n, and its labels.
// A cross-attention text carries its key tokens (the source) apart from its query tokens.
function headMatrix(t, l, h){
  const T = D.texts[t], nr = T.tokens.length, cols = T.keys || T.tokens, nc = cols.length;
  const m = weights(T.offset + 2 * (l * D.heads + h) * nr * nc, nr * nc);
  return {m, n: T.keys ? null : nr, nr, nc, rows: T.tokens, cols, align: T.align};
}
const labelsOf = t => D.texts[t].labels || D.labels;
// Float32 sections of the blob (value norms, q and k of the neuron view).
const floats = (offset, count) => new Float32Array(BYTES.buffer, BYTES.byteOffset + offset, count);
// The model view's thumbnails, max-pooled in Python (a 1024-token model is not pooled here).
function thumbMatrix(t, l, h){
  const T = D.texts[t], th = T.thumbs, k = l * D.heads + h, size = th.r * th.c;
  return {m: weights(th.offset + 2 * k * size, size), nr: th.r, nc: th.c};
}
// Value-weighted attention (Kobayashi et al. 2020): alpha_ij * ||v_j||, what key j adds to the
// output of query i, beside alpha_ij, the weight alone.
function valueWeighted(M, t, l, h){
  const T = D.texts[t];
  if (T.vnorm === undefined || S.words || S.pair !== 'all') return null;
  const nk = (T.keys || T.tokens).length, vn = floats(T.vnorm + 4 * (l * D.heads + h) * nk, nk);
  const out = new Float32Array(M.m.length);
  for (let i = 0; i < M.nr; i++) for (let j = 0; j < M.nc; j++) out[i * M.nc + j] = M.m[i * M.nc + j] * vn[j];
  return {m: out, n: M.n, nr: M.nr, nc: M.nc, rows: M.rows, cols: M.cols};
}
function attrMatrix(kind, l){
  const A = D.first[kind];
  if (!A) return null;
  const n = D.texts[0].tokens.length, k = A.per_layer ? l : 0;
  const m = weights(A.offset + 2 * k * n * n, n * n);
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
// Colour of a value as a fraction of the scale's maximum: linear, square root or log (a long
// map on a linear scale is a dark square: most weights are far below the largest).
function shade(x){
  if (S.cmap === 'sqrt') return Math.sqrt(Math.max(0, x));
  if (S.cmap === 'log') return x <= 1e-4 ? 0 : 1 + Math.log10(Math.min(1, x)) / 4;
  return x;
}
function drawHeat(canvas, V, vmax, linear){
  canvas.width = V.nc; canvas.height = V.nr;
  const ctx = canvas.getContext('2d'), img = ctx.createImageData(V.nc, V.nr);
  for (let i = 0; i < V.m.length; i++) { const x = V.m[i] / vmax, c = Math.max(0, Math.min(255, Math.round((linear ? x : shade(x)) * 255)));
    img.data[4 * i] = LUT[3 * c]; img.data[4 * i + 1] = LUT[3 * c + 1]; img.data[4 * i + 2] = LUT[3 * c + 2]; img.data[4 * i + 3] = 255; }
  ctx.putImageData(img, 0, 0);
}
function colorbar(el, vmax, label){
  const c = el.querySelector('canvas'); c.width = 256; c.height = 1;
  const ctx = c.getContext('2d'), img = ctx.createImageData(256, 1);
  for (let i = 0; i < 256; i++) { img.data.set([LUT[3 * i], LUT[3 * i + 1], LUT[3 * i + 2], 255], 4 * i); }
  ctx.putImageData(img, 0, 0);
  // the low end's value: 0 on a linear or square-root scale; on the log scale (4 decades)
  // the weight below which every colour is the darkest one
  el.querySelector('.lo').textContent = S.cmap === 'log' ? '\u2264' + (vmax * 1e-4).toPrecision(1) : '0';
  el.querySelector('.hi').textContent = vmax.toPrecision(3);
  el.querySelector('.what').textContent = label + (S.cmap === 'linear' ? '' : ' (' + S.cmap + ' scale)');
}
// The alignment a model is known to follow, as white outlines on a heatmap drawn at 16 px a
// cell (only small cross-attention maps carry one).
function drawAligned(canvas, V, vmax){
  const k = 16; canvas.width = V.nc * k; canvas.height = V.nr * k;
  const ctx = canvas.getContext('2d');
  for (let i = 0; i < V.nr; i++) for (let j = 0; j < V.nc; j++) {
    const c = Math.max(0, Math.min(255, Math.round(shade(V.m[i * V.nc + j] / vmax) * 255)));
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
    $(prefix + '-value').textContent = V.rows[i] + ' (' + i + ') \u2192 ' + V.cols[j] + ' (' + j + '): ' + numW(V.m[i * V.nc + j]); };
}
// Thumbnails on a square-root scale of the map's own maximum, so a spread-out head is not
// drawn black.
function drawThumb(canvas, V){
  // square root of the map's own largest weight; log (4 decades) for long maps, whose
  // weights spread over decades
  const vmax = maxOf(V.m), m = new Float32Array(V.m.length), long = D.texts[S.text].tokens.length > 64;
  for (let i = 0; i < m.length; i++) { const x = V.m[i] / vmax; m[i] = long ? (x <= 1e-4 ? 0 : 1 + Math.log10(x) / 4) : Math.sqrt(x); }
  drawHeat(canvas, {m, nr: V.nr, nc: V.nc}, 1, true);
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
      const c = document.createElement('canvas');
      drawThumb(c, S.words || S.pair !== 'all' ? view(headMatrix(S.text, l, h), D.texts[S.text]) : thumbMatrix(S.text, l, h));
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
    // Line strength relative to what is shown: the hovered query's row, the hovered key's
    // column, else the whole map (a long causal map's rows are far below its first row's 1).
    let vmax = 1e-12;
    if (hover && hover.side === 'q') { for (let j = 0; j < nc; j++) vmax = Math.max(vmax, V.m[hover.index * nc + j]); }
    else if (hover) { for (let i = 0; i < nr; i++) vmax = Math.max(vmax, V.m[i * nc + hover.index]); }
    else vmax = maxOf(V.m);
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
  // A readable row at any length; past the viewport the head view scrolls (bertviz's way).
  const nr = V0.nr, nc = V0.nc, row = Math.max(nr, nc) > 60 ? 14 : 18;
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
  const M = view(headMatrix(S.text, l, h), D.texts[S.text]);
  heatPanel('map', M, 'attention weight');
  const VW = valueWeighted(M, S.text, l, h);
  $('vw-panel').hidden = !VW;
  if (VW) heatPanel('vw', VW, 'weight \u00d7 value norm');
  neuronView();
  const tb = $('detail-metrics'); tb.replaceChildren();
  if (D.texts[S.text].labels) return;   // the metrics are those of the main capture only
  for (const k of Object.keys(D.metrics)) { const tr = document.createElement('tr'); const a = document.createElement('th');
    a.textContent = D.metric_titles[k] || k; const b = document.createElement('td'); b.textContent = D.metrics[k][l][h].toFixed(3);
    tr.append(a, b); tb.appendChild(tr); }
}
// ---- neuron view: q of the selected query, every key's k, q o k, the score ------------------
// The score is recomputed here from the embedded float32 vectors: q . k * scale, the model's
// own input to the softmax before masks and biases.
function neuronView(){
  const T = D.texts[S.text], N = T.neuron, box = $('neuron-body');
  box.replaceChildren();
  const say = text => { const p = document.createElement('p'); p.textContent = text; box.appendChild(p); };
  $('neuron-query').hidden = !N;            // no empty dropdown where there is nothing to pick
  if (!N) { say('The model did not report its query and key vectors for this text.'); return; }
  const lay = N.layers[S.layer];
  if (!lay) { say('Layer ' + S.layer + "'s q and k are not embedded in this report (size); " +
    'embed them with show(..., neuron_layers=[' + S.layer + ']).'); return; }
  const n = T.tokens.length, keys = T.keys || T.tokens, nk = keys.length, d = N.d, h = S.head;
  const qi = Math.min(S.query, n - 1);
  const qs = floats(lay.q + 4 * (h * n + qi) * d, d), ks = floats(lay.k + 4 * h * nk * d, nk * d);
  const scale = N.scale[S.layer], scores = new Float64Array(nk);
  for (let j = 0; j < nk; j++) { let s = 0; for (let x = 0; x < d; x++) s += qs[x] * ks[j * d + x]; scores[j] = s * scale; }
  const W = headMatrix(S.text, S.layer, h);
  const sel = $('neuron-query');
  if (sel.options.length !== n) { sel.replaceChildren(); T.tokens.forEach((t, i) => {
    const o = document.createElement('option'); o.value = i; o.textContent = i + ': ' + t; sel.appendChild(o); }); }
  sel.value = qi;
  let vmax = 1e-12;
  for (let x = 0; x < d; x++) vmax = Math.max(vmax, Math.abs(qs[x]));
  for (let i = 0; i < nk * d; i++) vmax = Math.max(vmax, Math.abs(ks[i]));
  const table = document.createElement('table'); table.className = 'neuron';
  const strip = vals => { const c = document.createElement('canvas'); c.width = d; c.height = 1; c.className = 'strip';
    const ctx = c.getContext('2d'), img = ctx.createImageData(d, 1), top = Math.max(...Array.from(vals, Math.abs)) || 1;
    for (let x = 0; x < d; x++) { const t = vals[x] / top; img.data.set(t >= 0 ? [255, 255 * (1 - t), 255 * (1 - t), 255] : [255 * (1 + t), 255 * (1 + t), 255, 255], 4 * x); }
    ctx.putImageData(img, 0, 0); return c; };
  const head = document.createElement('tr');
  for (const t of ['key', 'k (' + d + ' dims)', 'q \u2218 k', 'q \u00b7 k \u00d7 scale', 'weight']) { const th = document.createElement('th'); th.textContent = t; head.appendChild(th); }
  table.appendChild(head);
  const qrow = document.createElement('tr'), qa = document.createElement('td'); qa.textContent = 'q: ' + T.tokens[qi];
  const qb = document.createElement('td'); qb.appendChild(strip(qs)); qrow.append(qa, qb); table.appendChild(qrow);
  for (let j = 0; j < nk; j++) {
    const tr = document.createElement('tr'); tr.dataset.key = j;
    const a = document.createElement('td'); a.textContent = keys[j];
    const kv = ks.subarray(j * d, (j + 1) * d), prod = new Float32Array(d);
    for (let x = 0; x < d; x++) prod[x] = qs[x] * kv[x];
    const b = document.createElement('td'); b.appendChild(strip(kv));
    const c = document.createElement('td'); c.appendChild(strip(prod));
    const e = document.createElement('td'); e.className = 'score'; e.textContent = scores[j].toFixed(5);
    const w = document.createElement('td'); w.textContent = numW(W.m[qi * W.nc + j]);
    tr.append(a, b, c, e, w); table.appendChild(tr);
  }
  box.appendChild(table);
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
    // Bars with a value axis on the left and token labels under them (every k-th past 60).
    const n = values.length, left = 46, bottom = n <= 60 ? 70 : 30, H = 110 + bottom;
    const c = document.createElement('canvas'); c.width = Math.min(1200, Math.max(360, left + 14 * Math.min(n, 80))); c.height = H; c.dataset.el = 'flow-bars';
    const ctx = c.getContext('2d'), w = (c.width - left - 8) / n, base = H - bottom;
    ctx.font = '10px sans-serif'; ctx.fillStyle = '#444'; ctx.strokeStyle = '#999';
    ctx.beginPath(); ctx.moveTo(left - 2, 8); ctx.lineTo(left - 2, base); ctx.lineTo(c.width - 4, base); ctx.stroke();
    for (const f of [0, 0.5, 1]) { const y = base - (base - 10) * f; ctx.fillText((vmax * f).toPrecision(2), 2, y + 3); ctx.beginPath(); ctx.moveTo(left - 5, y); ctx.lineTo(left - 2, y); ctx.stroke(); }
    values.forEach((v, i) => { ctx.fillStyle = '#2f6db3'; const hgt = (base - 10) * v / vmax; ctx.fillRect(left + i * w, base - hgt, Math.max(1, w - 1), hgt); });
    const every = n <= 60 ? 1 : Math.ceil(n / 30);
    ctx.fillStyle = '#333';
    for (let i = 0; i < n; i += every) { ctx.save(); ctx.translate(left + (i + 0.5) * w, base + 4); ctx.rotate(Math.PI / 2);
      ctx.fillText(n <= 60 ? toks[i].slice(0, 10) : String(i), 0, 3); ctx.restore(); }
    c.onmousemove = e => { const r = c.getBoundingClientRect(), x = (e.clientX - r.left) / r.width * c.width, i = Math.floor((x - left) / w);
      if (i >= 0 && i < n) $('flow-value').textContent = toks[i] + ' (' + i + '): ' + num(values[i]); };
    f.appendChild(c);
  }
}
// ---- head map (MDS of JS distances) and metric grids ---------------------------------------
function headMap(){
  const c = $('mds'), ctx = c.getContext('2d'), xy = D.xy;
  const xs = xy.map(p => p[0]), ys = xy.map(p => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  ctx.clearRect(0, 0, c.width, c.height); ctx.font = '10px sans-serif';
  // A label is drawn only where it overlaps no label drawn before it; every point names its
  // head under the cursor.
  const boxes = [], pts = [];
  xy.forEach(([x, y], i) => { const l = Math.floor(i / D.heads), h = i % D.heads;
    const px = 20 + (x - x0) / ((x1 - x0) || 1) * (c.width - 60), py = 20 + (y - y0) / ((y1 - y0) || 1) * (c.height - 40);
    pts.push([px, py, l + '.' + h]);
    ctx.fillStyle = LABEL_COLORS[D.labels[l][h]]; ctx.beginPath(); ctx.arc(px, py, 5, 0, 7); ctx.fill();
    const text = l + '.' + h, w = ctx.measureText(text).width, b = [px + 6, py - 6, px + 8 + w, py + 5];
    if (!boxes.some(o => b[0] < o[2] && o[0] < b[2] && b[1] < o[3] && o[1] < b[3])) {
      boxes.push(b); ctx.fillStyle = '#444'; ctx.fillText(text, px + 6, py + 3); } });
  c.onmousemove = e => { const r = c.getBoundingClientRect(), x = (e.clientX - r.left) / r.width * c.width, y = (e.clientY - r.top) / r.height * c.height;
    let best = null, dmin = 64; for (const [px, py, t] of pts) { const dd = (px - x) ** 2 + (py - y) ** 2; if (dd < dmin) { dmin = dd; best = t; } }
    c.title = best ? 'layer.head ' + best : ''; };
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
$('cmap').value = S.cmap;
$('cmap').addEventListener('change', e => { S.cmap = e.target.value; headDetail(); attribution(); });
$('neuron-query').addEventListener('change', e => { S.query = +e.target.value; neuronView(); });
$('hv-q').addEventListener('click', e => { const t = e.target.closest('.tok'); if (t) { S.query = +t.dataset.index; neuronView(); } });
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
