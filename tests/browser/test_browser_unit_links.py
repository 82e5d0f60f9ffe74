"""Every kind of unit link in the app, clicked in a real browser, lands on the unit it names (issue 62, item 2).

LINKS enumerates them, page by page: the unit-id pills (each list by its key), the attribution graph's nodes and the
unit page's own search table. tests/app/test_unit_links.py checks that LINKS names every unit link the app's code draws,
so a new one without a click here fails there. Each click must open the unit page in the same tab and session, on
the model the link promised (a post-norm head opens in the post-norm twin), with the summary line, the page's heading
for the unit, naming the exact id clicked. One server, one Chromium; Debian's chromium via Playwright."""

from __future__ import annotations

import math
import os
import re
import time

import pytest

from tests.support.browser import CHROMIUM, no_exception, wait_for_idle
from tests.support.unit_links import LINKS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]


# where a node of the attribution graph is on the page, by Plotly's own axes (as in test_browser_why_graph)
NODES_JS = """() => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')]
    .find((p) => p.data && p.data.some((t) => t.name === 'head'));
  if (!gd) return [];
  const box = gd.getBoundingClientRect(), size = gd._fullLayout._size;
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  return gd.data.filter((t) => t.mode === 'markers' && t.customdata).flatMap((t) => t.x.map((x, i) => ({
    unit: t.customdata[i][5], size: t.marker.size[i],
    x: box.left + size.l + xa.l2p(x), y: box.top + size.t + ya.l2p(t.y[i])})));
}"""


def settle(page) -> None:
    wait_for_idle(page)
    page.wait_for_timeout(700)
    wait_for_idle(page)


def click_pill(page, suffix: str, avoid: str | None) -> str:
    """Click a unit pill of the list keyed unit_pills_<suffix> (one other than `avoid`, the unit a page may already
    hold); returns its unit id."""
    group = page.locator(f".st-key-unit_pills_{suffix}")
    group.locator("button").filter(has_text=re.compile(r"^L\d+[NH]\d+$")).first.wait_for()
    group.scroll_into_view_if_needed()
    names = [t.strip() for t in group.locator("button").all_inner_texts() if t.strip()]
    assert names and all(re.fullmatch(r"L\d+[NH]\d+", n) for n in names), names
    unit = next(n for n in reversed(names) if n != avoid)  # the last: a pick that is not simply the first in sight
    button = group.locator("button").filter(has_text=re.compile(f"^{unit}$"))
    button.scroll_into_view_if_needed()
    button.click()
    return unit


def click_graph_node(page) -> str:
    """Click the head or neuron node with the most room around it (a click there can only mean that node)."""
    page.wait_for_function(
        "[...document.querySelectorAll('.js-plotly-plot')].some(p => p.data && p.data.some(t => t.name === 'head'))",
        timeout=300_000,
    )
    settle(page)
    page.locator(".js-plotly-plot").filter(has=page.locator(".nsewdrag")).first.scroll_into_view_if_needed()
    nodes = page.evaluate(NODES_JS)

    def room(n):
        return min(
            math.dist((n["x"], n["y"]), (m["x"], m["y"])) - (n["size"] + m["size"]) / 2 for m in nodes if m is not n
        )

    target = max((n for n in nodes if re.fullmatch(r"L\d+[NH]\d+", n["unit"] or "")), key=room)
    page.mouse.click(target["x"], target["y"])
    return target["unit"]


def click_search_row(page, avoid: str) -> str:
    """Pick the search table's first row whose unit is not `avoid` (glide-data-grid draws on a canvas: the row
    marker column is at the left, rows 35 px under a 35 px header); its unit is read from the grid's own cells."""
    grid = page.locator('[data-testid="stDataFrame"]').first
    grid.wait_for()
    settle(page)
    units = [
        c.strip() for c in grid.locator('[role="gridcell"]').all_inner_texts() if re.fullmatch(r"\s*L\d+[NH]\d+\s*", c)
    ]
    assert units, "the search table lists no unit"
    row = next(i for i, u in enumerate(units) if u != avoid)
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 35 * row + 17)
    return units[row]


def landed_on(page, unit: str, norm: str | None) -> None:
    """The unit page shows `unit`: its address, and its summary line (the page's heading for a unit) names it."""
    page.wait_for_url(re.compile(rf"/units\?(.*&)?unit={unit}(&|$)"), timeout=120_000)
    heading = page.locator('[data-testid="stMarkdown"] strong').filter(has_text=re.compile(r"^L\d+[NH]\d+: ")).first
    heading.wait_for(timeout=300_000)
    shown = heading.inner_text().split(":")[0]
    assert shown == unit, f"clicked {unit}, the unit page shows {shown}"
    if norm is not None:
        assert f"norm={norm}" in page.url, page.url


def open_link(page, server: str, link) -> None:
    """Load the link's page and open what holds its unit links (a tab, a button's result, an expander)."""
    page.goto(server + link.page)
    page.wait_for_selector('[data-testid="stApp"]')
    settle(page)
    if link.tab:
        page.get_by_role("tab", name=link.tab).click()
        settle(page)
    if link.press:
        page.get_by_role("button", name=link.press, exact=True).click()
        settle(page)
    if link.expander:
        page.locator('[data-testid="stExpander"] summary').filter(has_text=link.expander).click()
        settle(page)


def wait_for_the_prompt(page, crashed: list, artifacts) -> str | None:
    """Wait for the session's sidebar prompt (the page's script has run); None once it shows, else what the page showed
    instead, with a screenshot (CI twice waited 180 s for it on the unit page's search tab, under load, unexplained)."""
    try:
        page.wait_for_function(
            "(document.querySelector('[data-testid=stSidebar] textarea') || {}).value", timeout=120_000
        )
        return None
    except Exception:  # say what the page showed instead
        if crashed:
            return "(the tab crashed)"
        page.screenshot(path=str(artifacts / "unit-link-no-prompt.png"))
        return page.locator("body").inner_text(timeout=10_000)[:1500]


def test_every_unit_link_lands_on_its_unit(browser, server, artifacts):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(180_000)
    crashed, hiccups = [], []
    page.on("crash", lambda _: crashed.append(True))
    times = []
    for link in LINKS[int(os.environ.get("GPTVIZ_TEST_LINKS_FROM", "0")) :]:  # a rerun may start at one link
        started = time.perf_counter()
        open_link(page, server, link)
        shown = wait_for_the_prompt(page, crashed, artifacts)
        if shown is not None:  # once more from a fresh load: the precondition, not what this test is about
            hiccups.append(f"{link}: the sidebar's prompt never showed; the page showed: {shown}")
            open_link(page, server, link)
            again = wait_for_the_prompt(page, crashed, artifacts)
            assert again is None, "\n".join([*hiccups, f"and after a reload: {again}"])
        prompt = page.locator('[data-testid="stSidebar"] textarea').first.input_value()
        opened = re.search(r"unit=(L\d+[NH]\d+)", page.url)
        if link.kind.startswith("pills:"):
            unit = click_pill(page, link.kind.split(":", 1)[1], None)
        elif link.kind == "graph node":
            unit = click_graph_node(page)
        else:
            unit = click_search_row(page, opened.group(1) if opened else None)
        landed_on(page, unit, link.norm)
        settle(page)
        assert len(page.context.pages) == 1, link  # the same tab
        expect(page.locator('[data-testid="stSidebar"] textarea').first).to_have_value(prompt)  # the session's prompt
        no_exception(page)
        times.append((link.page.split("?")[0], link.kind, unit, time.perf_counter() - started))
    page.close()
    assert len(times) == len(LINKS) or "GPTVIZ_TEST_LINKS_FROM" in os.environ
    print("\n" + "\n".join(f"{p} {kind} -> {unit}: {s:.1f} s" for p, kind, unit, s in times))
    print("\n".join(hiccups))
