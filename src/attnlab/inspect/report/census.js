// The attnlab census report: draws the head grid, a head's curves, its pooled map and its
// exact rows from the JSON island. Plain JavaScript, no library, no request; everything is
// looked up inside the report's own root. Pooled maps arrive per head as zlib-compressed
// log codes (one byte per cell) and are decoded only when the head is opened. Text is only
// ever inserted with textContent.
async function attnlabCensus(root){
'use strict';
const D = JSON.parse(root.querySelector('[data-el="data"]').textContent);
const $ = name => root.querySelector('[data-el="' + name + '"]');
if ($('still')) $('still').hidden = true;
const num = v => v === 0 ? '0' : (Math.abs(v) >= 1e4 ? v.toFixed(0) : v.toPrecision(4));
const tok = i => (i >= 0 && i < D.tokens.length) ? JSON.stringify(D.tokens[i]) : '';
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

// ---- the grid: one cell per head, the statistic's mean, the label's colour and letter
const statSel = $('stat');
for (const [key, title] of D.grid){
  const o = document.createElement('option'); o.value = key; o.textContent = title;
  statSel.appendChild(o);
}
function drawGrid(){
  const g = $('cgrid'), key = statSel.value, vals = D.summary[key];
  g.replaceChildren();
  g.style.gridTemplateColumns = '60px repeat(' + D.H + ', minmax(34px, 1fr))';
  // shares and ratios on their own scale 0..1; distances from 0 to the largest
  const flat = vals.flat(), lo = 0, hi = key === 'distance' ? Math.max(...flat, 1e-12) : 1;
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
      cell.textContent = D.letters[lab] || '?';
      cell.addEventListener('mouseenter', () => {
        $('grid-value').textContent = 'L' + l + ' H' + h + ': ' + num(v) + ' (' + lab + ')';
      });
      cell.addEventListener('click', () => openHead(l, h));
      g.appendChild(cell);
    }
  }
}
statSel.addEventListener('change', drawGrid);

// ---- curves along the sequence (bin means)
function curve(name, title){
  const W = 330, H = 150, pad = 34, data = D.curves[name][layer][head];
  const cv = document.createElement('canvas'); cv.width = W; cv.height = H;
  cv.dataset.curve = name;
  const ctx = cv.getContext('2d');
  const lo = Math.min(0, ...data), hi = Math.max(...data, lo + 1e-12);
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, H);
  ctx.strokeStyle = '#999'; ctx.strokeRect(pad, 8, W - pad - 6, H - 30);
  ctx.fillStyle = '#333'; ctx.font = '11px sans-serif';
  ctx.fillText(title, pad + 4, 20);
  ctx.fillText(num(hi), 2, 14); ctx.fillText(num(lo), 2, H - 24);
  ctx.fillText('0', pad, H - 8); ctx.fillText(String(D.n - 1), W - 40, H - 8);
  ctx.strokeStyle = '#1f77b4'; ctx.lineWidth = 1.2; ctx.beginPath();
  data.forEach((v, i) => {
    const x = pad + (W - pad - 6) * (data.length > 1 ? i / (data.length - 1) : 0.5);
    const y = 8 + (H - 30) * (1 - (v - lo) / (hi - lo));
    if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
  });
  ctx.stroke();
  cv.addEventListener('mousemove', ev => {
    const r = cv.getBoundingClientRect();
    const f = ((ev.clientX - r.left) * W / r.width - pad) / (W - pad - 6);
    const i = Math.min(data.length - 1, Math.max(0, Math.round(f * (data.length - 1))));
    const a = i * D.bin, b = Math.min(D.n, a + D.bin) - 1;
    $('curve-value').textContent = title + ', positions ' + a + (b > a ? '–' + b : '') +
      ' (' + tok(a) + (b > a ? ' …' : '') + '): ' + num(data[i]);
  });
  return cv;
}
function drawCurves(){
  const box = $('curves'); box.replaceChildren();
  for (const [name, title] of D.curve_titles) box.appendChild(curve(name, title));
  $('curve-note').textContent = D.bin > 1
    ? 'Each point is the mean over ' + D.bin + ' positions (' + Math.ceil(D.n / D.bin) +
      ' bins); the head\u2019s statistics per position are exact.'
    : 'One point per position.';
}

// ---- the pooled map, decoded on demand
const cache = new Map();
async function codes(kind){
  const k = kind + layer + ',' + head;
  if (cache.has(k)) return cache.get(k);
  const bin = atob(D.maps[kind][layer][head]), u = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
  const s = new Blob([u]).stream().pipeThrough(new DecompressionStream('deflate'));
  const out = new Uint8Array(await new Response(s).arrayBuffer());
  cache.set(k, out); return out;
}
const weight = c => c === 0 ? 0 : Math.pow(10, (c - 1) * D.maps.decades / 254 - D.maps.decades);
async function drawMap(){
  const cv = $('cmap');
  if (!D.maps){ cv.hidden = true; $('map-note').textContent =
    'No pooled maps in this census (census(..., pooled=256) keeps them).'; return; }
  const M = D.maps, kind = $('pool').value, c = await codes(kind);
  let top = 0; for (const x of c) top = Math.max(top, x);
  const bottom = Math.max(1, top - 4 * 254 / M.decades);          // four decades shown
  cv.width = M.gk; cv.height = M.gq;
  const scale = Math.max(1, Math.floor(512 / Math.max(M.gk, M.gq)));
  cv.style.width = (M.gk * scale) + 'px'; cv.style.height = (M.gq * scale) + 'px';
  const ctx = cv.getContext('2d'), img = ctx.createImageData(M.gk, M.gq);
  for (let i = 0; i < c.length; i++){
    const col = c[i] === 0 ? [255, 255, 255] : color((c[i] - bottom) / Math.max(1, top - bottom));
    img.data.set([...col, 255], 4 * i);
  }
  ctx.putImageData(img, 0, 0);
  $('map-note').textContent = M.gq + ' × ' + M.gk + ' cells of ' + M.cq + ' × ' + M.ck +
    ' weights; log colour scale over four decades below the largest cell (' +
    num(weight(top)) + '), white: no weight. Values are kept to within 4.3%.';
  cv.onmousemove = ev => {
    const r = cv.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) / r.width * M.gk);
    const y = Math.floor((ev.clientY - r.top) / r.height * M.gq);
    if (x < 0 || y < 0 || x >= M.gk || y >= M.gq) return;
    const q0 = y * M.cq, q1 = Math.min(D.n, q0 + M.cq) - 1;
    const k0 = x * M.ck, k1 = Math.min(D.n, k0 + M.ck) - 1;
    $('map-value').textContent = 'queries ' + q0 + '–' + q1 + ' (' + tok(q0) + ' …), keys ' +
      k0 + '–' + k1 + ' (' + tok(k0) + ' …): ' + (kind === 'mean' ? 'mean ' : 'largest ') +
      '≈ ' + num(weight(c[y * M.gk + x]));
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
    o.textContent = q + ' ' + tok(q); sel.appendChild(o);
  });
}
function drawRow(){
  const cv = $('row-canvas'), table = $('row-table'), R = D.rows[String(layer)];
  const W = 900, H = 130; cv.width = W; cv.height = H;
  const ctx = cv.getContext('2d'); ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, H);
  table.replaceChildren();
  if (!R){ $('row-value').textContent = 'no exact rows kept for this layer'; return; }
  const r = Number($('row').value) || 0, row = R.heads[head][r], q = R.index[r];
  const top = Math.max(...row.w, 1e-12);
  ctx.strokeStyle = '#999'; ctx.strokeRect(30, 6, W - 36, H - 26);
  ctx.fillStyle = '#333'; ctx.font = '11px sans-serif';
  ctx.fillText('0', 30, H - 6); ctx.fillText(String(D.n - 1), W - 40, H - 6);
  ctx.fillText('largest ' + num(top), 34, 18);
  const qx = 30 + (W - 36) * q / Math.max(1, D.n - 1);
  ctx.strokeStyle = '#d62728'; ctx.beginPath(); ctx.moveTo(qx, 6); ctx.lineTo(qx, H - 20);
  ctx.stroke();
  ctx.strokeStyle = '#1f77b4';
  row.keys.forEach((k, i) => {
    const x = 30 + (W - 36) * k / Math.max(1, D.n - 1);
    ctx.beginPath(); ctx.moveTo(x, H - 20); ctx.lineTo(x, H - 20 - (H - 26) * row.w[i] / top);
    ctx.stroke();
  });
  $('row-value').textContent = 'query ' + q + ' ' + tok(q) + ': its ' + row.keys.length +
    ' largest weights, exact (red: the query); the other keys hold ' + num(row.rest) + '.';
  const hd = document.createElement('tr');
  for (const t of ['key', 'token', 'weight']){
    const th = document.createElement('th'); th.textContent = t; hd.appendChild(th);
  }
  table.appendChild(hd);
  row.keys.slice(0, 12).forEach((k, i) => {
    const tr = document.createElement('tr');
    for (const t of [String(k), tok(k), num(row.w[i])]){
      const td = document.createElement('td'); td.textContent = t; tr.appendChild(td);
    }
    table.appendChild(tr);
  });
}
$('row').addEventListener('change', drawRow);

function openHead(l, h){
  layer = l; head = h;
  root.querySelectorAll('.cell').forEach(c => c.classList.toggle('sel',
    Number(c.dataset.layer) === l && Number(c.dataset.head) === h));
  $('head-title').textContent = 'Layer ' + l + ', head ' + h + ': ' + D.labels[l][h];
  drawCurves(); fillRows(); drawRow(); return drawMap();
}

// ---- keys that receive the most
const rt = $('received');
const hd = document.createElement('tr');
for (const t of ['key', 'token', 'received (mean over heads)']){
  const th = document.createElement('th'); th.textContent = t; hd.appendChild(th);
}
rt.appendChild(hd);
for (const [k, v] of D.top_received){
  const tr = document.createElement('tr');
  for (const t of [String(k), tok(k), num(v)]){
    const td = document.createElement('td'); td.textContent = t; tr.appendChild(td);
  }
  rt.appendChild(tr);
}
drawGrid();
root.dataset.painted = String(performance.now());
await openHead(0, 0);
root.dataset.ready = '1';
}
