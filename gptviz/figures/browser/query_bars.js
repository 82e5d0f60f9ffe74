// Where one query token looks (gptviz/figures/browser/query_bars.py): a bar per key it can see, drawn on a canvas.
// Token text is only ever drawn on the canvas or set as textContent: it is never parsed as HTML.

const FONT = "11px Inter, 'Segoe UI', Helvetica, Arial, sans-serif";

function element(tag, cls, parent) {
  const el = document.createElement(tag);
  el.className = cls;
  parent.appendChild(el);
  return el;
}

// A "nice" axis top at or above the largest weight: the first of 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 times a
// power of ten that reaches it.
function axisTop(max) {
  if (!(max > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(max)));
  for (const m of [1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= max - 1e-12) return m * p;
  return 10 * p;
}

function draw(s) {
  const { data, ui } = s;
  ui.title.textContent = data.title;
  const n = data.weights.length;
  const width = Math.max(200, s.root.clientWidth || 400), height = data.height;
  const dpr = window.devicePixelRatio || 1;
  const c = ui.canvas;
  c.width = Math.round(width * dpr); c.height = Math.round(height * dpr);
  c.style.width = `${width}px`; c.style.height = `${height}px`;
  const ctx = c.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = FONT;
  const longest = data.labels.reduce((m, t) => Math.max(m, ctx.measureText(t).width), 0);
  const left = 52, right = 8, top = 8, bottom = Math.min(90, longest * 0.87 + 40);
  const plotW = width - left - right, plotH = height - top - bottom;
  const slotW = plotW / n, top1 = axisTop(Math.max(...data.weights));
  s.geom = { left, top, slotW, plotH, top1 };
  Object.assign(c.dataset, { left, top, slot: slotW, bars: n });  // where the bars are, for a test's pointer
  const colour = getComputedStyle(s.root).color || "#31333f";
  // grid and y ticks
  ctx.strokeStyle = "rgba(128,128,128,0.25)"; ctx.fillStyle = colour; ctx.lineWidth = 1;
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (let t = 0; t <= 4; t++) {
    const v = top1 * t / 4, y = top + plotH - plotH * t / 4;
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + plotW, y); ctx.stroke();
    ctx.fillText(Number(v.toPrecision(3)).toString(), left - 6, y);
  }
  // bars: the query's own key (a span's own keys) in the highlight colour
  const gap = slotW > 4 ? slotW * 0.15 : 0, q0 = data.span_start ?? data.query;
  for (let k = 0; k < n; k++) {
    const h = plotH * data.weights[k] / top1;
    ctx.fillStyle = k >= q0 && k <= data.query ? data.highlight : data.colour;
    ctx.fillRect(left + k * slotW + gap / 2, top + plotH - h, Math.max(0.5, slotW - gap), h);
  }
  // key labels, thinned so they never overlap (one every `stride` keys, 13 px apart at least)
  const stride = Math.max(1, Math.ceil(13 / Math.max(slotW, 1e-6)));
  ctx.fillStyle = colour; ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (let k = 0; k < n; k += stride) {
    ctx.save();
    ctx.translate(left + (k + 0.5) * slotW, top + plotH + 4);
    ctx.rotate(-Math.PI / 3);
    ctx.fillText(data.labels[k], 0, 0, bottom - 24);
    ctx.restore();
  }
  ctx.textAlign = "center"; ctx.textBaseline = "bottom";
  ctx.fillText("key (looked at)", left + plotW / 2, height - 2);
  ctx.save();
  ctx.translate(10, top + plotH / 2); ctx.rotate(-Math.PI / 2); ctx.textBaseline = "middle";
  ctx.fillText(data.value_name || "weight", 0, 0);
  ctx.restore();
}

function showTip(s, ev) {
  const { data, ui, geom } = s;
  if (!geom) return;
  const r = ui.canvas.getBoundingClientRect();
  const x = ev.clientX - r.left - geom.left, y = ev.clientY - r.top - geom.top;
  const k = Math.floor(x / geom.slotW);
  if (x < 0 || y < 0 || y > geom.plotH || k >= data.weights.length) { ui.tip.style.display = "none"; return; }
  const q0 = data.span_start ?? data.query;
  const from = q0 === data.query ? `'${data.labels[data.query]}'` : `tokens ${q0}-${data.query}`;
  ui.tip.textContent = `${from} → '${data.labels[k]}': ${data.value_name || "weight"} ` +
    `${data.weights[k].toPrecision(3)}\nkey position ${k}`;
  const box = s.root.getBoundingClientRect();  // the tip is placed in the root, above which the title sits
  ui.tip.style.display = "block";
  ui.tip.style.left = `${Math.min(ev.clientX - box.left + 12, box.width - 220)}px`;
  ui.tip.style.top = `${ev.clientY - box.top + 12}px`;
}

export default function (component) {
  const { data, parentElement } = component;
  const root = parentElement.querySelector(".gv-qbars");
  const s = root.__gv || (root.__gv = { root });
  if (!s.ui) {
    s.ui = { title: element("div", "gv-qtitle", root), canvas: element("canvas", "gv-qcanvas", root),
             tip: element("div", "gv-qtip", root) };
    s.ui.canvas.addEventListener("mousemove", (ev) => showTip(s, ev));
    s.ui.canvas.addEventListener("mouseleave", () => { s.ui.tip.style.display = "none"; });
    s.width = root.clientWidth;
    new ResizeObserver(() => {
      if (root.clientWidth !== s.width) { s.width = root.clientWidth; draw(s); }
    }).observe(root);
  }
  s.data = data;
  draw(s);
}
