"""A failed Hub click and the way back (issue 32), in a real browser on a server that cannot reach the Hub: the
message says what happened, and one button returns to the model and the view the visitor had, prompt kept.
Real server (HF_HUB_OFFLINE and an empty Hugging Face home, so no machine ever downloads GPT-2 here), Debian's
chromium."""

from __future__ import annotations

import os
import re

import pytest

from gptviz.app import keys as K
from tests.support.browser import CHROMIUM, app_server, no_exception, set_prompt, wait_for_idle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

PROMPT = "Romeo.\nBut soft! what light through yonder window breaks?\nRomeo.\nBut soft!"
SHOTS = os.environ.get("GPTVIZ_TEST_SCREENSHOTS")  # a folder to keep the screenshots in, if set


@pytest.fixture(scope="module")
def offline_server(tmp_path_factory):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path_factory.mktemp("empty-hf-home"))}
    with app_server(env) as url:
        yield url


def shot(page, name: str) -> None:
    if SHOTS:
        page.screenshot(path=os.path.join(SHOTS, name))


@pytest.mark.parametrize("width,height", [(1400, 1000), (390, 844)])
def test_back_from_a_failed_hub_click_to_the_model_and_view_before(browser, offline_server, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(300_000)  # generous: a loaded 2-core machine took minutes
    page.goto(offline_server)
    page.wait_for_selector('[data-testid="stApp"]')
    sidebar = page.locator('[data-testid="stSidebar"]')
    phone = width < 768  # its sidebar starts closed, and the page has a prompt box of its own
    if phone:
        area = page.locator(f".st-key-{K.NARROW_ONLY} textarea")
        area.fill(PROMPT)
        area.press("Control+Enter")
    else:
        set_prompt(page, PROMPT)
    wait_for_idle(page)
    # a view of the visitor's own: layer 2, head 1, the linear scale, the lines view
    page.locator(".gv-layer").filter(has_text="layer 2").click()
    page.locator(".gv-head").filter(has_text=re.compile("^head 1$")).click()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 2, head 1$")).wait_for()
    wait_for_idle(page)
    scale = page.get_by_role("combobox", name="Colour scale", exact=True)
    scale.scroll_into_view_if_needed()  # a scroll in the same click can close the list it opened
    page.wait_for_timeout(300)
    scale.click()
    option = page.get_by_role("option", name="linear, 0 to 1", exact=True)
    try:
        option.wait_for(timeout=5_000)
    except Exception:  # on a phone the first tap can focus the box without opening its list: open it by keyboard
        scale.press("ArrowDown")
    option.click()
    wait_for_idle(page)
    page.get_by_role("tab", name="Lines between tokens", exact=True).click()
    wait_for_idle(page)

    if phone:
        page.get_by_test_id("stExpandSidebarButton").click()
    sidebar.get_by_role("button", name=re.compile("^GPT-2 small from the Hub")).click()
    page.get_by_text("the Hub cannot be reached", exact=False).first.wait_for()
    wait_for_idle(page)
    assert page.locator("canvas.gv-heat").count() == 0  # no model, no map
    if phone:  # the message and the way back are the page's
        page.get_by_test_id("stSidebarCollapseButton").click()
        page.wait_for_timeout(500)
    shot(page, f"hub-failed-{width}.png")
    back = page.get_by_role("button", name=re.compile("^Back to shakespeare-pre"))
    back.click()
    wait_for_idle(page)

    # the view as it was: the lines view, layer 2, head 1, the linear scale; then the map of that head
    page.get_by_role("tab", name="Lines between tokens", exact=True).and_(
        page.locator('[aria-selected="true"]')
    ).wait_for()
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
    for name, value in (("Layer", "layer 2"), ("Head", "head 1"), ("Colour scale", "linear, 0 to 1")):
        assert page.get_by_role("combobox", name=name, exact=True).input_value() == value, name
    page.get_by_role("tab", name="One head", exact=True).click()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 2, head 1$")).wait_for()
    assert "model=" not in page.url and "source=bundled" in page.url  # the link names the model again
    if phone:
        assert page.locator(f".st-key-{K.NARROW_ONLY} textarea").input_value() == PROMPT
        page.get_by_test_id("stExpandSidebarButton").click()
    assert sidebar.locator("textarea").first.input_value() == PROMPT  # the prompt kept
    assert sidebar.get_by_role("button", name=re.compile("^GPT-2 small from the Hub")).count() == 1
    no_exception(page)
    if phone:
        page.get_by_test_id("stSidebarCollapseButton").click()
        page.wait_for_timeout(500)
    shot(page, f"hub-back-{width}.png")
    page.close()
