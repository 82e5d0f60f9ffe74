// The Attention page's heatmap (gptviz/attention_map.py): every head of the layers sent, drawn on a canvas.
// A layer or head pick redraws here at once, then goes back to Python (setStateValue) so the other views follow.
// Token text is only ever set as textContent or drawn on the canvas: it is never parsed as HTML.

const FONT = "11px Inter, 'Segoe UI', Helvetica, Arial, sans-serif";
const LUT_SIZE = 1024;

// base64 to uint16 levels. Uint8Array.fromBase64 where the browser has it (Chromium 140+); else a plain loop, which
// is several times faster than Uint8Array.from(string, fn) (that one was 40 ms of each live redraw here).
function decode(b64) {
  let bytes;
  if (typeof Uint8Array.fromBase64 === "function") {
    bytes = Uint8Array.fromBase64(b64);
  } else {
    const text = atob(b64);
    bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  }
  return new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length >> 1);
}

function colourTable(stops) {
  // stops: [[position, [r, g, b]], ...] -> LUT_SIZE x [r, g, b] by linear interpolation
  const lut = new Uint8ClampedArray(LUT_SIZE * 3);
  for (let i = 0; i < LUT_SIZE; i++) {
    const t = i / (LUT_SIZE - 1);
    let k = 1;
    while (k < stops.length - 1 && stops[k][0] < t) k++;
    const [s0, c0] = stops[k - 1], [s1, c1] = stops[k];
    const f = s1 > s0 ? Math.min(1, Math.max(0, (t - s0) / (s1 - s0))) : 0;
    for (let ch = 0; ch < 3; ch++) lut[i * 3 + ch] = c0[ch] + f * (c1[ch] - c0[ch]);
  }
  return lut;
}

function hexRgb(hex) {
  const v = parseInt(hex.slice(1), 16);
  return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
}

function element(tag, cls, parent) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (parent) parent.appendChild(el);
  return el;
}

function build(root) {
  const ui = {};
  ui.title = element("div", "gv-title", root);
  ui.sub = element("div", "gv-sub", root);
  const pickers = element("div", "gv-pickers", root);
  ui.layers = element("div", "gv-layers", pickers);
  ui.heads = element("div", "gv-heads", pickers);
  ui.note = element("div", "gv-note", root);
  const plot = element("div", "gv-plot", root);
  ui.canvas = element("canvas", "gv-heat", plot);
  ui.tip = element("div", "gv-tip", plot);
  ui.zoombox = element("div", "gv-zoombox", plot);
  ui.hint = element("div", "gv-hint", root);
  ui.cell = element("div", "gv-cell", root);
  ui.bar = element("canvas", "gv-bar", root);
  ui.plot = plot;
  return ui;
}

// Where head h's full pattern sits in the weights sent (-1: not sent; a long prompt sends the picked head alone).
function slot(s, h) {
  return s.data.heads.indexOf(h);
}

// A Q x K pattern of `arr` from `off` as an image: keys at or past a row's end are the causal mask (grey), keys
// before its start slid out of the context window (lighter grey).
function paint(s, arr, off, Q, K, start, end) {
  const levels = s.data.levels;
  let top = 1;
  if (s.data.scale === "max") {  // the largest weight outside a one-key row (always 1: the first token sees itself)
    top = 0;
    for (let i = 0; i < Q; i++) {
      if (end[i] - start[i] < 2) continue;
      for (let j = start[i]; j < end[i]; j++) top = Math.max(top, arr[off + i * K + j]);
    }
    top = top > 0 ? top / levels : 1;
  }
  const img = new ImageData(K, Q);
  const px = img.data, lut = s.lut, masked = s.maskedRgb, gone = s.outRgb, sqrt = s.data.scale === "sqrt";
  for (let i = 0; i < Q; i++) {
    for (let j = 0; j < K; j++) {
      const o = (i * K + j) * 4;
      if (j >= end[i] || j < start[i]) {
        const c = j >= end[i] ? masked : gone;
        px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2];
      } else {
        let v = arr[off + i * K + j] / levels / top;
        v = Math.min(1, sqrt ? Math.sqrt(v) : v);
        const c = Math.round(v * (LUT_SIZE - 1)) * 3;
        px[o] = lut[c]; px[o + 1] = lut[c + 1]; px[o + 2] = lut[c + 2];
      }
      px[o + 3] = 255;
    }
  }
  return { img, top };
}

// Layer position p, head h in full (null when that head was not sent).
function patternImage(s, p, h) {
  const { Q, K, row_start: start, row_end: end } = s.data;
  const k = slot(s, h);
  if (k < 0) return null;
  return paint(s, s.weights, (p * s.data.heads.length + k) * Q * K, Q, K, start, end);
}

// A head's thumbnail: its full pattern, or the max-pooled one a long prompt sends (a block is masked or out of
// the window when all of its cells are).
function thumbImage(s, p, h) {
  const t = s.data.thumbs;
  if (!t) return patternImage(s, p, h);
  if (!s.thumbRows) {
    const { row_start: start, row_end: end, Q } = s.data, b = t.block;
    s.thumbRows = { start: [], end: [] };
    for (let bi = 0; bi < t.Q; bi++) {
      let lo = Infinity, hi = 0;
      for (let i = bi * b; i < Math.min(Q, (bi + 1) * b); i++) { lo = Math.min(lo, start[i]); hi = Math.max(hi, end[i]); }
      s.thumbRows.start.push(Math.floor(lo / b)); s.thumbRows.end.push(Math.ceil(hi / b));
    }
  }
  return paint(s, s.thumbWeights, (p * (s.data.n_heads + 1) + h) * t.Q * t.K, t.Q, t.K, s.thumbRows.start, s.thumbRows.end);
}

// An image on a scratch canvas, to drawImage from. One kept per size (reset when sizes pile up): a new canvas per
// image and per redraw was a tenth of a live redraw's renderer time in Chromium (canvas resources made and freed).
const scratch = new Map();
function imageCanvas(img) {
  const size = `${img.width}x${img.height}`;
  let c = scratch.get(size);
  if (!c) {
    if (scratch.size >= 4) scratch.clear();
    c = document.createElement("canvas");
    c.width = img.width; c.height = img.height;
    scratch.set(size, c);
  }
  c.getContext("2d").putImageData(img, 0, 0);
  return c;
}

function sized(canvas, w, h) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(w * dpr));
  canvas.height = Math.max(1, Math.round(h * dpr));
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.imageSmoothingEnabled = false;
  return ctx;
}

function headName(s, h) {
  return s.data.head_names[h];
}

function drawPickers(s) {
  const { ui, data } = s;
  const p = data.layers.indexOf(s.layer);
  ui.layers.replaceChildren();
  for (let l = 0; l < data.n_layers; l++) {
    const b = element("button", l === s.layer ? "gv-layer gv-on" : "gv-layer", ui.layers);
    b.textContent = `layer ${l}`;
    b.onclick = () => pick(s, l, s.head);
  }
  // the head cells and their thumbnail canvases are kept from draw to draw (made again only when the count
  // changes): a live view redraws twice a second
  if (ui.heads.children.length !== data.n_heads + 1) {
    ui.heads.replaceChildren();
    for (let h = 0; h <= data.n_heads; h++) {
      const cell = element("button", "gv-head", ui.heads);
      sized(element("canvas", "gv-thumb", cell), 44, 44);
      element("span", "", cell);
      cell.onclick = () => pick(s, s.layer, h);
    }
  }
  for (let h = 0; h <= data.n_heads; h++) {
    const cell = ui.heads.children[h];
    cell.className = h === s.head ? "gv-head gv-on" : "gv-head";
    cell.title = headName(s, h);
    cell.lastChild.textContent = h === data.n_heads ? "mean" : `head ${h}`;
    const thumb = cell.firstChild;
    const ctx = thumb.getContext("2d");
    ctx.clearRect(0, 0, 44, 44);
    const pic = p >= 0 ? thumbImage(s, p, h) : null;
    if (pic) ctx.drawImage(imageCanvas(pic.img), 0, 0, 44, 44);
  }
}

function labelStride(cell, px) {
  return Math.max(1, Math.ceil(px / Math.max(cell, 1e-6)));
}

function drawHeatmap(s) {
  const { ui, data } = s;
  const p = data.layers.indexOf(s.layer);
  ui.title.textContent = `${data.title_prefix} ${s.layer}, ${headName(s, s.head)}${data.title_suffix}`;
  ui.sub.textContent = (data.head_notes && data.head_notes[s.layer] && data.head_notes[s.layer][s.head]) || "";
  const full = p >= 0 && slot(s, s.head) >= 0;
  ui.note.textContent = p < 0 ? `Loading layer ${s.layer}...`
    : !full ? `Loading ${headName(s, s.head)} in full...`
    : data.thumbs ? `A long prompt: the thumbnails are pooled (the largest weight of each ${data.thumbs.block} x ` +
                    `${data.thumbs.block} block); the picked head is drawn in full.` : "";
  const { Q, K } = data;
  // the visible window: every cell, or the rows and keys a drag zoomed into (double-click resets)
  if (!s.view || !s.zoomed) s.view = { r0: 0, r1: Q, c0: 0, c1: K };
  const v = s.view;
  v.r1 = Math.min(v.r1, Q); v.c1 = Math.min(v.c1, K);
  if (v.r0 >= v.r1 || v.c0 >= v.c1) { s.zoomed = false; s.view = { r0: 0, r1: Q, c0: 0, c1: K }; }
  const { r0, r1, c0, c1 } = s.view;
  const nr = r1 - r0, nc = c1 - c0;
  ui.hint.textContent = s.zoomed
    ? `Zoomed: queries ${r0}-${r1 - 1}, keys ${c0}-${c1 - 1} of ${Q} x ${K}. Double-click to see all.`
    : data.why ? "Drag over the map to zoom; click a cell to ask why the head attends there."
    : "Drag over the map to zoom; hover a cell for its weight.";
  if (data.keys) {  // the keyboard shortcuts, listed where they act
    const keys = element("span", "gv-keys", ui.hint);
    keys.append(" Keys: ");
    for (const [k, what] of [["[", ""], ["]", " layer, "], [",", ""], [".", " head"]]) {
      element("kbd", "", keys).textContent = k;
      keys.append(what);
    }
  }
  const width = Math.max(240, ui.plot.clientWidth || s.root.clientWidth || 600);
  const ctx0 = ui.canvas.getContext("2d");
  ctx0.font = FONT;
  const longest = (labels) => labels.reduce((m, t) => Math.max(m, ctx0.measureText(t).width), 0);
  const left = Math.min(130, longest(data.row_labels.slice(r0, r1)) + 40);
  const bottom = Math.min(110, longest(data.col_labels.slice(c0, c1)) * 0.87 + 44);
  const top = 6, right = 10;
  const cell = Math.max(0.5, Math.min((width - left - right) / nc, (data.height - top - bottom) / nr));
  const w = cell * nc, h = cell * nr;
  const ctx = sized(ui.canvas, left + w + right, top + h + bottom);
  s.geom = { left, top, cell };
  Object.assign(ui.canvas.dataset, { left, top, cell });  // where the cells are, for a test's pointer
  ctx.clearRect(0, 0, left + w + right, top + h + bottom);
  if (!full) return;
  const { img, top: maxTop } = patternImage(s, p, s.head);
  s.top = maxTop;
  ctx.drawImage(imageCanvas(img), c0, r0, nc, nr, left, top, w, h);
  const q = data.query, q0 = data.query_start ?? q;  // a span of queries q0..q: their rows outlined as one band
  ctx.strokeStyle = data.highlight;
  ctx.lineWidth = 2;
  const y0 = Math.max(q0, r0), y1 = Math.min(q, r1 - 1);
  if (y1 >= y0) {
    const a = Math.max(data.row_start[q], c0), b = Math.min(data.row_end[q], c1);
    if (b > a) ctx.strokeRect(left + (a - c0) * cell, top + (y0 - r0) * cell, (b - a) * cell, (y1 - y0 + 1) * cell);
  }
  const c = s.cell;
  if (c && c.i >= r0 && c.i < r1 && c.j >= c0 && c.j < c1) {  // the cell clicked (its panel is under the map)
    ctx.lineWidth = 2.5;
    ctx.strokeRect(left + (c.j - c0) * cell, top + (c.i - r0) * cell, cell, cell);
    ctx.lineWidth = 2;
  }
  if (data.divider > c0 && data.divider < c1) {  // where the prompt ends and the generated tokens begin
    const x = left + (data.divider - c0) * cell;
    ctx.setLineDash([4, 3]); ctx.lineWidth = 1.5;
    ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke(); ctx.setLineDash([]);
  }
  // labels, thinned so they never overlap (one every `stride` tokens)
  const colour = getComputedStyle(s.root).color || "#31333f";
  ctx.font = FONT;
  const stride = labelStride(cell, 13);
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (let i = r0; i < r1; i += stride) {
    ctx.fillStyle = i >= q0 && i <= q ? data.highlight : colour;
    ctx.fillText(data.row_labels[i], left - 4, top + (i - r0 + 0.5) * cell, left - 24);
  }
  for (let j = c0; j < c1; j += stride) {
    ctx.save();
    ctx.translate(left + (j - c0 + 0.5) * cell, top + h + 4);
    ctx.rotate(-Math.PI / 3);
    ctx.fillStyle = colour;
    ctx.fillText(data.col_labels[j], 0, 0, bottom - 24);
    ctx.restore();
  }
  ctx.fillStyle = colour;
  ctx.textAlign = "center"; ctx.textBaseline = "bottom";
  ctx.fillText(data.x_title, left + w / 2, top + h + bottom - 2);
  ctx.save();
  ctx.translate(10, top + h / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textBaseline = "middle";
  ctx.fillText(data.y_title, 0, 0);
  ctx.restore();
  drawBar(s);
}

function drawBar(s) {
  const { ui, data } = s;
  const w = 220, h = 34;
  const ctx = sized(ui.bar, w, h);
  const x0 = 10, x1 = w - 14, y0 = 2, bh = 10;
  for (let x = x0; x < x1; x++) {
    const v = (x - x0) / (x1 - x0 - 1);  // colour position in [0, 1]
    const c = Math.round(v * (LUT_SIZE - 1)) * 3;
    ctx.fillStyle = `rgb(${s.lut[c]},${s.lut[c + 1]},${s.lut[c + 2]})`;
    ctx.fillRect(x, y0, 1, bh);
  }
  const colour = getComputedStyle(s.root).color || "#31333f";
  ctx.fillStyle = colour; ctx.strokeStyle = colour;
  ctx.font = FONT; ctx.textAlign = "center"; ctx.textBaseline = "top";
  const sqrt = data.scale === "sqrt", top = data.scale === "max" ? s.top : 1;
  const ticks = sqrt ? [0, 0.05, 0.25, 0.5, 1] : [0, 0.25, 0.5, 0.75, 1];
  for (const t of ticks) {
    const value = t * (sqrt ? 1 : top);
    const pos = sqrt ? Math.sqrt(t) : t;
    const x = x0 + pos * (x1 - x0 - 1);
    ctx.fillRect(x, y0 + bh, 1, 3);
    ctx.fillText(Number(value.toPrecision(2)).toString(), x, y0 + bh + 4);
  }
}

function showTip(s, ev) {
  const { ui, data, geom } = s;
  const p = data.layers.indexOf(s.layer), k = slot(s, s.head);
  if (!geom || p < 0 || k < 0) return;
  const r = ui.canvas.getBoundingClientRect();
  const x = ev.clientX - r.left - geom.left, y = ev.clientY - r.top - geom.top;
  const i = s.view.r0 + Math.floor(y / geom.cell), j = s.view.c0 + Math.floor(x / geom.cell);
  if (x < 0 || y < 0 || i >= s.view.r1 || j >= s.view.c1) { ui.tip.style.display = "none"; return; }
  const off = (p * data.heads.length + k) * data.Q * data.K;
  const at = data.row_positions[i];
  if (j >= data.row_end[i]) ui.tip.textContent = "masked: a token cannot look at later tokens";
  else if (j < data.row_start[i]) ui.tip.textContent = "out of the context window: the model no longer saw this token";
  else ui.tip.textContent = `'${data.col_labels[at]}' → '${data.col_labels[j]}': weight ` +
    `${(s.weights[off + i * data.K + j] / data.levels).toPrecision(3)}\n` +
    `${data.row_names[i]}query position ${at}, key position ${j}`;
  ui.tip.style.display = "block";
  ui.tip.style.left = `${Math.min(ev.clientX - r.left + 12, r.width - 260)}px`;
  ui.tip.style.top = `${ev.clientY - r.top + 12}px`;
}

function cellAt(s, ev) {
  const r = s.ui.canvas.getBoundingClientRect(), g = s.geom;
  return { x: ev.clientX - r.left, y: ev.clientY - r.top,
           i: s.view.r0 + Math.floor((ev.clientY - r.top - g.top) / g.cell),
           j: s.view.c0 + Math.floor((ev.clientX - r.left - g.left) / g.cell) };
}

function startZoom(s, ev) {
  if (!s.geom || ev.button !== 0) return;
  s.drag = cellAt(s, ev);
  ev.preventDefault();
  // follow the drag outside the canvas too, only while it lasts
  const move = (e) => moveZoom(s, e);
  const up = (e) => { window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); endZoom(s, e); };
  window.addEventListener("mousemove", move);
  window.addEventListener("mouseup", up);
}

function moveZoom(s, ev) {
  if (!s.drag) return;
  const now = cellAt(s, ev), box = s.ui.zoombox;
  box.style.display = "block";
  box.style.left = `${Math.min(s.drag.x, now.x)}px`; box.style.top = `${Math.min(s.drag.y, now.y)}px`;
  box.style.width = `${Math.abs(now.x - s.drag.x)}px`; box.style.height = `${Math.abs(now.y - s.drag.y)}px`;
}

function endZoom(s, ev) {
  if (!s.drag) return;
  const a = s.drag, b = cellAt(s, ev), v = s.view;
  s.drag = null;
  s.ui.zoombox.style.display = "none";
  if (Math.abs(a.x - b.x) < 6 && Math.abs(a.y - b.y) < 6) { clickCell(s, a); return; }  // a click, not a drag
  const clamp = (x, lo, hi) => Math.max(lo, Math.min(hi, x));
  const r0 = clamp(Math.min(a.i, b.i), v.r0, v.r1 - 1), r1 = clamp(Math.max(a.i, b.i), v.r0, v.r1 - 1) + 1;
  const c0 = clamp(Math.min(a.j, b.j), v.c0, v.c1 - 1), c1 = clamp(Math.max(a.j, b.j), v.c0, v.c1 - 1) + 1;
  s.view = { r0, r1, c0, c1 };
  s.zoomed = true;
  drawHeatmap(s);
}

// A click on a cell: its details under the map, and (a single head, a cell the query can see) a button that asks
// Python to open the QK decomposition of that score. A masked cell or the mean of the heads says why there is none.
function clickCell(s, c) {
  const { data, view } = s;
  if (!data.why || c.i < view.r0 || c.i >= view.r1 || c.j < view.c0 || c.j >= view.c1) return;
  s.cell = { i: c.i, j: c.j };
  draw(s);
}

function drawCell(s) {
  const { ui, data } = s, c = s.cell;
  ui.cell.replaceChildren();
  if (!c || !data.why || c.i >= data.Q || c.j >= data.K) return;
  const at = data.row_positions[c.i], q = data.col_labels[at], k = data.col_labels[c.j];
  const text = element("span", "", ui.cell);
  if (c.j >= data.row_end[c.i]) {
    text.textContent = `Query ${at} '${q}' cannot look at key ${c.j} '${k}': it comes later, and the causal mask ` +
      "sets its weight to 0, so there is no score to explain. Click a cell on or below the diagonal.";
    return;
  }
  const p = data.layers.indexOf(s.layer), k0 = slot(s, s.head);
  const w = p >= 0 && k0 >= 0 ? s.weights[(p * data.heads.length + k0) * data.Q * data.K + c.i * data.K + c.j] / data.levels : null;
  text.textContent = `'${q}' (query ${at}) → '${k}' (key ${c.j}): weight ${w === null ? "…" : w.toPrecision(3)}. `;
  if (s.head === data.n_heads) {
    element("span", "", ui.cell).textContent = "The mean of the heads has no single score: pick a head to ask why it attends here.";
    return;
  }
  const b = element("button", "gv-why", ui.cell);
  b.textContent = `Why does L${s.layer}H${s.head} attend here?`;
  b.onclick = () => s.setStateValue("why", { layer: s.layer, head: s.head, query: at, key: c.j, at: Date.now() });
}

function draw(s) {
  drawPickers(s);
  drawHeatmap(s);
  drawCell(s);
}

// Keyboard shortcuts ([ ] layer, , . head, the mean last) for the map that asked for them (data.keys): the last one
// drawn. Never while the visitor types in a field, nor with a modifier (the browser's own shortcuts).
function onKey(ev) {
  const s = window.__gvKeyMap;
  if (!s || !s.root.isConnected || !s.data || !s.data.keys) return;
  if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.defaultPrevented) return;
  const t = ev.composedPath()[0];  // the element typed in, even inside a shadow root
  if (t && t.nodeType === 1 && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName) ||
      t.closest('[role="combobox"], [role="textbox"], [contenteditable="true"]'))) return;
  const n = s.data.n_layers, H = s.data.n_heads + 1;
  const step = { "[": [-1, 0], "]": [1, 0], ",": [0, -1], ".": [0, 1] }[ev.key];
  if (!step) return;
  ev.preventDefault();
  pick(s, (s.layer + step[0] + n) % n, (s.head + step[1] + H) % H);
}

function pick(s, layer, head) {
  if (layer === s.layer && head === s.head) return;
  s.layer = layer; s.head = head;
  draw(s);
  s.setStateValue("pick", { layer, head });
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  const root = parentElement.querySelector(".gv-map");
  const s = root.__gv || (root.__gv = { root, ui: build(root) });
  s.setStateValue = setStateValue;
  if (s.data === undefined || s.data.weights !== data.weights) s.weights = decode(data.weights);
  const thumbs = data.thumbs ? data.thumbs.weights : null;
  if (s.data === undefined || (s.data.thumbs ? s.data.thumbs.weights : null) !== thumbs) {
    s.thumbWeights = thumbs ? decode(thumbs) : null;
  }
  s.thumbRows = null;  // the pooled rows' extents, recomputed from these rows on first use
  if (s.data !== undefined && s.data.col_labels.join("\u0000") !== data.col_labels.join("\u0000")) s.cell = null;
  const fromPython = `${data.layer}/${data.head}`;
  if (s.fromPython !== fromPython) {  // Python picked (its own pickers, or a table row): follow it
    s.fromPython = fromPython;
    s.layer = data.layer; s.head = data.head;
  }
  s.data = data;
  s.lut = colourTable(data.colors);
  s.maskedRgb = hexRgb(data.masked);
  s.outRgb = hexRgb(data.out_of_window);
  draw(s);
  if (data.keys) {
    window.__gvKeyMap = s;
    if (window.__gvOnKey !== onKey) {  // one listener per page, this module's
      if (window.__gvOnKey) document.removeEventListener("keydown", window.__gvOnKey);
      window.__gvOnKey = onKey;
      document.addEventListener("keydown", onKey);
    }
  }
  if (!s.observer) {
    s.width = root.clientWidth;
    s.observer = new ResizeObserver(() => {
      if (root.clientWidth !== s.width) { s.width = root.clientWidth; drawHeatmap(s); }
    });
    s.observer.observe(root);
  }
  if (!s.listening) {
    s.listening = true;
    s.ui.canvas.addEventListener("mousemove", (ev) => showTip(s, ev));
    s.ui.canvas.addEventListener("mouseleave", () => { s.ui.tip.style.display = "none"; });
    s.ui.canvas.addEventListener("mousedown", (ev) => startZoom(s, ev));
    // a double-click resets: the whole map, and no cell picked (its two clicks had picked one)
    s.ui.canvas.addEventListener("dblclick", () => { s.zoomed = false; s.cell = null; draw(s); });
  }
  return () => {
    if (s.observer) { s.observer.disconnect(); s.observer = null; }
    if (window.__gvKeyMap === s) window.__gvKeyMap = null;
  };
}
