"""Right-to-left and CJK prompts in the text views (issue 62, item 10), in a real browser: an Arabic and a Japanese
prompt. Token text stays text (escaped: a byte of a character split across tokens shows as <0xD8>, as everywhere in
the app), each token keeps the model's order from left to right, and inside its chip an Arabic token reads right to
left. Views: attention on the text (the token rows the unit page and the notebook draw), the Attention page's token
chips, and the Generation page's text (its lines laid out by their own script: an Arabic line starts at the right).
Screenshots at 1400x1000 and 390x844 (test_browser's artifacts folder). Debian's chromium via Playwright."""

from __future__ import annotations

import re
import urllib.parse

import numpy as np
import pytest

from gptviz.model.tokenizer import encode, token_labels
from tests.support.browser import CHROMIUM, no_exception, wait_for_idle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

ARABIC = "قال الملك: مرحبا بالعالم"
JAPANESE = "王は言った：こんにちは世界、猫が好きです"
PROMPTS = {"arabic": ARABIC, "japanese": JAPANESE}
ARABIC_LETTER = re.compile(r"[\u0600-\u06FF]")
VIEWPORTS = [(1400, 1000), (390, 844)]

# each token span of the first row: its text, its box, and for a token of several letters the boxes of its first and
# last letter (a Range over each), so the reading order inside it can be read off the page
ROW_JS = """() => [...document.querySelector('.gv-row').querySelectorAll('.gv-tok')].map((span) => {
  const node = span.firstChild, r = span.getBoundingClientRect(), n = node ? node.length : 0;
  const letter = (i) => { const range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);
                          const b = range.getBoundingClientRect(); return b.left + b.width / 2; };
  return {text: span.textContent, left: r.left, right: r.right, top: r.top, children: span.children.length,
          first: n > 1 ? letter(0) : null, last: n > 1 ? letter(n - 1) : null};
})"""


def rows_html(prompt: str) -> str:
    from gptviz.notebook import attention_on_text
    from gptviz.notebook.standalone import to_html

    ids = encode(prompt)
    T = len(ids)
    p = np.tril(np.random.default_rng(0).random((1, 2, T, T))) + 1e-3 * np.eye(T)
    p = np.tril(p) / np.tril(p).sum(-1, keepdims=True)
    return to_html(attention_on_text(p, token_labels(ids), layer=0, query=T - 1), title="scripts")


def in_model_order(spans: list[dict]) -> None:
    """Every token after the first starts right of the one before it, or on a later line (a narrow screen wraps)."""
    for a, b in zip(spans, spans[1:], strict=False):
        assert b["left"] >= a["right"] - 0.5 or b["top"] > a["top"] + 2, (a["text"], b["text"])


def reads_right_to_left(spans: list[dict]) -> int:
    """Each Arabic token of several letters has its first letter right of its last; returns how many were checked."""
    checked = 0
    for s in spans:
        if s["first"] is not None and ARABIC_LETTER.match(s["text"]) and ARABIC_LETTER.search(s["text"][-1]):
            assert s["first"] > s["last"], s
            checked += 1
    return checked


@pytest.mark.parametrize("width, height", VIEWPORTS)
@pytest.mark.parametrize("script", list(PROMPTS))
def test_attention_on_the_text_keeps_the_models_order(browser, artifacts, script, width, height):  # noqa: F811
    prompt = PROMPTS[script]
    labels = token_labels(encode(prompt))
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_content(rows_html(prompt))
    page.locator(".gv-row .gv-tok").first.wait_for()
    spans = page.evaluate(ROW_JS)
    # the row shows a window of tokens around the query (the last): each shown as its label, as text, in order
    texts = [s["text"] for s in spans]
    assert texts == labels[len(labels) - len(texts) :] and len(texts) >= 8
    assert all(s["children"] == 0 for s in spans)  # text, never markup
    if script == "arabic":
        assert any(re.fullmatch(r"(␣)?(<0x[0-9A-F]{2}>)+", t) for t in texts)  # a split character's bytes
    in_model_order(spans)
    if script == "arabic":
        assert reads_right_to_left(spans) >= 2
    page.screenshot(path=str(artifacts / f"scripts_rows_{script}_{width}.png"), full_page=True)
    page.close()


def open_with_prompt(browser, server, path: str, prompt: str, width: int, height: int, **params):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(180_000)
    page.goto(f"{server}/{path}?" + urllib.parse.urlencode({"prompt": prompt, **params}))
    page.wait_for_selector('[data-testid="stApp"]')
    wait_for_idle(page)
    return page


@pytest.mark.parametrize("width, height", VIEWPORTS)
def test_the_attention_pages_chips_and_the_generated_text(browser, server, artifacts, width, height):  # noqa: F811
    labels = token_labels(encode(ARABIC))
    page = open_with_prompt(browser, server, "attention", ARABIC, width, height)
    chips = page.locator('[data-testid="stButtonGroup"]').filter(has_text="<0x").first
    chips.locator('button[role="radio"]').first.wait_for()
    spans = chips.evaluate("""(g) => [...g.querySelectorAll('button[role="radio"]')].map((b) => {
      const p = b.querySelector('p') || b, node = p.firstChild, r = b.getBoundingClientRect();
      const n = node ? node.data.replace(/\u200b+$/, '').length : 0;  // a repeat's invisible marks aside
      const letter = (i) => { const range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);
                              const x = range.getBoundingClientRect(); return x.left + x.width / 2; };
      return {text: p.textContent.replace(/\\u200b/g, ''), left: r.left, right: r.right, top: r.top,
              children: p.children.length, first: n > 1 ? letter(0) : null, last: n > 1 ? letter(n - 1) : null}; })""")
    assert [s["text"] for s in spans] == labels
    in_model_order(spans)
    assert reads_right_to_left(spans) >= 2
    chips.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"scripts_chips_arabic_{width}.png"))
    no_exception(page)
    page.close()

    # the Generation page's text: the prompt and what the model wrote, a line laid out by its own script
    page = open_with_prompt(
        browser, server, "generation", ARABIC, width, height, gen_n=4, gen_pace="as fast as it writes"
    )
    page.get_by_role("button", name="Generate", exact=True).click()
    code = page.locator('[data-testid="stCode"] code').first
    code.wait_for(timeout=180_000)
    wait_for_idle(page)
    assert code.inner_text().startswith(ARABIC)
    box = page.locator('[data-testid="stCode"] pre').first.bounding_box()  # the block, not its inline text
    first = code.evaluate("""(el) => { const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      const node = walker.nextNode(); const range = document.createRange();
      range.setStart(node, 0); range.setEnd(node, 1);
      const r = range.getBoundingClientRect(); return r.left + r.width / 2; }""")
    assert box["x"] + box["width"] - first < 40  # the Arabic line starts at the right edge (its padding, one letter)
    code.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"scripts_generation_arabic_{width}.png"))
    no_exception(page)
    page.close()
