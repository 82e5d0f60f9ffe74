"""What a visitor sees on a 390x844 phone (issue 32): no chart title running off its figure, no token labels over
each other on Activations, every tab of a page on screen, Embeddings' and Norms' panel titles apart. Real server,
Debian's chromium; boxes are read from the drawn SVG."""
from __future__ import annotations

import pytest

from test_browser import ARGS, CHROMIUM, app_server

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")]

PHONE = {"width": 390, "height": 844}

# Boxes of the SVG text matching `selector` inside each drawn Plotly figure, with the figure's own box.
BOXES_JS = """(selector) => [...document.querySelectorAll('.js-plotly-plot')].map((plot) => ({
  plot: plot.getBoundingClientRect().toJSON(),
  boxes: [...plot.querySelectorAll(selector)].filter((el) => el.textContent.trim())
           .map((el) => ({text: el.textContent, ...el.getBoundingClientRect().toJSON()}))}))"""


def overlapping(boxes, slack: float = 1.0):
    return [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if a["left"] + slack < b["right"] and b["left"] + slack < a["right"]
            and a["top"] + slack < b["bottom"] and b["top"] + slack < a["bottom"]]


@pytest.fixture(scope="module")
def phone():
    sync_api = pytest.importorskip("playwright.sync_api")
    with app_server() as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser, url
        browser.close()


def open_page(phone, path: str):
    browser, url = phone
    page = browser.new_page(viewport=PHONE)
    page.set_default_timeout(120_000)
    page.goto(f"{url}/{path}")
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_timeout(500)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.locator(".js-plotly-plot").first.wait_for()
    page.wait_for_timeout(1000)
    return page


def test_activations_on_a_phone(phone):
    page = open_page(phone, "activations")
    first = page.evaluate(BOXES_JS, ".xtick text")[0]
    assert len(first["boxes"]) >= 4, first             # tokens are named, some of them
    assert not overlapping(first["boxes"]), overlapping(first["boxes"])
    tabs = page.get_by_role("tab")
    assert tabs.count() >= 5
    for i in range(tabs.count()):                      # every tab on screen, none scrolled away
        box = tabs.nth(i).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (tabs.nth(i).inner_text(), box)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


@pytest.mark.parametrize("path", ["why", "embeddings", "activations"])
def test_chart_titles_stay_inside_their_figure(phone, path):
    page = open_page(phone, path)
    for plot in page.evaluate(BOXES_JS, ".gtitle"):
        for box in plot["boxes"]:
            assert box["right"] <= plot["plot"]["right"] + 1, (box["text"], box["right"], plot["plot"]["right"])
    page.close()


@pytest.mark.parametrize("path", ["embeddings", "norms"])
def test_panel_titles_and_ticks_apart(phone, path):
    page = open_page(phone, path)
    for plot in page.evaluate(BOXES_JS, ".annotation-text, .xtick text, .g-xtitle text, .g-x2title text, "
                                        ".g-x3title text"):
        assert not overlapping(plot["boxes"]), overlapping(plot["boxes"])
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()
