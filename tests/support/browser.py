"""The real-browser tests' Chromium and app server, and what they do on a page (conftest's fixtures use them)."""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path

from benchmarks.servers import streamlit_server, unit_page_drawn
from tests.support import ROOT

CHROMIUM = Path("/usr/bin/chromium")


ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def app_server(env: dict[str, str] | None = None, port: int | None = None):
    """A fresh `streamlit run app.py` from the checkout on `port` (else a free one), in `env` (else this process's
    environment); yields its URL once it is healthy."""
    with streamlit_server(
        [sys.executable, "-m", "streamlit", "run", "app.py"],
        cwd=ROOT,
        env=env,
        port=port,
        flags=["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
    ) as s:
        yield s.url


def new_page(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(60_000)  # generous: CI machines can be slow
    return page


def sidebar_select(page, label: str, option: str) -> None:
    box = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(
        has=page.get_by_text(label, exact=True)
    )
    # a box below the sidebar's fold: the scroll that brings it into view closes a list opened in the same click
    # (the prompt box now comes first, so the model's pickers sit lower)
    box.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    box.click()
    page.get_by_role("option", name=option, exact=True).click()


def set_prompt(page, text: str) -> None:
    area = page.locator('[data-testid="stSidebar"] textarea')
    area.fill(text)
    area.press("Control+Enter")


def wait_for_idle(page) -> None:
    """Until the script run ends (the status widget disappears) and no spinner shows."""
    page.wait_for_timeout(300)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=60_000)


def address_shows(page, pattern: str, timeout: int = 60_000) -> str:
    """Until the page's address matches `pattern` (a regex searched in the whole URL); returns the URL. The address is
    written at the end of the run a click starts, and under a loaded machine that run can begin after `wait_for_idle`
    has already seen no status widget: asserting on `page.url` right after it read the address from before the click."""
    try:
        page.wait_for_url(re.compile(pattern), timeout=timeout)
    except Exception as error:
        seconds = timeout / 1000
        raise AssertionError(f"the address never matched {pattern!r} within {seconds:.0f} s: {page.url}") from error
    return page.url


def hover_cell(page, heatmap, query: int, key: int):
    """Hover the heatmap's cell (query, key); returns its tooltip, once it names that cell."""
    heatmap.scroll_into_view_if_needed()
    box = heatmap.bounding_box()
    left, top, cell = (float(heatmap.get_attribute(f"data-{k}")) for k in ("left", "top", "cell"))
    page.mouse.move(box["x"] + left + (key + 0.5) * cell, box["y"] + top + (query + 0.5) * cell, steps=3)
    tip = page.locator(".gv-tip").filter(has_text=f"query position {query}, key position {key}").first
    tip.wait_for()
    return tip


def hover_bar(page, bars, key: int) -> str:
    """Hover the query bars' bar for `key`; returns its tooltip's text, once it names that key."""
    bars.scroll_into_view_if_needed()
    box = bars.bounding_box()
    left, top, slot = (float(bars.get_attribute(f"data-{k}")) for k in ("left", "top", "slot"))
    page.mouse.move(box["x"] + left + (key + 0.5) * slot, box["y"] + top + 20, steps=3)
    tip = page.locator(".gv-qtip").filter(has_text=f"key position {key}").first
    tip.wait_for()
    return tip.text_content()


# Installed in every page conftest's Chromium opens (before the app's own scripts): records each Streamlit exception
# box that appears, even one a later run removes. A box that flashes for the length of one script run is still an
# error a visitor saw, and a check of the page at one moment misses it.
EXCEPTION_WATCH_JS = """(() => {
  const seen = window.__gvExceptions = [];
  const look = () => document.querySelectorAll('[data-testid="stException"]').forEach(box => {
    if (!seen.includes(box)) seen.push(box);
  });
  new MutationObserver(look).observe(document, {childList: true, subtree: true});
})();"""


def no_exception(page) -> None:
    """No Streamlit exception box on the page now, nor any that showed since the page loaded (where conftest's
    watch is installed)."""
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, boxes.all_inner_texts()  # the message names the exception when one shows
    flashed = page.evaluate("(window.__gvExceptions || []).map(box => box.textContent.slice(0, 600))")
    assert not flashed, flashed  # shown for a moment, then removed by a later run


def unit_shown(page, unit: str) -> None:
    """Until the unit page shows `unit`'s summary line, its examples (text) and its two figures."""
    page.locator('[data-testid="stMarkdown"]').filter(has_text=re.compile(f"^{unit}: ")).wait_for()
    unit_page_drawn(page)
