"""Every interaction a visitor makes often, timed in a real browser from the input event to the final drawn state
(issue 60), on the bundled model and on gpt2-small (random weights); p50 and p95 over repetitions, the machine's load
beside them, and which interactions are over their budget.

How one interaction is timed, all by the page's own clock (performance.now; Playwright's round trips are not in it):
  - the clock starts at the action's input event (pointerdown, or the key that sends, not a modifier);
  - "drawn": the first painted frame at which the interaction's own condition holds (the map titled with the new
    head, a new figure on the new page...), never a spinner or a stale element (Streamlit marks a rerun's old
    elements data-stale);
  - "final": the painted frame after the last change the page makes in answer (a DOM mutation anywhere but the
    status widget and tooltips), once the script run has ended and nothing changed for a second; what it reports;
  - a page switch also reports its first figure: the first frame with a figure (Plotly, or one of the app's
    components: the map, the query bars, the example rows) that was not on the page before;
  - beside them, the server's CPU seconds from the action to the final state (/proc): what the script runs cost,
    steadier than the clock on a shared machine.
Budgets (the issue's): p95 <= 500 ms for an in-page interaction, <= 1 s from a page switch to its first figure, <= 3 s
from a cold server's first request to the first attention map. The live page at "as fast as it writes" is read
against the engine: its N tokens within 1.1x the engine's own time plus 0.3 s.

    python -m benchmarks latency                        # both models, 5 repetitions (about 20 minutes on 2 cores)
    python -m benchmarks latency -- --models bundled --repeats 3
    python -m benchmarks latency -- --only head layer tabs     # some interactions (names: --help)

The app runs on a loopback port (GPTVIZ_TEST_PORTS=LOW-HIGH picks it from a range); Chromium is Debian's.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import quote

from benchmarks import run_folder
from benchmarks.bench_browser import FREE_PACE, MODELS, cold_start, engine_tokens_per_s, prompt_of
from benchmarks.load_test import ARGS, CHROMIUM, ROOT, Server
from benchmarks.servers import cpu_seconds

IN_PAGE, PAGE_SWITCH, COLD = 0.5, 1.0, 3.0  # budgets, seconds at p95
QUIET_MS = 1000  # no change for this long after the run ends: the page is final
LIVE_TOKENS = 60
READING_S = 3.0  # a new visitor's time on the first screen before a view below it

# Installed in every page before the app's scripts: `gv.arm(condition)` starts a watch, the input event starts its
# clock; gv.result() reads it. Component roots live in open shadow roots (Streamlit's isolated components), which
# document.querySelectorAll does not enter: gv.deep does.
INIT_JS = r"""(() => {
  const FIG = '.js-plotly-plot, .gv-map, .gv-qbars, .gv-rows';
  // not drawn for the eye: the app's Plotly warm-up figure (gptviz/app/display.py), out of sight, and the select
  // boxes' screen-reader announcements (a 1-pixel region at the page's corner; a pick's "N options available" changed
  // there after the page was final); their own nodes added to or removed from the body count as nothing either
  const UNSEEN = '.gv-plotly-warm, [data-live-announcer], [role="log"][aria-live]';
  const IGNORED = '[data-testid="stStatusWidget"], [data-testid="stHeader"], [data-testid="stToolbar"], ' +
                  '[data-testid="stDecoration"], .hoverlayer, [data-baseweb="tooltip"], [role="tooltip"], ' + UNSEEN;
  const deep = (sel) => {
    const out = [...document.querySelectorAll(sel)];
    for (const host of document.querySelectorAll('div')) {
      if (host.shadowRoot) out.push(...host.shadowRoot.querySelectorAll(sel));
    }
    return out;
  };
  // an element's closest match in the document, across the shadow root it sits in
  const closest = (el, sel) => {
    const root = el.getRootNode();
    return el.closest(sel) || (root instanceof ShadowRoot ? root.host.closest(sel) : null);
  };
  const stale = (el) => !!closest(el, '[data-stale="true"]');
  const unseen = (n) => n.nodeType === 1 && (n.matches(UNSEEN) || !!n.querySelector(UNSEEN));
  // an element outside Streamlit's own, by its tags up to the body (--verbose)
  const chain = (el) => {
    const out = [];
    for (let e = el; e && e !== document.body && out.length < 5; e = e.parentElement) {
      const role = e.getAttribute('role'), cls = typeof e.className === 'string' ? e.className.split(' ')[0] : '';
      const tag = e.tagName.toLowerCase() + (e.id ? '#' + e.id : '');
      out.push(tag + (role ? `[role=${role}]` : '') + (cls ? '.' + cls : ''));
    }
    return out.join(' < ');
  };
  // what a figure shows now: a new value is a new drawing
  const token = (el) => el.classList.contains('js-plotly-plot') ? el.data :
    el.classList.contains('gv-rows') ? el.__gvData : (el.__gv && el.__gv.data);
  const drawn = (el) => el.classList.contains('js-plotly-plot') ? !!el.querySelector('.main-svg') :
    el.classList.contains('gv-rows') ? !!el.querySelector('.gv-row') : !!(el.__gv && el.__gv.data);
  const figures = () => deep(FIG).filter((el) => drawn(el) && !stale(el) && !el.closest(UNSEEN));
  const text = (re) => [...document.querySelectorAll('[data-testid="stMarkdownContainer"], ' +
    '[data-testid="stCaptionContainer"], [data-testid="stText"], p')]
    .some((el) => !stale(el) && re.test(el.textContent));
  const gv = window.gv = {deep, closest, stale, figures, text, s: null};
  gv.fresh = () => figures().filter((el) => !gv.s.old.has(token(el)));
  gv.arm = (src) => {
    if (gv.s) gv.s.done = true;
    const cond = new Function('gv', `return (${src});`);
    const s = gv.s = {t0: null, seen: null, fig: null, last: 0, lastAt: performance.now(), done: false,
                      old: new Set(figures().map(token)), path: location.pathname, why: ''};
    const start = (e) => {
      if (s.t0 !== null || s.done) return;
      if (e.type === 'keydown' && ['Control', 'Shift', 'Alt', 'Meta', 'Tab'].includes(e.key)) return;
      s.t0 = e.timeStamp;
    };
    for (const type of ['pointerdown', 'mousedown', 'click', 'keydown']) window.addEventListener(type, start, true);
    const mo = new MutationObserver((ms) => {
      if (s.t0 === null || s.done) return;
      const seen = ms.filter((m) => {
        const el = m.target.nodeType === 1 ? m.target : m.target.parentElement;
        if (!el || el.closest(IGNORED)) return false;
        // one of those itself, added to or removed from the body
        const nodes = [...m.addedNodes, ...m.removedNodes];
        return !(m.type === 'childList' && nodes.length && nodes.every(unseen));
      });
      if (!seen.length) return;
      s.lastAt = performance.now();
      const el = seen[seen.length - 1].target;
      const what = el.nodeType === 1 ? (el.getAttribute('data-testid') || el.className) : el.nodeName;
      // where it happened (the nearest Streamlit element) and what it reads: --verbose names the last change
      const host = el.nodeType === 1 ? el : el.parentElement;
      const where = host && host.closest('[data-testid]');
      const said = ((host && host.textContent) || '').trim().slice(0, 40);
      // outside Streamlit's elements: the element itself, by tag, id and class
      const place = where ? where.getAttribute('data-testid') :
        (host ? chain(host) : '?');
      s.why = `${seen[seen.length - 1].type} ${what} in ${place}: ${said}`;
      requestAnimationFrame(() => requestAnimationFrame(() => { if (!s.done) s.last = performance.now(); }));
    });
    mo.observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
    s.stop = () => mo.disconnect();
    const watch = () => {
      if (s.done) return;
      if (s.t0 !== null) {
        if (s.seen === null) {
          let ok = false;
          try { ok = cond(gv); } catch (e) { ok = false; }
          if (ok) requestAnimationFrame(() => { if (s.seen === null) s.seen = performance.now(); });
        }
        if (s.fig === null && gv.fresh().length)
          requestAnimationFrame(() => { if (s.fig === null) s.fig = performance.now(); });
      }
      requestAnimationFrame(watch);
    };
    requestAnimationFrame(watch);
  };
  // a second condition on the same clock: the first painted frame at which it holds, in seconds (gv.s.marks[name])
  gv.mark = (name, src) => {
    const s = gv.s, cond = new Function('gv', `return (${src});`);
    s.marks = s.marks || {};
    const watch = () => {
      let ok = false;
      try { ok = s.t0 !== null && cond(gv); } catch (e) { ok = false; }
      if (ok) requestAnimationFrame(() => { s.marks[name] = (performance.now() - s.t0) / 1000; });
      else requestAnimationFrame(watch);
    };
    requestAnimationFrame(watch);
  };
  gv.quiet = (ms) => gv.s.seen !== null && !document.querySelector('[data-testid="stStatusWidget"]') &&
    performance.now() - gv.s.lastAt > ms;
  gv.result = () => {
    const s = gv.s;
    s.done = true;
    s.stop();
    const at = (t) => t === null ? null : (t - s.t0) / 1000;
    return {seen: at(s.seen), fig: at(s.fig), final: at(Math.max(s.seen, s.last)), why: s.why};
  };
})();"""


@dataclass
class Row:
    """One interaction's samples (gv.result()'s: seen, fig, final, why; seconds from the input event)."""

    name: str
    budget: float
    kind: str = "in-page"  # "in-page" (budget on the final state) | "page switch" (on the first new figure)
    samples: list[dict] = field(default_factory=list)
    note: str = ""

    def of(self, key: str) -> list[float]:
        return [x[key] for x in self.samples if x.get(key) is not None]

    def measured(self) -> list[float]:
        """What the budget is read against: a page switch's first figure (its final state where it draws none)."""
        return (self.of("fig") or self.of("final")) if self.kind == "page switch" else self.of("final")


def p(values: list[float], q: float) -> float:
    """The q-quantile (0..1), linear between the sorted values (p95 of 5 lies between the two largest)."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    at = q * (len(xs) - 1)
    lo = int(at)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (at - lo)


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def idle(page, timeout_ms: int = 300_000) -> None:
    page.wait_for_timeout(250)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=timeout_ms)


def timed(page, condition: str, act, *, settle: bool = True, timeout_ms: int = 120_000) -> dict:
    """Arm the watch with `condition` (a JS expression over `gv`), run `act()`, wait until the condition has been
    painted and (with `settle`) the page is final; the times in seconds from the input event."""
    page.evaluate("src => gv.arm(src)", condition)
    cpu = cpu_seconds(SERVER_PID) if SERVER_PID else None
    act()
    try:
        page.wait_for_function("() => gv.s.seen !== null", timeout=timeout_ms, polling=50)
        if settle:
            page.wait_for_function(f"() => gv.quiet({QUIET_MS})", timeout=timeout_ms, polling=100)
    except Exception as err:
        raise RuntimeError(f"{condition}: {page.evaluate(STATE_JS)}") from err
    got = page.evaluate("() => gv.result()")
    if cpu is not None and settle:  # the server's CPU seconds for it: steadier than the clock on a busy machine
        got["server_cpu"] = cpu_seconds(SERVER_PID) - cpu
    return got


SERVER_PID: int | None = None  # the app's process, whose CPU time each interaction reads (main sets it)


STATE_JS = """() => ({t0: gv.s.t0, seen: gv.s.seen, fig: gv.s.fig,
  since_last_change_ms: performance.now() - gv.s.lastAt, last_change: gv.s.why,
  running: !!document.querySelector('[data-testid="stStatusWidget"]'), now: performance.now()})"""


def map_title(page) -> str:
    return page.locator(".gv-map .gv-title").first.inner_text()


def js(s: str) -> str:
    """A Python string as a JS string literal."""
    import json

    return json.dumps(s)


def title_is(title: str) -> str:
    return f"gv.deep('.gv-map .gv-title').some((t) => !gv.stale(t) && t.textContent === {js(title)})"


# ---- the Attention page ----------------------------------------------------------------------------------------


def attention_url(url: str, model: str, prompt: str, extra: str = "") -> str:
    return f"{url}/?{MODELS[model][0]}prompt={quote(prompt)}{extra}"


def open_attention(page, url: str, model: str, prompt: str, extra: str = "") -> None:
    page.goto(attention_url(url, model, prompt, extra))
    page.locator(".gv-map .gv-title").first.wait_for(timeout=300_000)
    idle(page)


def map_switch(page, what: str, reps: int) -> list[dict]:
    """Head ("head") or layer ("layer") picks in the map: alternately the second and third of its buttons."""
    times = []
    for i in range(reps):
        index = 1 + i % 2
        before = map_title(page)
        layer, head = map(int, re.match(r"Layer (\d+), head (\d+)", before).groups())
        if what == "head":
            index = index if index != head else 0
            title = f"Layer {layer}, head {index}"
        else:
            index = index if index != layer else 0
            title = f"Layer {index}, head {head}"
        button = page.locator(f".gv-map .gv-{what}").nth(index)
        times.append(timed(page, title_is(title), button.click))
    return times


def chip_radios(page):
    return page.get_by_role("radiogroup").filter(has=page.locator('[data-testid="stMarkdownContainer"]')).last


def query_token(page, reps: int) -> list[dict]:
    """A token chip clicked: alternately the second and the fourth token."""
    times = []
    radios = page.locator('[data-testid="stButtonGroup"]').last.get_by_role("radio")
    for i in range(reps):
        q = 1 if i % 2 == 0 else 3
        cond = f"gv.deep('.gv-qbars').some((b) => !gv.stale(b) && b.__gv && b.__gv.data && b.__gv.data.query === {q})"
        times.append(timed(page, cond, radios.nth(q).click))
    return times


def view_tabs(page, rounds: int) -> list[dict]:
    """Each of the views' tabs in turn (after the first Plotly figure of the session: its own row)."""
    from gptviz.app import settings as S

    views = list(S.ATT_VIEW.rule.options)
    times = []
    for _ in range(rounds):
        for view in views[1:] + views[:1]:
            tab = page.get_by_role("tab", name=view, exact=True)
            cond = "gv.fresh().some((f) => gv.closest(f, '[role=tabpanel]') && !gv.closest(f, '[hidden]'))"
            times.append({**timed(page, cond, tab.click), "tab": view})  # --verbose names the tab
    return times


def first_plotly(browser, url: str, model: str, prompt: str, reps: int, reading_s: float = 0.0) -> list[dict]:
    """A fresh visitor (a new browser context: an empty cache) opens the first Plotly view of the session,
    `reading_s` after the first screen is final (a visitor reads the map before the views below it)."""
    times = []
    for _ in range(reps):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_init_script(INIT_JS)
        page = context.new_page()
        open_attention(page, url, model, prompt)
        page.wait_for_timeout(reading_s * 1000)
        tab = page.get_by_role("tab", name="Lines between tokens", exact=True)
        cond = "gv.fresh().some((f) => f.classList.contains('js-plotly-plot') && !gv.closest(f, '[hidden]'))"
        times.append(timed(page, cond, tab.click))
        context.close()
    return times


def prompt_edit(page, reps: int) -> list[dict]:
    """A new prompt sent (Ctrl+Enter), alternately 41 and 42 tokens (the page opened on 40), to its map and the page
    final."""
    times = []
    area = page.locator('[data-testid="stSidebar"] textarea')
    for i in range(reps):
        n = 41 + i % 2
        area.fill(prompt_of(n))
        cond = f"gv.deep('.gv-map').some((m) => !gv.stale(m) && m.__gv && m.__gv.data && m.__gv.data.Q === {n})"
        times.append(timed(page, cond, lambda: area.press("Control+Enter")))
    return times


def wiring_toggle(page, reps: int) -> list[dict]:
    """The sidebar's LayerNorm placement, post then pre: another model's map."""
    times = []
    for i in range(reps):
        label = "post-norm (GPT-1)" if i % 2 == 0 else "pre-norm (GPT-2)"
        radio = page.locator('[data-testid="stSidebar"]').get_by_text(label, exact=True)
        times.append(timed(page, "gv.fresh().some((f) => f.classList.contains('gv-map'))", radio.click))
    return times


GENERATING = r"/Generating: [1-9]\d* of \d+ tokens/"


def generate(page, reps: int, n: int) -> tuple[list[dict], list[dict]]:
    """Generate at the model's own pace: to the first token drawn, and to all N tokens drawn (bench_live_pace)."""
    from benchmarks.bench_live_pace import generate_runs

    return generate_runs(page, reps, n, SERVER_PID)


def unit_link(page, url: str, model: str, prompt: str, reps: int) -> list[dict]:
    """A unit pill under the detector table to the unit page drawn (its rows and both figures); back each time."""
    times = []
    for _ in range(reps):
        open_attention(page, url, model, prompt)
        pill = page.get_by_role("radiogroup", name="What the top heads do over the corpus").get_by_role("radio").first
        cond = (
            "location.pathname.endsWith('/units') && gv.deep('.gv-rows .gv-row').length > 0 && "
            "gv.figures().filter((f) => f.classList.contains('js-plotly-plot')).length >= 2"
        )
        times.append(timed(page, cond, pill.click))
    return times


# ---- page switches and the other pages' pickers ----------------------------------------------------------------


def page_switches(page, reps: int) -> dict[str, list[dict]]:
    """Every page from the sidebar's navigation, in order, `reps` rounds: {title: its samples}."""
    from gptviz.app.pages import PAGE_LIST

    out: dict[str, list[dict]] = {}
    order = PAGE_LIST[1:] + PAGE_LIST[:1]
    for _ in range(reps):
        for _, stem, title, _ in order:
            link = page.locator('[data-testid="stSidebarNav"] a').filter(has_text=re.compile(f"^{re.escape(title)}$"))
            if not link.count():
                link = page.locator('[data-testid="stSidebarNav"] a', has_text=title)
            path = "/" if stem == PAGE_LIST[0][1] else f"/{stem}"
            cond = (
                f"(location.pathname === {js(path)} || location.pathname.endsWith({js(path)})) && "
                "[...document.querySelectorAll('h1')].some((h) => !gv.stale(h))"
            )
            out.setdefault(title, []).append(timed(page, cond, link.first.click))
    return out


def pick_option(page, box, index: int, cond: str) -> dict:
    """Open the selectbox `box`, then time the click on its option `index`."""
    box.get_by_role("combobox").click()
    choice = page.get_by_role("option").nth(index)
    choice.wait_for(timeout=60_000)
    return timed(page, cond, choice.click)


def selectbox(page, label: str):
    return (
        page.get_by_test_id("stMainBlockContainer")
        .locator('[data-testid="stSelectbox"]')
        .filter(has=page.get_by_text(label, exact=True))
        .first
    )


def why_target(page, url: str, model: str, prompt: str, reps: int) -> list[dict]:
    page.goto(f"{url}/why?{MODELS[model][0]}prompt={quote(prompt)}")
    box = selectbox(page, "Predicted token (target)")
    box.wait_for(timeout=300_000)
    idle(page)
    return [pick_option(page, box, 2 + i % 2, "gv.fresh().length > 0") for i in range(reps)]


def parameters_preset(page, url: str, model: str, reps: int) -> list[dict]:
    page.goto(f"{url}/parameters?{MODELS[model][0]}")
    box = selectbox(page, "Model")
    box.wait_for(timeout=300_000)
    idle(page)
    return [pick_option(page, box, 3 + i % 2, "gv.fresh().length > 0") for i in range(reps)]  # presets


def pair_picker(page, url: str, reps: int) -> list[dict]:
    page.goto(f"{url}/norms")
    box = selectbox(page, "Matched heads")
    box.wait_for(timeout=300_000)
    idle(page)
    return [pick_option(page, box, 1 + i % 2, "gv.fresh().length >= 2") for i in range(reps)]


# ---- one model -------------------------------------------------------------------------------------------------


def measure(
    browser, url: str, model: str, reps: int, only: set[str], verbose: bool = False, tab_rounds: int | None = None
) -> tuple[list[Row], dict]:
    rows: list[Row] = []
    live: dict = {}
    prompt = prompt_of(40)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(INIT_JS)
    page = context.new_page()
    page.set_default_timeout(300_000)

    def want(name: str) -> bool:
        return not only or name in only

    def row(name: str, budget: float, samples: list[dict], kind: str = "in-page", note: str = "") -> None:
        r = Row(name, budget, kind, samples, note)
        rows.append(r)
        shown = ", ".join(f"{x:.2f}" for x in r.measured()) or "-"
        print(f"  {model}: {name}: {shown} s (load {load()})", flush=True)
        if verbose:
            for x in samples:
                print(
                    ("      " + f"{x['tab']}: " if "tab" in x else "      ")
                    + f"drawn {x['seen']}, first new figure {x.get('fig')}, final {x.get('final')}: "
                    f"last change {x.get('why')}",
                    flush=True,
                )

    open_attention(page, url, model, prompt)
    if want("tabs"):
        row(
            "view tab, the session's first Plotly figure (a new visitor, at once)",
            IN_PAGE,
            first_plotly(browser, url, model, prompt, max(2, reps // 2)),
        )
        row(
            f"view tab, the session's first Plotly figure (a new visitor, {READING_S:.0f} s after the first screen)",
            IN_PAGE,
            first_plotly(browser, url, model, prompt, max(2, reps // 2), READING_S),
        )
    if want("head"):
        row("head switch in the map", IN_PAGE, map_switch(page, "head", reps))
    if want("layer"):
        row("layer switch in the map", IN_PAGE, map_switch(page, "layer", reps))
    if want("query"):
        row("query token (a chip)", IN_PAGE, query_token(page, reps))
    if want("tabs"):
        row("view tab (each of the 8, Plotly loaded)", IN_PAGE, view_tabs(page, tab_rounds or max(1, reps // 3)))
        if verbose:
            per_tab(model, rows[-1])
    if want("prompt"):
        row("prompt edit to its map", IN_PAGE, prompt_edit(page, reps))
        open_attention(page, url, model, prompt)
    if want("wiring"):
        row("LayerNorm placement (pre/post)", IN_PAGE, wiring_toggle(page, max(2, reps - 1)))
    if want("generate"):
        open_attention(page, url, model, prompt, f"&att_gen_n={LIVE_TOKENS}&att_gen_pace={quote(FREE_PACE)}")
        firsts, runs = generate(page, max(2, reps // 2), LIVE_TOKENS)
        row("Generate to the first token drawn", IN_PAGE, [{**x, "final": x["seen"]} for x in firsts])
        live = {
            "page": statistics.median(r["page"] for r in runs),
            "server": statistics.median(r["server"] for r in runs),
        }
    if want("unit") and model == "bundled":  # gpt2-small has no built index: its unit page builds one first
        row("unit pill to the unit page drawn", PAGE_SWITCH, unit_link(page, url, model, prompt, max(2, reps // 2)))
    if want("pages"):
        open_attention(page, url, model, prompt)
        for title, samples in page_switches(page, max(2, reps // 2)).items():
            row(
                f"page switch to {title}",
                PAGE_SWITCH,
                samples,
                "page switch",
                note=""
                if any(x["fig"] is not None for x in samples)
                else "no figure on its first screen: its final state",
            )
    if want("why"):
        row("Why this token?: the target", IN_PAGE, why_target(page, url, model, prompt, reps))
    if want("parameters"):
        row("Parameters: a preset", IN_PAGE, parameters_preset(page, url, model, reps))
    if want("pair") and model == "bundled":  # the page compares the bundled twins whatever the sidebar's model
        row("pre/post: the matched pair", IN_PAGE, pair_picker(page, url, reps))
    exceptions = page.locator('[data-testid="stException"]').count()
    context.close()
    if exceptions:
        print(f"  {model}: {exceptions} exception box(es) on the last page", flush=True)
    return rows, live


def per_tab(model: str, r: Row) -> None:
    """--verbose: the view tabs' row split by tab (p50 / p95 of its final state, drawn, the server's CPU)."""
    for view in dict.fromkeys(x["tab"] for x in r.samples):
        mine = Row(view, r.budget, samples=[x for x in r.samples if x["tab"] == view])
        final, drawn, cpu = mine.of("final"), mine.of("seen"), mine.of("server_cpu")
        print(
            f"    {model}: tab {view}: n {len(final)}, final p50 {p(final, 0.5) * 1000:,.0f} / p95 "
            f"{p(final, 0.95) * 1000:,.0f} ms, drawn p50 {p(drawn, 0.5) * 1000:,.0f} ms"
            + (f", server CPU p50 {p(cpu, 0.5) * 1000:,.0f} ms" if cpu else ""),
            flush=True,
        )


def report(
    results: dict[str, tuple[list[Row], dict, str]], cold: list[dict] | None, engine: dict, cold_load: str = ""
) -> list[str]:
    lines = [
        "| model | interaction | n | p50 | p95 | p50 / p95 of the other mark; the server's CPU (p50) "
        "| budget (p95) | over | load at the model's end (1/5/15 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    over = []
    for model, (rows, _, load_end) in results.items():
        for r in rows:
            xs = r.measured()
            if not xs:
                continue
            p50, p95 = p(xs, 0.5), p(xs, 0.95)
            bad = p95 > r.budget
            if bad:
                over.append(f"{model}: {r.name} ({p95 * 1000:,.0f} ms)")
            if r.kind == "page switch":
                what = "to its first figure" if r.of("fig") else "final"
                other = f"final {p(r.of('final'), 0.5) * 1000:,.0f} / {p(r.of('final'), 0.95) * 1000:,.0f} ms"
            else:
                what, drawn = "final", r.of("seen")
                other = f"drawn {p(drawn, 0.5) * 1000:,.0f} / {p(drawn, 0.95) * 1000:,.0f} ms" if drawn else ""
            cpu = r.of("server_cpu")
            if cpu:
                other += f"; server CPU {p(cpu, 0.5) * 1000:,.0f} ms"
            note = f" ({r.note})" if r.note else ""
            lines.append(
                f"| {MODELS[model][1]} | {r.name}{note} | {len(xs)} | {p50 * 1000:,.0f} ms | "
                f"{p95 * 1000:,.0f} ms ({what}) | {other} | {r.budget * 1000:,.0f} ms | "
                f"{'**over**' if bad else 'ok'} | {load_end} |"
            )
    if cold:
        xs = [c["heatmap"] for c in cold]
        bad = p(xs, 0.95) > COLD
        if bad:
            over.append(f"cold server to the first attention map ({p(xs, 0.95):.2f} s)")
        lines.append(
            f"| {MODELS['bundled'][1]} | cold server: first request to the first attention map "
            f"(server start {statistics.median(c['server'] for c in cold):.1f} s before it) | {len(xs)} | "
            f"{p(xs, 0.5) * 1000:,.0f} ms | {p(xs, 0.95) * 1000:,.0f} ms | | {COLD * 1000:,.0f} ms | "
            f"{'**over**' if bad else 'ok'} | {cold_load} |"
        )
    live_lines = []
    for model, (_, live, load_end) in results.items():
        if not live:
            continue
        eng = engine.get(model)
        bound = 1.1 * eng + 0.3 if eng else None
        ok = bound is not None and live["page"] <= bound
        if bound is not None and not ok:
            over.append(f"{model}: the live page, {LIVE_TOKENS} tokens ({live['page']:.2f} s > {bound:.2f} s)")
        live_lines.append(
            f"| {MODELS[model][1]} | {live['page']:.2f} s | {live['server']:.2f} s | "
            + (f"{eng:.2f} s | {bound:.2f} s | {'ok' if ok else '**over**'} |" if eng else "- | - | - |")
            + f" {load_end} |"
        )
    if live_lines:
        lines += [
            "",
            f"| model | the page: Generate to all {LIVE_TOKENS} tokens drawn (bench_live_pace) | the server's own "
            '"written in" | stream(attention=True) in this process (1 thread) | bound: 1.1x engine + 0.3 s | '
            "within | load |",
            "|---|---|---|---|---|---|---|",
            *live_lines,
        ]
    lines += ["", "over budget: " + ("; ".join(over) if over else "none")]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cold", type=int, default=3, metavar="N", help="fresh servers for the cold start (0: none)")
    parser.add_argument(
        "--only",
        nargs="+",
        default=[],
        choices=[
            "head",
            "layer",
            "query",
            "tabs",
            "prompt",
            "wiring",
            "generate",
            "unit",
            "pages",
            "why",
            "parameters",
            "pair",
            "none",
        ],
    )
    parser.add_argument("--verbose", action="store_true", help="each sample, with the last change the page made")
    parser.add_argument(
        "--tab-rounds",
        type=int,
        default=None,
        metavar="N",
        help="rounds over the view tabs (default: repeats // 3, at least 1); --verbose splits them by tab",
    )
    parser.add_argument(
        "--app",
        default=str(ROOT),
        metavar="DIR",
        help="the checkout whose app the server runs (another: a before/after comparison)",
    )
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"load average at the start: {load()}; the app: {args.app}", flush=True)
    started = time.perf_counter()
    results: dict[str, tuple[list[Row], dict, str]] = {}
    engine: dict[str, float] = {}
    cold = None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        if args.cold:
            cold = cold_start(browser, args.cold, root=args.app)
            cold_load = load()
            shown = ", ".join(f"{c['heatmap']:.2f}" for c in cold)
            print(f"  cold start: {shown} s (load {load()})", flush=True)
        server = Server(root=args.app)
        global SERVER_PID
        SERVER_PID = server.proc.pid
        try:
            for model in args.models:
                rows, live = measure(
                    browser, server.url, model, args.repeats, set(args.only), args.verbose, args.tab_rounds
                )
                results[model] = (rows, live, load())
        finally:
            server.close()
        browser.close()
    for model, (_, live, _) in results.items():
        if live:  # the engine in this process, on one thread (the server's generation setting), the same prompt
            engine[model] = LIVE_TOKENS / engine_tokens_per_s(model, prompt_of(40), LIVE_TOKENS)[1]
    lines = report(results, cold, engine, cold_load if cold else "")
    lines.append(f"{time.perf_counter() - started:.0f} s; load average at the end: {load()}")
    text = "\n".join(lines)
    print("\n" + text)
    out = run_folder.run_folder() / "latency.md"
    out.write_text(f"# Latency in the browser (`python -m benchmarks latency`)\n\n{text}\n", encoding="utf-8")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
