"""Two clicks on the Attention page, in a real browser (issue 60): a unit pill in the views' fragment opens that unit's
page at once, and a token chip whose label appears more than once selects the position clicked, not the last copy.
Debian's chromium via Playwright, a real server (conftest's fixtures)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from tests.support.browser import CHROMIUM, address_shows, no_exception, wait_for_idle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

# token labels: "the", "␣cat", ".", "␣the", "␣cat", ".", "␣the", "␣cat", "." (␣cat at 1, 4 and 7)
REPEATS = "the cat. the cat. the cat."


def test_a_unit_pill_on_the_attention_page_opens_its_unit_at_once(browser, server):
    # the pills sit in the views' fragment: a click reran only the fragment, so the router that switches page never
    # ran, and the unit page opened on some later full run instead
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(server)
    pills = page.get_by_role("radiogroup", name="What the top heads do over the corpus")
    pill = pills.get_by_role("radio").first
    pill.wait_for()
    wait_for_idle(page)
    unit = pill.inner_text().strip()
    assert re.fullmatch(r"L\d+H\d+", unit), unit
    pill.click()
    # without the fix nothing happens at all until another full run: 30 s is far more than the switch takes
    page.locator('[data-testid="stMarkdown"]').filter(has_text=re.compile(f"^{unit}: ")).wait_for(timeout=30_000)
    address_shows(page, rf"/units\?(.*&)?unit={unit}(&|$)")  # the address follows at the run's end
    no_exception(page)
    page.close()


def checked_chip(page) -> int:
    """The position of the token chip shown as picked (the chips are the radio group of the prompt's tokens)."""
    chips = page.get_by_role("radiogroup").filter(has=page.get_by_role("radio", name="␣cat", exact=True))
    return chips.get_by_role("radio").evaluate_all("rs => rs.findIndex(r => r.getAttribute('aria-checked') === 'true')")


@pytest.mark.parametrize("position", [1, 4])
def test_a_token_chip_with_a_repeated_label_selects_the_position_clicked(browser, server, position):
    # Streamlit's pills send the label of the chip clicked, which the server mapped back to the last option with that
    # label: the first "␣cat" selected the third
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{server}/?prompt={quote(REPEATS)}")
    chips = page.get_by_role("radiogroup").filter(has=page.get_by_role("radio", name="␣cat", exact=True))
    chips.get_by_role("radio").nth(8).wait_for()
    wait_for_idle(page)
    assert chips.get_by_role("radio").count() == 9
    chips.get_by_role("radio").nth(position).click()
    page.wait_for_function("location.search.includes('att_query=')", timeout=30_000)
    wait_for_idle(page)
    assert (checked_chip(page), re.search(r"att_query=(\d+)", page.url).group(1)) == (position, str(position))
    no_exception(page)
    page.close()
