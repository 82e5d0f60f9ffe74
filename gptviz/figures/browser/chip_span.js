// A span of query tokens on Streamlit's pills (gptviz/figures/browser/chip_span.py): a drag across the chips, or a
// click then a shift-click, reports [start, end). A plain click stays the pills' own (one token). The listeners sit on
// the window, in the capture phase, once per page: the pills are redrawn by Streamlit, the window stays, and a
// shift-click must be taken before the pills see it. Only the chips' outline is touched, never their text.

function chipsOf(s) {
  const group = document.querySelector(`.st-key-${s.data.chips} [role="radiogroup"]`);
  return group ? Array.from(group.children).filter((el) => el.tagName === "BUTTON") : [];
}

function chipAt(s, x, y) {
  const el = document.elementFromPoint(x, y);
  const chip = el && el.closest ? el.closest("button") : null;
  const i = chip ? chipsOf(s).indexOf(chip) : -1;
  return i < 0 ? null : i;
}

function mark(s, a, b) {  // the span being picked, outlined until the page draws it ([a, b) empty: none)
  chipsOf(s).forEach((el, i) => {
    el.style.outline = i >= a && i < b ? `2px dashed ${s.data.highlight}` : "";
    el.style.outlineOffset = i >= a && i < b ? "-2px" : "";
  });
}

function send(s, a, b) {  // stamped: the same span picked again (after a click between) is news too
  if (a !== s.data.start || b !== s.data.end) s.setStateValue("span", { start: a, end: b, at: Date.now() });
}

function listen(s) {
  window.addEventListener("pointerdown", (ev) => {
    if (ev.button !== 0 || !ev.isPrimary) return;
    const i = chipAt(s, ev.clientX, ev.clientY);
    if (i === null) return;
    if (ev.shiftKey) {  // the span from the last chip pressed to this one; the pills must not pick this one alone
      ev.stopPropagation();
      ev.preventDefault();
      s.eatClick = true;
      const anchor = s.anchor === undefined ? s.data.start : s.anchor;
      const a = Math.min(anchor, i), b = Math.max(anchor, i) + 1;
      mark(s, a, b);
      send(s, a, b);
      return;
    }
    s.eatClick = false;
    s.anchor = i;
    s.drag = { anchor: i, last: i };
  }, true);
  window.addEventListener("pointermove", (ev) => {
    if (!s.drag) return;
    const j = chipAt(s, ev.clientX, ev.clientY);
    if (j === null || j === s.drag.last) return;
    s.drag.last = j;
    mark(s, Math.min(s.drag.anchor, j), Math.max(s.drag.anchor, j) + 1);
  }, true);
  window.addEventListener("pointerup", () => {
    const d = s.drag;
    s.drag = null;
    if (!d || d.last === d.anchor) return;  // a click, or a drag back to where it began: the pills' one token
    send(s, Math.min(d.anchor, d.last), Math.max(d.anchor, d.last) + 1);
  }, true);
  window.addEventListener("pointercancel", () => { s.drag = null; mark(s, 0, 0); }, true);
  window.addEventListener("click", (ev) => {  // the click that follows a shift-press on a chip
    if (s.eatClick && chipAt(s, ev.clientX, ev.clientY) !== null) { ev.stopPropagation(); ev.preventDefault(); }
    s.eatClick = false;
  }, true);
}

export default function (component) {
  const { data, setStateValue } = component;
  const s = window.__gvChipSpan || (window.__gvChipSpan = {});
  s.setStateValue = setStateValue;
  const json = JSON.stringify(data);
  if (s.json !== json) {  // the page drew a new span (its CSS outlines it): the dragged outline goes
    s.json = json;
    s.data = data;
    mark(s, 0, 0);
    if (s.anchor === undefined || s.anchor >= data.T) s.anchor = data.start;
  }
  if (!s.listening) { s.listening = true; listen(s); }
}
