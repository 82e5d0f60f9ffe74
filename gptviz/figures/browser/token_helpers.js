// Helpers the token views share (token_rows.js, token_span.js): gptviz.figures.browser.asset puts this file before
// each of their scripts, so both colour and build tokens one way.

function colourAt(stops, t) {
  t = Math.min(1, Math.max(0, t));
  let k = 1;
  while (k < stops.length - 1 && stops[k][0] < t) k++;
  const [s0, c0] = stops[k - 1], [s1, c1] = stops[k];
  const f = s1 > s0 ? Math.min(1, Math.max(0, (t - s0) / (s1 - s0))) : 0;
  return c0.map((c, ch) => Math.round(c + f * (c1[ch] - c)));
}

function element(tag, cls, parent, text) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  if (parent) parent.appendChild(el);
  return el;
}
