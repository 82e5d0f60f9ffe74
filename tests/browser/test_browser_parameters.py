"""The Parameters page's first screen in a real browser (Debian's chromium), at 1400x1000 and at a 390x844 phone: the
chart by group (embeddings, attention with its output projection, MLP, norms, LM head) whole inside the first
screen, its labels apart from each other and from every bar, the exact counts drawn, for GPT-1, GPT-2 small to XL
and the model in use; at most about 120 words of prose above the chart."""

from __future__ import annotations

import re

import pytest

from gptviz import PRESETS
from gptviz.model.params import GROUP_ORDER, by_group, param_table
from tests.support.browser import CHROMIUM  # the server and Chromium: conftest's fixtures
from tests.support.layout import overlapping

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

SIZES = [(1400, 1000), (390, 844)]
MODELS = ["gpt1", "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl", None]  # None: the model in use

# The first chart on the page: its box, its annotation labels' boxes and its bars' boxes, as drawn.
CHART_JS = """() => {
  const plot = [...document.querySelectorAll('.js-plotly-plot')].find((p) => p.getBoundingClientRect().width);
  const box = (el) => ({text: el.textContent, ...el.getBoundingClientRect().toJSON()});
  return {plot: plot.getBoundingClientRect().toJSON(),
          title: box(plot.querySelector('.gtitle')),
          labels: [...plot.querySelectorAll('.annotation-text')].map(box),
          bars: [...plot.querySelectorAll('.point path')].map(box)};
}"""
# Words of text drawn above a y (px): the page's own prose, not the sidebar's nor the chart's.
WORDS_ABOVE_JS = """(y) => {
  const main = document.querySelector('[data-testid="stMain"]');
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  let words = 0, node;
  while ((node = walker.nextNode())) {
    const el = node.parentElement;
    if (el.closest('.js-plotly-plot') || !el.getClientRects().length) continue;
    const r = el.getBoundingClientRect();
    if (r.bottom <= y && r.width) words += node.textContent.trim().split(/\\s+/).filter(Boolean).length;
  }
  return words;
}"""


@pytest.mark.parametrize("width,height", SIZES)
@pytest.mark.parametrize("model", MODELS)
def test_the_component_chart_reads_in_the_first_screen(browser, server, width, height, model):
    chromium, url = browser, server
    page = chromium.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(300_000)
    page.goto(f"{url}/parameters" + (f"?par_model={model}" if model else ""))
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_timeout(500)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.locator(".js-plotly-plot .annotation-text").first.wait_for()
    page.wait_for_timeout(800)
    assert page.evaluate("() => window.scrollY") == 0
    chart = page.evaluate(CHART_JS)
    plot = chart["plot"]
    assert plot["top"] >= 0 and plot["bottom"] <= height, plot  # the whole chart in the first screen
    assert page.evaluate(WORDS_ABOVE_JS, plot["top"]) <= 120
    labels, bars = chart["labels"], chart["bars"]
    assert len(labels) == len(bars) == len(GROUP_ORDER)
    for label in labels:
        assert plot["left"] <= label["left"] and label["right"] <= plot["right"], label  # not cut at an edge
        assert label["height"] >= 12  # 12 px text
        assert label["top"] >= chart["title"]["bottom"], (label, chart["title"])
        assert not overlapping([label] + [dict(b, text="bar") for b in bars]), label  # over no bar
    assert not overlapping(labels), overlapping(labels)
    drawn = {
        m.group(1): int(m.group(2).replace(",", ""))
        for m in (re.match(r"(.+?)  ([0-9,]+) · ", label["text"]) for label in labels)
    }
    assert list(drawn) == list(GROUP_ORDER)  # the same rows for every model
    if model:
        groups = by_group(param_table(PRESETS[model]))
        total = int(groups["count"].sum())
        assert f"{total:,} parameters" in chart["title"]["text"]
        assert drawn == dict(
            zip(groups["group"], groups["count"], strict=True)
        )  # every parameter in its group, exactly
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()
