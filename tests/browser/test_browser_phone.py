"""What a visitor sees on a 390x844 phone (issue 32): no chart title running off its figure, no token labels over
each other on Activations, every tab of a page on screen, Embeddings' and Norms' panel titles apart. Real server,
Debian's chromium; boxes are read from the drawn SVG."""

from __future__ import annotations

import pytest

from tests.support.browser import CHROMIUM
from tests.support.layout import BOXES_JS, TICKS_JS, crowded_ticks, overlapping

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def phone(browser, server):
    """The module's Chromium and the session's app server (conftest's fixtures)."""
    return browser, server


def open_page(phone, path: str):
    browser, url = phone
    page = browser.new_page(viewport=PHONE)
    page.set_default_timeout(300_000)  # generous: a loaded 2-core machine took minutes
    page.goto(f"{url}/{path}")
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_timeout(500)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.locator(".js-plotly-plot").first.wait_for()
    page.wait_for_timeout(1000)
    return page


def test_activations_on_a_phone(phone):
    page = open_page(phone, "activations")
    first = page.evaluate(TICKS_JS, ".xtick text")[0]
    assert len(first) >= 4, first  # tokens are named, some of them
    assert not crowded_ticks(first), crowded_ticks(first)
    tabs = page.get_by_role("tab")
    assert tabs.count() >= 5
    for i in range(tabs.count()):  # every tab on screen, none scrolled away
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
    # the figures of several panels (subplot titles are annotations; the PCA's token labels are placed for a
    # desktop's width and checked there, below)
    for plot in page.evaluate(
        BOXES_JS, ".annotation-text, .g-xtitle text, .g-x2title text, .g-x3title text, .legendtext"
    ):
        if not any(box["text"].startswith("vocabulary") for box in plot["boxes"]):
            assert not overlapping(plot["boxes"]), overlapping(plot["boxes"])
    for ticks in page.evaluate(TICKS_JS, ".xtick text"):
        rows = {}  # one row of labels: side-by-side panels together, stacked apart
        for t in ticks:
            rows.setdefault(round(t["top"] / 20), []).append(t)
        for row in rows.values():
            assert not crowded_ticks(row), crowded_ticks(row)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


def drawn_pca_labels(page) -> list[dict]:
    """The PCA's prompt-token labels as drawn: the boxes of its annotations that show (a label placed for a wider
    figure is display:none, its box empty), without the legend's entries."""
    plots = page.evaluate(BOXES_JS, ".annotation-text, .textpoint text, .legendtext")
    pca = next(p["boxes"] for p in plots if any(b["text"].startswith("vocabulary") for b in p["boxes"]))
    return [b for b in pca if b["width"] > 0 and not b["text"].startswith(("vocabulary", "prompt tokens"))]


@pytest.mark.parametrize("width,height,named", [(1400, 1000, 8), (390, 844, 4)])
def test_pca_token_labels_apart(phone, width, height, named):
    browser, url = phone
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(300_000)
    page.goto(f"{url}/embeddings")
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_timeout(500)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.get_by_text("prompt tokens (", exact=False).first.wait_for()
    page.wait_for_timeout(1000)
    labels = drawn_pca_labels(page)
    assert len(labels) >= named, labels  # the prompt's tokens named (the crowded ones on hover)
    # before: "Butsoft" and a pile of others on a desktop; on a phone the labels placed for a desktop piled up
    assert not overlapping(labels), overlapping(labels)
    page.close()


# Every page's figures at both sizes are checked for crowded labels in test_browser_first_screen.py's page tour
# (one tour for the prose and the labels).
