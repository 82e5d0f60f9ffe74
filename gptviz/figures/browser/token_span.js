// The prompt's tokens, a span picked by dragging across them (or a click, then a shift-click), each token coloured
// by the attention summed from (or to) the span (gptviz/figures/browser/token_span.py computes the sums). Pointer
// events, so a finger drags too. Token text is only ever set as textContent, never as HTML.

// colourAt and element: token_helpers.js, put before this script

function draw(s) {
  const { root, data } = s;
  root.replaceChildren();
  const legend = element("div", "gv-span-legend", root);
  element("span", "", legend, `${data.value_name}: 0`);
  const bar = element("span", "gv-span-scale", legend);
  bar.style.background = `linear-gradient(to right, ${data.colors.map(([p, [r, g, b]]) =>
    `rgb(${r},${g},${b}) ${(p * 100).toFixed(1)}%`).join(", ")})`;
  element("span", "", legend, data.cmax.toPrecision(3));
  const line = element("div", "gv-span-text", root);
  s.spans = data.tokens.map((t, i) => {
    const v = data.values[i];
    const span = element("span", "gv-stok", line, t);
    span.dataset.position = i;
    if (v === null) {
      span.classList.add("gv-sgrey");
      span.title = `${i} '${t}': ${data.direction === "from" ? "after the span: it cannot look here"
                                                             : "before the span: it cannot look at it"}`;
    } else {
      const u = v / data.cmax, [r, g, b] = colourAt(data.colors, u);
      span.style.background = `rgb(${r},${g},${b})`;
      if (u > 0.6) span.style.color = "#fff";
      span.dataset.value = v;
      span.title = `${i} '${t}': ${data.value_name} ${v.toFixed(4)}`;
    }
    return span;
  });
  mark(s, data.start, data.end);
}

function mark(s, a, b) {  // outline [a, b)
  s.spans.forEach((el, i) => {
    el.classList.toggle("gv-sin", i >= a && i < b);
    el.style.outlineColor = s.data.highlight;
  });
}

function positionAt(s, ev) {
  // the component lives in a shadow root: the document's elementFromPoint would stop at its host
  const scope = s.root.getRootNode();
  const el = (scope.elementFromPoint ? scope : document).elementFromPoint(ev.clientX, ev.clientY);
  const tok = el && el.closest ? el.closest(".gv-stok") : null;
  return tok ? Number(tok.dataset.position) : null;
}

function listen(s) {
  s.root.addEventListener("pointerdown", (ev) => {
    const i = positionAt(s, ev);
    if (i === null || ev.button !== 0) return;
    ev.preventDefault();
    const anchor = ev.shiftKey && s.anchor !== undefined ? s.anchor : i;
    s.anchor = anchor;
    s.drag = { anchor, last: i };
    mark(s, Math.min(anchor, i), Math.max(anchor, i) + 1);
    const move = (e) => {
      const j = positionAt(s, e);
      if (j === null || !s.drag) return;
      s.drag.last = j;
      mark(s, Math.min(s.drag.anchor, j), Math.max(s.drag.anchor, j) + 1);
    };
    const up = () => {
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", up);
      const d = s.drag;
      s.drag = null;
      if (!d) return;
      const a = Math.min(d.anchor, d.last), b = Math.max(d.anchor, d.last) + 1;
      if (a !== s.data.start || b !== s.data.end) s.setStateValue("span", [a, b]);
    };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  });
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  const root = parentElement.querySelector(".gv-span");
  const s = root.__gv || (root.__gv = { root });
  s.setStateValue = setStateValue;
  const json = JSON.stringify(data);
  if (s.json !== json) {  // a rerun with the same span keeps the DOM
    s.json = json;
    s.data = data;
    draw(s);
    if (s.anchor === undefined || s.anchor >= data.tokens.length) s.anchor = data.start;
  }
  if (!s.listening) { s.listening = true; listen(s); }
}
