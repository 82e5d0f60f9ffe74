"""Heads forming's step slider follows Play (issue 41): while the snapshots play, the slider in the step slider's place
shows each step as it is drawn, and the header of each run names that step. Real server, Debian's chromium."""

from __future__ import annotations

import re

import pytest

from tests.support.browser import CHROMIUM  # the server and Chromium: conftest's fixtures

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

SLIDER = '[data-testid="stSlider"] input[type="range"]'
THUMB = '[data-testid="stSliderThumbValue"]'
READ_JS = """(thumb) => [document.querySelector(thumb).innerText,
  [...document.querySelectorAll('[data-testid="stMarkdown"]')].map((el) => el.innerText)]"""
HEADER = re.compile(r"^pre-norm, step (\d+)")


def test_the_slider_moves_with_play(browser, server):
    url = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(300_000)
    page.goto(f"{url}/timeline")
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.locator(THUMB).first.wait_for()
    page.locator(SLIDER).first.focus()
    page.keyboard.press("Home")  # the first snapshot: Play then has every step to go
    page.wait_for_timeout(3000)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.get_by_role("button", name="▶ Play from this step").click()
    seen = []
    for _ in range(6):
        page.wait_for_timeout(1500)
        thumb, texts = page.evaluate(READ_JS, THUMB)  # both read at one instant
        headers = [HEADER.match(t) for t in texts]
        seen.append((int(thumb.replace(",", "")), next((int(m[1]) for m in headers if m), None)))
    page.close()
    sliders = [s for s, _ in seen]
    assert len(set(sliders)) >= 3 and sliders == sorted(sliders), seen  # it moves, forward
    # the slider and the header agree (a frame may be mid-redraw: most samples, not every one)
    assert sum(s == h for s, h in seen) >= 4, seen
