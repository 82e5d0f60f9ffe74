"""Issue 59's GPT-1 tokenizer, in a real browser: a server whose model folders hold a Hugging Face GPT-1 folder (with
its vocab.json and merges.txt) opens it from a link, and the Attention page's token chips are GPT-1's own tokens
(lower case, a word's last piece marked "␣"), as transformers' OpenAIGPTTokenizer cuts the prompt. Photographed at
1400x1000 and on a 390x844 phone (GPTVIZ_TEST_SCREENSHOTS keeps the pictures)."""

from __future__ import annotations

import os
import urllib.parse

import pytest

from gptviz.app import keys as K
from tests.support.browser import CHROMIUM, app_server, no_exception, wait_for_idle
from tests.support.gpt1 import PROMPT, gpt1_folder, hf_ids, hf_labels

pytestmark = [
    pytest.mark.slow,
    pytest.mark.hf,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]


def chips(page) -> list[str]:
    """The Attention page's token chips, as drawn (a repeat's zero-width spaces taken off)."""
    radios = page.locator(f".st-key-{K.ATT_QUERY} [role='radio']")
    return [t.rstrip("\u200b") for t in radios.all_inner_texts()]


def test_a_gpt1_folder_shows_its_own_tokens_on_the_attention_page(browser, tmp_path, artifacts):
    gpt1 = gpt1_folder(tmp_path / "ops" / "openai-gpt")
    want = hf_labels(gpt1, hf_ids(gpt1))
    link = "/?" + urllib.parse.urlencode(
        {"source": "pretrained", "model": str(gpt1.folder), "norm": "post", "prompt": PROMPT}
    )
    env = {**os.environ, "GPTVIZ_MODEL_DIRS": str(tmp_path / "ops")}
    with app_server(env) as url:
        for width, height, phone in ((1400, 1000, False), (390, 844, True)):
            context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=phone, has_touch=phone)
            page = context.new_page()
            page.set_default_timeout(120_000)
            page.goto(url + link)
            page.wait_for_selector('[data-testid="stApp"]')
            page.get_by_role("radio", name=want[0], exact=True).wait_for()  # the chips of GPT-1's tokens
            page.locator("canvas.gv-heat").first.wait_for()
            wait_for_idle(page)
            assert chips(page) == want
            assert page.locator(".gv-map").first.locator(".gv-layer").count() == 2  # the tiny GPT-1's layers
            no_exception(page)
            page.screenshot(path=str(artifacts / f"gpt1_attention_{width}.png"))
            context.close()
