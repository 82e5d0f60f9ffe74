"""The whole model page in a real browser (Debian's chromium): the diagram lies inside the first screen at 1400x1000
and at 390x844 (the layout each width is meant to show), its boxes keep their text inside them, a click on a box
opens that stage's page, and a stage's link opens its page."""

from __future__ import annotations

import pytest

from tests.support.browser import CHROMIUM  # the server and Chromium: conftest's fixtures

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

SIZES = {"desktop": ({"width": 1400, "height": 1000}, "wide"), "phone": ({"width": 390, "height": 844}, "tall")}

# The shown diagram (the one of the two with a size), its box in the viewport and, for each box of the diagram,
# where Plotly draws it (data -> pixels through the figure's own axes) and the drawn text's box.
DIAGRAM_JS = """() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.getBoundingClientRect().height > 0
      && p._fullLayout && p._fullLayout.meta && p._fullLayout.meta.overview_layout);
  return plots.map(gd => {
    const r = gd.getBoundingClientRect(), xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const t = gd._fullData[0];
    const px = (x) => r.left + xa._offset + xa.l2p(x), py = (y) => r.top + ya._offset + ya.l2p(y);
    const shapes = gd._fullLayout.shapes.filter(s => s.line && s.line.width > 0).map(s => ({
      left: Math.min(px(s.x0), px(s.x1)), right: Math.max(px(s.x0), px(s.x1)),
      top: Math.min(py(s.y0), py(s.y1)), bottom: Math.max(py(s.y0), py(s.y1))}));
    const texts = [...gd.querySelectorAll('.scatterlayer text')].map(el => ({text: el.textContent,
      ...el.getBoundingClientRect().toJSON()}));
    return {layout: gd._fullLayout.meta.overview_layout, box: r.toJSON(), shapes, texts,
            centres: t.x.map((x, i) => [px(x), py(t.y[i]), t.customdata[i]])};
  });
}"""


def open_overview(browser, url, viewport):
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(300_000)  # a loaded 2-core machine can take minutes
    page.goto(f"{url}/overview")
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_timeout(500)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.wait_for_function(f"() => ({DIAGRAM_JS})().length === 1")
    page.wait_for_timeout(1000)
    return page


def inside(text: dict, box: dict, slack: float = 1.5) -> bool:
    return (
        box["left"] - slack <= text["left"]
        and text["right"] <= box["right"] + slack
        and box["top"] - slack <= text["top"]
        and text["bottom"] <= box["bottom"] + slack
    )


@pytest.mark.parametrize("size", list(SIZES))
def test_the_diagram_is_in_the_first_screen_with_its_text_in_its_boxes(browser, server, size, tmp_path):
    viewport, layout = SIZES[size]
    page = open_overview(browser, server, viewport)
    page.screenshot(path=str(tmp_path / f"overview_{size}.png"))
    [diagram] = page.evaluate(DIAGRAM_JS)
    assert diagram["layout"] == layout
    box = diagram["box"]
    assert 0 <= box["top"] and box["bottom"] <= viewport["height"], box
    assert 0 <= box["left"] and box["right"] <= viewport["width"], box
    # every line of text sits inside one box of the diagram (none runs over its box's edge)
    assert len(diagram["texts"]) == len(diagram["centres"])
    for text in diagram["texts"]:
        assert any(inside(text, shape) for shape in diagram["shapes"]), text
    page.close()


def test_a_box_and_a_link_open_their_pages(browser, server):
    page = open_overview(browser, server, SIZES["desktop"][0])
    [diagram] = page.evaluate(DIAGRAM_JS)
    # an attention box whose head is not the one the Attention page opens on by itself (layer 1, head 0 here)
    x, y, (_, layer, head, _) = next(c for c in diagram["centres"] if c[2][0] == "attn" and c[2][1:3] != [1, 0])
    page.mouse.move(x, y)
    page.wait_for_timeout(300)
    page.mouse.click(x, y)
    page.wait_for_function("() => [...document.querySelectorAll('h1')].some(h => h.textContent.trim() === 'Attention')")
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    # the Attention page opened on that block's head, with the model and prompt as they were
    page.get_by_text(f"Layer {layer}, head {head}", exact=True).first.wait_for()
    page.goto(page.url.split("?")[0].rsplit("/", 1)[0] + "/overview")
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    page.locator('[data-testid="stMain"] a', has_text="Embeddings").click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('h1')].some(h => h.textContent.trim() === 'Embeddings')"
    )
    assert page.url.split("?")[0].endswith("/embeddings")
    page.close()


def test_the_layernorm_radio_redraws_the_other_wiring(browser, server):
    page = open_overview(browser, server, SIZES["desktop"][0])
    [before] = page.evaluate(DIAGRAM_JS)
    block_0 = lambda d: [c[2][0] for c in d["centres"] if c[2][1] == 0 and c[2][0] != "lens"]  # noqa: E731
    assert block_0(before) == ["ln", "attn", "add", "ln", "mlp", "add"]
    page.locator('[data-testid="stSidebar"]').get_by_text("post-norm (GPT-1)").click()
    page.wait_for_function(
        f"() => ({DIAGRAM_JS})().some(d => d.centres.filter(c => c[2][1] === 0)[0][2][0] === 'attn')"
    )
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=300_000)
    [after] = page.evaluate(DIAGRAM_JS)
    assert block_0(after) == ["attn", "add", "ln", "mlp", "add", "ln"]
    page.get_by_text("post-norm: each block runs its boxes in this order").wait_for(
        timeout=60_000
    )  # may follow the diagram
    page.close()
