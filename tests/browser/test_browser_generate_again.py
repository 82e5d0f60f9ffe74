"""Generate pressed again and again on the Attention page, in a real browser: every run reaches its finished view.

With Streamlit's message cache on (its default), a rerun asked for from inside a fragment (the live view's end, and
Generate, whose button sits in the views' fragment) reused the browser's list of cached messages from that fragment's
request, while the browser dropped the fragment's old messages as its runs ended. The server then sent a reference to
a message the browser no longer had, and the page stopped with "Connection error: Cached ForwardMsg MISS", the live
view frozen at "Generating: 1 of 60" or "60 of 60". Before .streamlit/config.toml turned the cache off, this failed by
the second or third press in three of four tries. Debian's chromium via Playwright, the shared server of conftest."""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest

from tests.support.browser import CHROMIUM, wait_for_idle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

N = 60  # tokens a run writes, at the model's own pace: a run ends within a second or two on the bundled model
PRESSES = 15
PROMPT = "Romeo. But soft, what light through yonder window breaks? It is the east, and Juliet is the sun."

# The finished run's caption is on the page, no live line is, and the previous run's caption went away first (the
# click started a new run). window.__gone is reset before each press.
FINISHED = f"""() => {{
    const text = document.body.innerText;
    const done = /then {N} new ones: the model wrote/.test(text);
    window.__gone = window.__gone || !done;
    return (window.__gone && done && !/Generating:/.test(text)) || /Connection error/.test(text);
}}"""


def test_generate_pressed_again_and_again_ends_every_run(browser, server, artifacts):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{server}/?prompt={quote(PROMPT)}&att_gen_n={N}&att_gen_pace={quote('as fast as it writes')}")
    page.locator(".gv-map .gv-title").first.wait_for()
    wait_for_idle(page)
    button = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Generate")
    for press in range(PRESSES):
        page.evaluate("() => { window.__gone = false; }")
        button.click()
        try:
            page.wait_for_function(FINISHED, timeout=60_000, polling=20)
        except Exception:
            page.screenshot(path=str(artifacts / f"generate-again-{press}.png"))
            raise
        text = page.locator("body").inner_text()
        if "Connection error" in text:
            page.screenshot(path=str(artifacts / f"generate-again-{press}.png"))
        assert "Connection error" not in text, f"press {press + 1}: {text[:600]}"
        time.sleep(0.2)  # the next press soon after the finished view, as an impatient visitor's
    page.close()
