"""Pre-norm vs post-norm's first screen (issue 41), in a real browser: the twins' matched attention maps side by side
within the first screen at 1400x1000, with their next-token bars and both wirings; on a 390x844 phone the two maps
still a pair (one row), inside the first screen. Positions are read from the drawn page."""

from __future__ import annotations

import pytest

from tests.support.browser import CHROMIUM

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

# Each keyed figure's drawn box, in page coordinates (the app scrolls inside its main section, not the window).
BOXES_JS = """(keys) => {
  const main = document.querySelector('[data-testid="stMain"]');
  return Object.fromEntries(keys.map((key) => {
    const plot = document.querySelector(`.st-key-${key} .js-plotly-plot`);
    if (!plot) return [key, null];
    const box = plot.getBoundingClientRect();
    return [key, {left: box.left, right: box.right, top: box.top + main.scrollTop,
                  bottom: box.bottom + main.scrollTop, width: box.width}];
  }));
}"""
MAPS = ("twins_side_maps_0", "twins_side_maps_1")
OTHERS = ("twins_side_next", "twins_side_wiring_pre", "twins_side_wiring_post")


@pytest.fixture(scope="module")
def browser_and_url(browser, server):
    """The module's Chromium and the session's app server (conftest's fixtures)."""
    return browser, server


def boxes_at(browser_and_url, viewport: dict) -> dict:
    browser, url = browser_and_url
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(300_000)  # a loaded 2-core machine took minutes
    try:
        page.goto(f"{url}/norms")
        page.wait_for_selector('[data-testid="stApp"]')
        page.wait_for_timeout(500)
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
        for key in MAPS + OTHERS:
            page.locator(f".st-key-{key} .js-plotly-plot").wait_for()
        page.wait_for_timeout(1000)
        return page.evaluate(BOXES_JS, list(MAPS + OTHERS))
    finally:
        page.close()


def side_by_side(a: dict, b: dict) -> bool:
    return abs(a["top"] - b["top"]) < 4 and a["right"] <= b["left"] + 1


def test_desktop_first_screen_holds_the_pair_the_bars_and_the_wirings(browser_and_url):
    boxes = boxes_at(browser_and_url, {"width": 1400, "height": 1000})
    pre, post = (boxes[k] for k in MAPS)
    assert side_by_side(pre, post), boxes
    assert min(pre["width"], post["width"]) >= 250, boxes  # maps, not thumbnails
    for key in MAPS + OTHERS:  # everything on the first screen
        assert boxes[key]["bottom"] <= 1000, (key, boxes[key])


def test_phone_first_screen_holds_the_pair(browser_and_url):
    """The pair sat under the picker, the caveat and the bars, at y of about 1,000: it now follows the sentence."""
    boxes = boxes_at(browser_and_url, {"width": 390, "height": 844})
    pre, post = (boxes[k] for k in MAPS)
    assert side_by_side(pre, post), boxes
    assert post["right"] <= 390 and pre["left"] >= 0, boxes  # both inside the phone's width
    assert max(pre["bottom"], post["bottom"]) <= 844, boxes
