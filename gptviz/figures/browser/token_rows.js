// Rows of coloured tokens (gptviz/figures/browser/token_rows.py): each row's context right-aligned up to its peak
// token, so the peaks line up as in a concordance. Token text is only ever set as textContent, never as HTML.

// colourAt and element: token_helpers.js, put before this script

function tokenSpan(data, row, i, parent) {
  const v = row.values[i];
  const span = element("span", "gv-tok", parent, row.tokens[i]);
  if (v === null) {
    span.classList.add("gv-none");
  } else {
    const t = Math.max(0, v) / data.cmax;
    const [r, g, b] = colourAt(data.colors, t);
    span.style.background = `rgb(${r},${g},${b})`;
    // white text on a dark cell: by its lightness, since a colour-blind-safe scale (cividis) is light at its top
    if (0.299 * r + 0.587 * g + 0.114 * b < 145) span.style.color = "#fff";
  }
  if (i === row.peak) {
    span.classList.add("gv-peak");
    span.style.outlineColor = data.highlight;
  }
  span.title = `'${row.tokens[i]}' ${data.value_name} ${v === null ? "none" : v.toFixed(3)}\n${row.hover}`;
}

function legend(data, parent) {
  const box = element("div", "gv-legend", parent);
  element("span", "", box, `${data.value_name} 0`);
  const bar = element("span", "gv-scale", box);
  const stops = data.colors.map(([s, [r, g, b]]) => `rgb(${r},${g},${b}) ${(s * 100).toFixed(1)}%`);
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  element("span", "", box, data.cmax.toPrecision(3));
}

function draw(root, data) {
  root.replaceChildren();
  legend(data, root);
  for (const row of data.rows) {
    const line = element("div", "gv-row", root);
    element("div", "gv-name", line, row.name);
    const text = element("div", "gv-text", line);
    const left = element("div", "gv-left", text);
    const inner = element("span", "gv-inner", left);
    for (let i = 0; i < row.peak; i++) tokenSpan(data, row, i, inner);
    const right = element("div", "gv-right", text);
    for (let i = row.peak; i < row.tokens.length; i++) tokenSpan(data, row, i, right);
  }
}

export default function (component) {
  const { data, parentElement } = component;
  const root = parentElement.querySelector(".gv-rows");
  if (root.__gvData !== JSON.stringify(data)) {  // a rerun with the same examples keeps the DOM
    root.__gvData = JSON.stringify(data);
    draw(root, data);
  }
}
