// The attnlab census report: draws the head grid (every cell's value, a colour bar with the
// label's threshold), a head's curves, its pooled map (axes, ticks, colour bar) and its exact
// rows from the JSON island. Plain JavaScript, no library, no request; everything is looked
// up inside the report's own root. Pooled maps arrive per head as zlib-compressed log codes
// (one byte per cell) and are decoded only when the head is opened. Text is only ever
// inserted with textContent.
async function attnlabCensus(root){
'use strict';
const D = JSON.parse(root.querySelector('[data-el="data"]').textContent);
const $ = name => root.querySelector('[data-el="' + name + '"]');
if ($('still')) $('still').hidden = true;
const num = v => v === 0 ? '0' : Math.abs(v) >= 100 ? Math.round(v).toLocaleString('en')
  : Math.abs(v) < 1e-3 ? v.toExponential(2) : v.toPrecision(3);
const cellText = (key, v) => key === 'distance' ? Math.round(v).toLocaleString('en') : v.toFixed(2);
// a token with the text around it, read as text: each piece carries its own spacing (the
// tokenizer's, see attnlab.inspect.tokens.reading_pieces), so only the token itself is marked
// (highlighted in tables, between white brackets in plain text), about 40 characters each side
const PIECES = D.text && D.text.length === D.tokens.length ? D.text : D.tokens;
const SIDE = 40;
function ctxParts(i){
  const show = t => t.replace(/\r?\n/g, '\u21b5');
  let before = '', a = i, after = '', b = i + 1;
  while (a > 0 && before.length < SIDE) { a -= 1; before = PIECES[a] + before; }
  while (b < PIECES.length && after.length < SIDE) { after += PIECES[b]; b += 1; }
  const t = PIECES[i], lead = /^\s*$/.test(t) ? '' : t.match(/^\s*/)[0];
  return [(a > 0 ? '\u2026' : '') + show(before) + lead, show(t.slice(lead.length)),
          show(after) + (b < PIECES.length ? '\u2026' : '')];
}
function ctxt(i){
  if (i < 0 || i >= PIECES.length) return '';
  const [before, token, after] = ctxParts(i);
  return before + '\u27e6' + token + '\u27e7' + after;
}
const ctxCell = i => {
  const td = document.createElement('td'); td.className = 'ctx';
  if (i < 0 || i >= PIECES.length) return td;
  const [before, token, after] = ctxParts(i), mark = document.createElement('mark');
  mark.textContent = token;
  td.append(document.createTextNode(before), mark, document.createTextNode(after));
  return td;
};
// viridis, sampled at 9 stops
const STOPS = [[68,1,84],[71,44,122],[59,81,139],[44,113,142],[33,144,141],[39,173,129],
               [92,200,99],[170,220,50],[253,231,37]];
function color(t){
  t = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(t)), f = t - i;
  return STOPS[i].map((a, k) => Math.round(a + f * (STOPS[i + 1][k] - a)));
}
const css = c => 'rgb(' + c.join(',') + ')';
let layer = 0, head = 0;

// ---- the grid: one cell per head, its value printed, the label's letter and border colour
const statSel = $('stat');
for (const [key, title, unit] of D.grid){
  const o = document.createElement('option'); o.value = key; o.textContent = title + ' (' + unit + ')';
  statSel.appendChild(o);
}
function scaleOf(key){
  const flat = D.summary[key].flat();
  return [0, key === 'distance' ? Math.max(...flat, 1e-12) : 1];
}
function drawGrid(){
  const g = $('cgrid'), key = statSel.value, vals = D.summary[key];
  const unit = D.grid.find(x => x[0] === key)[2];
  g.replaceChildren();
  g.style.gridTemplateColumns = '60px repeat(' + D.H + ', minmax(54px, 1fr))';
  const [lo, hi] = scaleOf(key);
  g.appendChild(document.createElement('div'));
  for (let h = 0; h < D.H; h++){
    const d = document.createElement('div'); d.className = 'lab'; d.textContent = 'H' + h;
    g.appendChild(d);
  }
  for (let l = 0; l < D.L; l++){
    const d = document.createElement('div'); d.className = 'lab';
    d.textContent = 'L' + l; d.title = D.layer_names[l] || ''; g.appendChild(d);
    for (let h = 0; h < D.H; h++){
      const v = vals[l][h], lab = D.labels[l][h];
      const c = color(hi > lo ? (v - lo) / (hi - lo) : 0.5);
      const cell = document.createElement('div');
      cell.className = 'cell' + (l === layer && h === head ? ' sel' : '');
      cell.dataset.layer = l; cell.dataset.head = h;
      cell.style.background = css(c);
      cell.style.color = (c[0] * 0.3 + c[1] * 0.6 + c[2] * 0.1) > 140 ? '#000' : '#fff';
      cell.style.borderColor = D.colors[lab] || '#888';
      cell.textContent = cellText(key, v) + ' ' + (D.letters[lab] || '?');
      cell.title = 'L' + l + ' H' + h + ': ' + lab;
      cell.addEventListener('mouseenter', () => {
        let s = 'L' + l + ' H' + h + ': ' + num(v) + ' ' + unit + ' (' + lab + ')';
        if (D.trained && D.summary_past[key]) s += '; from ' + D.trained.toLocaleString('en') +
          ' on: ' + num(D.summary_past[key][l][h]) + ' (' + D.labels_past[l][h] + ')';
        $('grid-value').textContent = s;
      });
      cell.addEventListener('click', () => openHead(l, h));
      g.appendChild(cell);
    }
  }
  drawGridBar(key, lo, hi, unit);
}
// the grid's colour bar, its ends labelled, the label's threshold marked
function drawGridBar(key, lo, hi, unit){
  const cv = $('grid-bar'), ctx = cv.getContext('2d'), W = cv.width, x0 = 10, x1 = W - 10;
  ctx.clearRect(0, 0, W, cv.height);
  for (let x = x0; x <= x1; x++){ ctx.fillStyle = css(color((x - x0) / (x1 - x0))); ctx.fillRect(x, 4, 1, 14); }
  ctx.fillStyle = '#333'; ctx.font = '11px sans-serif'; ctx.textAlign = 'left';
  ctx.fillText(cellText(key, lo), x0, 32);
  ctx.textAlign = 'right'; ctx.fillText(cellText(key, hi) + ' ' + unit, x1, 32);
  const t = D.thresholds[key];
  cv.dataset.threshold = t ? String(t[0]) : '';
  if (t && t[0] > lo && t[0] < hi){
    const x = x0 + (x1 - x0) * (t[0] - lo) / (hi - lo);
    ctx.strokeStyle = '#d62728'; ctx.lineWidth = 2; ctx.beginPath(); ctx.moveTo(x, 1); ctx.lineTo(x, 21); ctx.stroke();
    ctx.fillStyle = '#d62728'; ctx.textAlign = x > W / 2 ? 'right' : 'left';
    ctx.fillText('label threshold ' + t[0] + ' (' + t[1] + ')', x + (x > W / 2 ? -4 : 4), 44);
  }
  ctx.textAlign = 'left';
}
statSel.addEventListener('change', drawGrid);
statSel.value = D.first_stat;

// ---- curves along the sequence (bin means), each on its own range, the trained length marked
// Each head's curves arrive as one zlib-compressed run of float16 (or float32) values, curve
// after curve, decoded when the head is opened.
async function inflate(b64){
  const bin = atob(b64), u = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
  const s = new Blob([u]).stream().pipeThrough(new DecompressionStream('deflate'));
  return new Uint8Array(await new Response(s).arrayBuffer());
}
function half(h){                       // an IEEE float16 as a number
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * Math.pow(2, -14) * f / 1024;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * Math.pow(2, e - 15) * (1 + f / 1024);
}
const curveCache = new Map();
async function curvesOf(l, h){
  const key = l + ',' + h;
  if (curveCache.has(key)) return curveCache.get(key);
  const bytes = await inflate(D.curves[l][h]), view = new DataView(bytes.buffer);
  const n = bytes.length / D.curve_bytes, all = new Float64Array(n);
  for (let i = 0; i < n; i++) all[i] = D.curve_bytes === 2 ? half(view.getUint16(2 * i, true))
                                                            : view.getFloat32(4 * i, true);
  const out = {};
  D.curve_titles.forEach(([name], c) => { out[name] = Array.from(all.subarray(c * D.curve_bins, (c + 1) * D.curve_bins)); });
  curveCache.set(key, out); return out;
}
function curve(data, name, title, unit){
  const W = 340, H = 160, left = 46, right = 8, top = 22, bottom = 30;
  const cv = document.createElement('canvas'); cv.width = W; cv.height = H;
  cv.dataset.curve = name;
  const ctx = cv.getContext('2d');
  // the first bin holds the first token (the sink, the query with one key): an outlier that
  // would flatten the rest, so the scale is that of the other bins and the first is clipped
  const rest = data.length > 2 ? data.slice(1) : data;
  let lo = Math.min(...data), hi = Math.max(...rest);
  if (hi - lo < 1e-12) { hi = lo + 1e-12; }
  const off = data[0] > hi;
  const X = i => left + (W - left - right) * (data.length > 1 ? i / (data.length - 1) : 0.5);
  const Y = v => top + (H - top - bottom) * (1 - (Math.min(hi, Math.max(lo, v)) - lo) / (hi - lo));
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, H);
  ctx.strokeStyle = '#999'; ctx.strokeRect(left, top, W - left - right, H - top - bottom);
  ctx.fillStyle = '#333'; ctx.font = '11px sans-serif';
  ctx.fillText(title + ' (' + unit + ')', left, 14);
  ctx.textAlign = 'right'; ctx.fillText(num(hi), left - 3, top + 8); ctx.fillText(num(lo), left - 3, H - bottom);
  ctx.textAlign = 'left'; ctx.fillText('0', left, H - bottom + 12);
  ctx.textAlign = 'right'; ctx.fillText((D.n - 1).toLocaleString('en'), W - right, H - bottom + 12);
  ctx.textAlign = 'center'; ctx.fillText('position', (left + W - right) / 2, H - 4);
  ctx.textAlign = 'left';
  if (D.trained){
    const x = left + (W - left - right) * D.trained / Math.max(1, D.n - 1);
    ctx.strokeStyle = '#d62728'; ctx.setLineDash([4, 3]); ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, H - bottom); ctx.stroke();
    ctx.setLineDash([]); ctx.fillStyle = '#d62728'; ctx.fillText('trained ' + D.trained.toLocaleString('en'), Math.min(x + 3, W - 90), top + 10);
  }
  ctx.strokeStyle = '#1f77b4'; ctx.lineWidth = 1.2; ctx.beginPath();
  data.forEach((v, i) => { if (i) ctx.lineTo(X(i), Y(v)); else ctx.moveTo(X(i), Y(v)); });
  ctx.stroke();
  if (off){
    ctx.fillStyle = '#555'; ctx.fillText('first bin ' + num(data[0]) + ' (off scale)', left + 4, top + 22);
  }
  cv.addEventListener('mousemove', ev => {
    const r = cv.getBoundingClientRect();
    const f = ((ev.clientX - r.left) * W / r.width - left) / (W - left - right);
    const i = Math.min(data.length - 1, Math.max(0, Math.round(f * (data.length - 1))));
    const a = i * D.bin, b = Math.min(D.n, a + D.bin) - 1;
    $('curve-value').textContent = title + ', positions ' + a + (b > a ? '\u2013' + b : '') +
      ' (' + ctxt(a) + (b > a ? ' \u2026' : '') + '): ' + num(data[i]) + ' ' + unit;
  });
  return cv;
}
async function drawCurves(){
  const box = $('curves'), mine = await curvesOf(layer, head);
  box.replaceChildren();
  for (const [name, title, unit] of D.curve_titles) box.appendChild(curve(mine[name], name, title, unit));
  $('curve-note').textContent = (D.bin > 1
    ? 'Each point is the mean over ' + D.bin + ' positions (' + Math.ceil(D.n / D.bin) +
      ' bins); the head\u2019s statistics per position are exact. '
    : 'One point per position. ') + 'Each curve spans its own range.' +
    (D.trained ? ' Dashed: the length the model was trained at.' : '');
}

// ---- the pooled map, decoded on demand, drawn with its axes and colour bar
const cache = new Map();
async function codes(kind){
  const k = kind + layer + ',' + head;
  if (cache.has(k)) return cache.get(k);
  const out = await inflate(D.maps[kind][layer][head]);
  cache.set(k, out); return out;
}
const weight = c => c === 0 ? 0 : Math.pow(10, (c - 1) * D.maps.decades / 254 - D.maps.decades);
const MAP = {left: 64, top: 10, side: 512, bar: 96, bottom: 44};
async function drawMap(){
  const frame = $('cmap-frame'), img = $('cmap');
  if (!D.maps){ frame.hidden = true; $('map-note').textContent =
    'No pooled maps in this census (census(..., pooled=256) keeps them).'; return; }
  const M = D.maps, kind = $('pool').value, c = await codes(kind);
  let top = 0; for (const x of c) top = Math.max(top, x);
  const bottom = Math.max(1, top - 4 * 254 / M.decades);          // four decades shown
  img.width = M.gk; img.height = M.gq;
  const ictx = img.getContext('2d'), data = ictx.createImageData(M.gk, M.gq);
  for (let i = 0; i < c.length; i++){
    const col = c[i] === 0 ? [255, 255, 255] : color((c[i] - bottom) / Math.max(1, top - bottom));
    data.data.set([...col, 255], 4 * i);
  }
  ictx.putImageData(data, 0, 0);
  const S = MAP.side, w = S * M.gk / Math.max(M.gk, M.gq), h = S * M.gq / Math.max(M.gk, M.gq);
  frame.width = MAP.left + S + MAP.bar; frame.height = MAP.top + S + MAP.bottom;
  const ctx = frame.getContext('2d');
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, frame.width, frame.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(img, MAP.left, MAP.top, w, h);
  ctx.strokeStyle = '#999'; ctx.strokeRect(MAP.left, MAP.top, w, h);
  ctx.fillStyle = '#333'; ctx.font = '11px sans-serif';
  for (const f of [0, 0.5, 1]){                                    // ticks at 0, N/2, N-1
    const p = Math.round(f * (D.n - 1)), x = MAP.left + w * f, y = MAP.top + h * f;
    ctx.textAlign = 'center'; ctx.fillText(p.toLocaleString('en'), Math.min(Math.max(x, MAP.left + 10), MAP.left + w - 10), MAP.top + h + 14);
    ctx.textAlign = 'right'; ctx.fillText(p.toLocaleString('en'), MAP.left - 4, Math.min(Math.max(y + 4, MAP.top + 10), MAP.top + h));
  }
  ctx.textAlign = 'center'; ctx.fillText('key position', MAP.left + w / 2, MAP.top + h + 32);
  ctx.save(); ctx.translate(14, MAP.top + h / 2); ctx.rotate(-Math.PI / 2); ctx.fillText('query position', 0, 0); ctx.restore();
  if (D.trained){                                   // the trained length on both axes
    const f = D.trained / Math.max(1, D.n - 1);
    ctx.strokeStyle = '#d62728'; ctx.setLineDash([4, 3]); ctx.beginPath();
    ctx.moveTo(MAP.left + w * f, MAP.top); ctx.lineTo(MAP.left + w * f, MAP.top + h);
    ctx.moveTo(MAP.left, MAP.top + h * f); ctx.lineTo(MAP.left + w, MAP.top + h * f); ctx.stroke(); ctx.setLineDash([]);
  }
  const bx = MAP.left + w + 14, bh = h;                            // the colour bar (log)
  for (let y = 0; y < bh; y++){ ctx.fillStyle = css(color(1 - y / bh)); ctx.fillRect(bx, MAP.top + y, 12, 1); }
  ctx.textAlign = 'left'; ctx.fillStyle = '#333';
  ctx.fillText(num(weight(top)), bx + 15, MAP.top + 9);
  ctx.fillText('\u2264' + num(weight(bottom)), bx + 15, MAP.top + bh);
  ctx.fillText('log', bx + 15, MAP.top + bh / 2);
  frame.dataset.drawn = '1';
  $('map-note').textContent = M.gq + ' \u00d7 ' + M.gk + ' cells of ' + M.cq + ' \u00d7 ' + M.ck +
    ' weights (queries \u00d7 keys); log colour scale over four decades below the largest cell; ' +
    'white: no weight (masked, or below 1e-9). Values are kept to within 4.3%.';
  frame.onmousemove = ev => {
    const r = frame.getBoundingClientRect();
    const px = (ev.clientX - r.left) * frame.width / r.width - MAP.left;
    const py = (ev.clientY - r.top) * frame.height / r.height - MAP.top;
    const x = Math.floor(px / w * M.gk), y = Math.floor(py / h * M.gq);
    if (x < 0 || y < 0 || x >= M.gk || y >= M.gq) return;
    const q0 = y * M.cq, q1 = Math.min(D.n, q0 + M.cq) - 1;
    const k0 = x * M.ck, k1 = Math.min(D.n, k0 + M.ck) - 1;
    const where = 'queries ' + q0 + '\u2013' + q1 + ', keys ' + k0 + '\u2013' + k1 + ': ';
    const code = c[y * M.gk + x];
    $('map-value').textContent = where + (D.causal[layer] && k0 > q1
      ? 'masked (future keys: a causal head never sees them)'
      : code === 0 ? 'no weight (masked)'
      : (kind === 'mean' ? 'mean weight \u2248 ' : 'largest weight \u2248 ') + num(weight(code)));
  };
}
$('pool').addEventListener('change', drawMap);

// ---- exact rows
function fillRows(){
  const sel = $('row'), R = D.rows[String(layer)];
  sel.replaceChildren();
  if (!R){ const o = document.createElement('option'); o.textContent = 'none kept'; sel.appendChild(o); }
  else R.index.forEach((q, r) => {
    const o = document.createElement('option'); o.value = r;
    o.textContent = q + ' ' + ctxt(q); sel.appendChild(o);
  });
}
function drawRow(){
  const cv = $('row-canvas'), table = $('row-table'), R = D.rows[String(layer)];
  const W = 900, H = 140; cv.width = W; cv.height = H;
  const ctx = cv.getContext('2d'); ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, H);
  table.replaceChildren();
  if (!R){ $('row-value').textContent = 'no exact rows kept for this layer'; return; }
  const r = Number($('row').value) || 0, row = R.heads[head][r], q = R.index[r];
  const top = Math.max(...row.w, 1e-12);
  ctx.strokeStyle = '#999'; ctx.strokeRect(30, 6, W - 36, H - 36);
  ctx.fillStyle = '#333'; ctx.font = '11px sans-serif';
  ctx.fillText('0', 30, H - 18); ctx.textAlign = 'right'; ctx.fillText(String(D.n - 1), W - 6, H - 18);
  ctx.textAlign = 'center'; ctx.fillText('key position', W / 2, H - 4); ctx.textAlign = 'left';
  ctx.fillText('weight (largest ' + num(top) + ')', 34, 18);
  const qx = 30 + (W - 36) * q / Math.max(1, D.n - 1);
  ctx.strokeStyle = '#d62728'; ctx.beginPath(); ctx.moveTo(qx, 6); ctx.lineTo(qx, H - 30);
  ctx.stroke();
  ctx.strokeStyle = '#1f77b4';
  row.keys.forEach((k, i) => {
    const x = 30 + (W - 36) * k / Math.max(1, D.n - 1);
    ctx.beginPath(); ctx.moveTo(x, H - 30); ctx.lineTo(x, H - 30 - (H - 36) * row.w[i] / top);
    ctx.stroke();
  });
  $('row-value').textContent = 'query ' + q + ' ' + ctxt(q) + ': its ' + row.keys.length +
    ' largest weights, exact (red line: the query); the other keys hold ' + num(row.rest) +
    ' of the row.';
  const hd = document.createElement('tr');
  for (const t of ['key', 'in context', 'weight (share of the row)']){
    const th = document.createElement('th'); th.textContent = t; hd.appendChild(th);
  }
  table.appendChild(hd);
  row.keys.slice(0, 12).forEach((k, i) => {
    const tr = document.createElement('tr');
    const a = document.createElement('td'); a.textContent = String(k); tr.appendChild(a);
    tr.appendChild(ctxCell(k));
    // the rows are exact (not coded): four significant digits
    const b = document.createElement('td'); b.textContent = row.w[i].toPrecision(4); tr.appendChild(b);
    table.appendChild(tr);
  });
}
$('row').addEventListener('change', drawRow);

function openHead(l, h){
  layer = l; head = h;
  root.querySelectorAll('.cell').forEach(c => c.classList.toggle('sel',
    Number(c.dataset.layer) === l && Number(c.dataset.head) === h));
  $('head-title').textContent = 'Layer ' + l + ', head ' + h + ': ' + D.labels[l][h] +
    (D.trained && D.labels_past.length ? ' (from ' + D.trained.toLocaleString('en') + ' on: ' +
     D.labels_past[l][h] + ')' : '');
  fillRows(); drawRow();
  // the head drawn last says so (a click opens a head without waiting for it)
  return Promise.all([drawCurves(), drawMap()]).then(() => { root.dataset.opened = l + ',' + h; });
}

// ---- keys that receive the most
$('received-note').textContent = 'Attention received: each key\u2019s weight summed over the ' +
  'queries, averaged over every layer and head (1 = one query\u2019s whole attention). ' +
  (D.sinks ? D.sinks + ' head(s) are sinks: the first token collects much of it.'
           : 'No head is a sink here.');
function tokenTable(el, rows, title){
  if (!el || !rows) return;
  const hd = document.createElement('tr');
  for (const t of ['key', 'in context', title]){
    const th = document.createElement('th'); th.textContent = t; hd.appendChild(th);
  }
  el.appendChild(hd);
  for (const [k, v] of rows){
    const tr = document.createElement('tr');
    const a = document.createElement('td'); a.textContent = String(k); tr.appendChild(a);
    tr.appendChild(ctxCell(k));
    const b = document.createElement('td'); b.textContent = num(v); tr.appendChild(b);
    el.appendChild(tr);
  }
}
tokenTable($('received'), D.top_received, 'received (queries\u2019 worth)');
if (D.top_received_vw){
  $('received-vw-note').hidden = false;
  $('received-vw-note').textContent = 'Value-weighted (Kobayashi et al. 2020): each key\u2019s ' +
    'share of what the heads write, a_ij \u2016v_j W_O\u2016 over the row\u2019s sum, summed ' +
    'over the queries and averaged over every layer and head. A key that takes weight but ' +
    'writes little drops here.';
  tokenTable($('received-vw'), D.top_received_vw, 'value-weighted received');
}
tokenTable($('matters-tokens'), D.top_relevance, 'relevance');
drawGrid();
root.dataset.painted = String(performance.now());
await openHead(0, 0);
root.dataset.ready = '1';
}
