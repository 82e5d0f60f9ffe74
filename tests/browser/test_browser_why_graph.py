"""The attribution graph in a real browser (issue 58): at a 1400x1000 desktop and a 390x844 phone the Why page's graph
tab shows the graph within the first screen with no two token labels overlapping; a click on a head node opens its
unit page in the same tab and session. Debian's chromium via Playwright, a server of this module's own (on the port
GPTVIZ_TEST_PORT names, where a shared machine gives a session its own ports; else a free one)."""

from __future__ import annotations

import math
import os
import urllib.parse

import pytest

from tests.support.browser import CHROMIUM, app_server, no_exception, unit_shown, wait_for_idle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
PROMPT = "JULIET:\nGood morrow, sweet Romeo, good morrow to thee.\nROMEO:\nGood morrow, sweet"
LINE_PX = 11  # the labels' font size: strips closer than this across touch
GRAPH_URL = "/why?" + urllib.parse.urlencode({"prompt": PROMPT, "why_view": "Attribution graph"})

# The drawn graph: its plot area's box, and where each node of a trace is on the page (Plotly's own axes convert)
NODES_JS = """(name) => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')]
    .find((p) => p.data && p.data.some((t) => t.name === 'head'));
  const box = gd.getBoundingClientRect(), size = gd._fullLayout._size;
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const trace = gd.data.find((t) => t.name === name);
  if (!trace) return [];
  return trace.x.map((x, i) => ({id: trace.customdata[i][0], unit: trace.customdata[i][5],
    size: trace.marker.size[i], x: box.left + size.l + xa.l2p(x), y: box.top + size.t + ya.l2p(trace.y[i])}));
}"""
LABELS_JS = """() => [...document.querySelectorAll('.js-plotly-plot g.annotation')]
  .filter((g) => getComputedStyle(g).display !== 'none')
  .map((g) => { const r = g.querySelector('text').getBoundingClientRect();
                return {text: g.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom}; })"""
PLOT_JS = """() => { const p = document.querySelector('.js-plotly-plot .nsewdrag'); const r = p.getBoundingClientRect();
  return {top: r.top, bottom: r.bottom}; }"""


@pytest.fixture(scope="module")
def server():
    port = int(os.environ.get("GPTVIZ_TEST_PORT", "0")) or None
    with app_server(port=port) as url:
        yield url


def open_graph(browser, server, width: int, height: int):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(300_000)  # generous: a loaded 2-core machine
    page.goto(server + GRAPH_URL)
    page.wait_for_function(
        "[...document.querySelectorAll('.js-plotly-plot')].some(p => p.data && p.data.some(t => t.name === 'head'))"
    )
    wait_for_idle(page)
    page.wait_for_timeout(500)
    return page


def overlapping(labels: list[dict]) -> list[tuple[str, str]]:
    """Neighbouring labels that touch. Each is a line of 11 px text slanted at 60 degrees, its end at its token's
    column (Plotly's xanchor "right", yanchor "top": the boxes' right edges are the columns, their tops level), so
    two are parallel strips whose gap, across them, is their columns' distance times sin 60 degrees."""
    ordered = sorted(labels, key=lambda lab: lab["right"])
    return [
        (a["text"], b["text"])
        for a, b in zip(ordered, ordered[1:], strict=False)
        if (b["right"] - a["right"]) * math.sin(math.radians(60)) < LINE_PX
    ]


@pytest.mark.parametrize("width, height", [(1400, 1000), (390, 844)])
def test_the_graph_is_in_the_first_screen_with_its_token_labels_apart(browser, server, width, height):
    page = open_graph(browser, server, width, height)
    plot = page.evaluate(PLOT_JS)
    assert plot["top"] < height * 0.8, plot  # the graph starts within the first screen
    if width > 768:
        assert plot["bottom"] <= height, plot  # a desktop shows all of it
    labels = page.evaluate(LABELS_JS)
    assert len(labels) >= 8 and any("sweet" in lab["text"] for lab in labels)
    assert overlapping(labels) == []  # the labels hidden at this width are the ones that touched
    no_exception(page)
    page.close()


def test_a_click_on_a_head_opens_its_unit_page_in_the_same_tab(browser, server):
    page = open_graph(browser, server, 1400, 1000)
    nodes = [
        n
        for name in ("embeddings (token + position)", "bias (a constant)", "MLP neuron", "head", "the metric")
        for n in page.evaluate(NODES_JS, name)
    ]

    def room(n):  # how far its edge is from the nearest other node's: a click there can only mean it
        return min(
            math.dist((n["x"], n["y"]), (m["x"], m["y"])) - (n["size"] + m["size"]) / 2 for m in nodes if m is not n
        )

    target = max((n for n in nodes if n["unit"].startswith("L") and "H" in n["unit"]), key=room)
    assert target["unit"] and target["id"].startswith(target["unit"] + "@")
    page.mouse.click(target["x"], target["y"])
    page.wait_for_url(f"**/units?*unit={target['unit']}*", timeout=300_000)
    unit_shown(page, target["unit"])
    wait_for_idle(page)
    assert len(page.context.pages) == 1  # the same tab, the same session's prompt
    assert page.locator('[data-testid="stSidebar"] textarea').first.input_value() == PROMPT
    no_exception(page)
    page.close()
