"""The app in a real browser: Streamlit server + Debian's chromium driven by Playwright.

Attention page: pick the tiny preset, type a prompt, wait for the heatmap, hover a cell (the hover names
both tokens); a markup prompt stays text (no dialog, no <img> element, the literal text on the page);
Generation page: a short generation, then Stop during a long one. A link to one page, opened first on a new
server, shows that page inside the app. No Streamlit exception box anywhere. Screenshots go to a temporary
folder (pytest's basetemp), or to the folder GPTVIZ_TEST_SCREENSHOTS names; never into the checkout.
"""

from __future__ import annotations

import re
import urllib.parse

import pytest

from tests.support import ROOT
from tests.support.browser import (
    CHROMIUM,
    app_server,
    hover_bar,
    hover_cell,
    new_page,
    no_exception,
    set_prompt,
    sidebar_select,
    wait_for_idle,
)
from tests.support.pagetest import MARKUP

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's chromium at /usr/bin/chromium (CI installs it; no browser is downloaded)",
    ),
]


@pytest.fixture(scope="module")
def browser_page(browser, server):
    page = new_page(browser)
    dialogs: list[str] = []  # alert()/confirm() a prompt might trigger: must stay empty
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(server)
    page.wait_for_selector('[data-testid="stApp"]', timeout=120_000)
    yield page, dialogs
    page.close()


FONT_JS = "(el) => { const s = getComputedStyle(el); return `${s.fontFamily} ${s.fontSize} ${s.lineHeight}`; }"


def test_attention_and_generation_in_a_browser(browser_page, artifacts):
    from playwright.sync_api import expect

    page, dialogs = browser_page
    page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first.wait_for()
    sidebar_select(page, "Source", "Preset, random weights")  # the default unless bundled models exist
    wait_for_idle(page)
    sidebar_select(page, "Preset", "tiny")
    wait_for_idle(page)
    set_prompt(page, "the cat sat on the mat")
    wait_for_idle(page)
    page.get_by_role("radio", name="␣mat", exact=True).wait_for()  # the token chips of the new prompt
    # the page opened on the bundled model's best head; start this walk from layer 0, head 0 of the tiny model
    page.locator(".gv-layer").filter(has_text="layer 0").click()
    page.locator(".gv-head").filter(has_text=re.compile("^head 0$")).click()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 0, head 0$")).wait_for()
    heatmap = page.locator("canvas.gv-heat").first
    no_exception(page)
    page.screenshot(path=str(artifacts / "attention.png"), full_page=True)

    # hover a cell of the lower triangle: the tip names the query and key tokens and the weight
    tip = hover_cell(page, heatmap, 5, 0)
    box = heatmap.bounding_box()
    left, top, cell = (float(heatmap.get_attribute(f"data-{k}")) for k in ("left", "top", "cell"))
    match = re.search(
        r"'(.+?)' → '(.+?)': weight [0-9.e-]+\s*query position (\d+), key position (\d+)", tip.text_content()
    )
    assert match, tip.text_content()
    assert match.group(1) == "␣mat" and match.group(2) == "the"
    page.mouse.move(box["x"] + left + 4.5 * cell, box["y"] + top + 1.5 * cell, steps=2)  # query 1, key 4: future
    page.locator(".gv-tip").filter(has_text="masked: a token cannot look at later tokens").wait_for()
    page.locator(".gv-map").first.screenshot(path=str(artifacts / "attention_hover.png"))

    # drag over queries 2-4 and keys 0-2 to zoom; hover then reads the zoomed cells; double-click shows all
    heatmap.scroll_into_view_if_needed()
    box = heatmap.bounding_box()  # the screenshot may have scrolled the page
    page.mouse.move(box["x"] + left + 0.5 * cell, box["y"] + top + 2.5 * cell)
    page.mouse.down()
    page.mouse.move(box["x"] + left + 2.5 * cell, box["y"] + top + 4.5 * cell, steps=4)
    page.mouse.up()
    page.locator(".gv-hint").filter(has_text="Zoomed: queries 2-4, keys 0-2 of 6 x 6").wait_for()
    zoomed = float(heatmap.get_attribute("data-cell"))
    assert zoomed > 1.5 * cell  # three rows now fill the height six did
    page.mouse.move(box["x"] + left + 0.5 * zoomed, box["y"] + top + 0.5 * zoomed, steps=2)  # query 2, key 0
    page.locator(".gv-tip").filter(has_text="query position 2, key position 0").wait_for()
    heatmap.dblclick()
    page.locator(".gv-hint").filter(has_text="Drag over the map to zoom").wait_for()

    # a head picked in the map redraws it at once; the page's Head picker and the bar chart follow
    page.locator(".gv-head").filter(has_text="head 3").click()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 0, head 3$")).wait_for()
    expect(page.get_by_role("combobox", name="Head", exact=True)).to_have_value("head 3")
    page.locator(".gv-layer").filter(has_text="layer 1").click()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 1, head 3$")).wait_for()
    expect(page.get_by_role("combobox", name="Layer", exact=True)).to_have_value("layer 1")
    wait_for_idle(page)
    no_exception(page)
    # the bars beside the map are the picked head's row for the last token: a bar's weight is its cell's
    page.locator(".gv-qtitle").filter(has_text="Where token 5 '␣mat' looks").wait_for()
    cell_weight = re.search(r"weight ([0-9.e-]+)", hover_cell(page, heatmap, 5, 1).text_content()).group(1)
    bar_tip = hover_bar(page, page.locator("canvas.gv-qcanvas").first, 1)
    assert bar_tip.startswith(f"'␣mat' → '␣cat': weight {cell_weight}"), (bar_tip, cell_weight)

    # the entropy map: clicking a head's cell opens that head in the One head view
    page.get_by_role("tab", name="Entropy map").click()
    entropy = page.locator(".js-plotly-plot").filter(has_text="Attention entropy per head").first
    entropy.wait_for()
    wait_for_idle(page)  # the view's fragment may still be drawing: hover the figure it leaves
    entropy.scroll_into_view_if_needed()
    box = entropy.locator(".nsewdrag").first.bounding_box()  # tiny: 2 layers x 4 heads
    x, y = box["x"] + box["width"] * 2.5 / 4, box["y"] + box["height"] * 1.5 / 2
    page.mouse.move(x, y, steps=4)
    page.locator(".hoverlayer .hovertext").filter(has_text="layer 1, head 2").wait_for()
    page.mouse.click(x, y)
    page.locator('[role="tab"][aria-selected="true"]').filter(has_text="One head").wait_for()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 1, head 2$")).wait_for()
    no_exception(page)

    # markup in the prompt stays text: no dialog, no element, the pieces shown literally
    set_prompt(page, MARKUP)
    wait_for_idle(page)
    page.get_by_role("radio", name="img", exact=True).wait_for()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 1, head 2$")).wait_for()
    assert page.get_by_role("radio", name="<", exact=True).count() >= 1
    assert page.locator('img[src="x"]').count() == 0 and not dialogs
    no_exception(page)
    page.screenshot(path=str(artifacts / "attention_markup.png"), full_page=True)

    # a short generation on the Generation page; the prompt comes back as literal text
    page.locator('[data-testid="stSidebarNav"] a').filter(has_text="Generation").click()
    page.get_by_role("button", name="Generate").wait_for()
    new_tokens = page.get_by_label("New tokens")
    new_tokens.fill("3")
    new_tokens.press("Enter")
    wait_for_idle(page)
    page.get_by_role("button", name="Generate").click()
    # the page opens on the prompt's next-token table already: wait for the run's own closing line (it is paced)
    page.get_by_text(re.compile(r"then 3 new ones: the model wrote them in")).wait_for(timeout=60_000)
    wait_for_idle(page)
    code = page.locator('[data-testid="stCode"]').first.inner_text()
    assert code.startswith(MARKUP)
    assert page.locator('img[src="x"]').count() == 0 and not dialogs
    assert page.locator(".js-plotly-plot").filter(has_text="each generating query").count() == 1
    no_exception(page)
    page.screenshot(path=str(artifacts / "generation.png"), full_page=True)

    # Stop during a long generation: the run ends, the tokens written so far stay
    new_tokens.fill("200")
    new_tokens.press("Enter")
    wait_for_idle(page)
    page.get_by_role("button", name="Generate").click()
    page.get_by_text(re.compile(r"Generating: ([3-9]|\d\d) of 200 tokens")).wait_for()
    # the live text and next-token list are drawn in the finished text's font: no reflow when st.code replaces it
    live_fonts = [
        page.locator(f".st-key-gv_mono_{name} [data-testid='stText'] span").first.evaluate(FONT_JS)
        for name in ("generated", "next")
    ]
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).click()
    stopped = page.get_by_text(re.compile(r"Stopped after \d+ of 200 tokens"))
    stopped.wait_for()
    wait_for_idle(page)
    finished_font = page.locator('[data-testid="stCode"] code').first.evaluate(FONT_JS)
    assert "monospace" in finished_font and live_fonts == [finished_font, finished_font], (live_fonts, finished_font)
    kept = int(re.search(r"Stopped after (\d+)", stopped.inner_text()).group(1))
    assert 3 <= kept < 200
    # the model's own time, then the pace it was shown at (issue 62: one "tok/s" beside a paced replay read as wrong)
    caption = page.get_by_text(
        re.compile(
            f"^The prompt's 22 tokens, then {kept} new ones: the model wrote them in "
            r"[0-9.]+ s \(\d+ tokens/s\); shown at \d+ tokens/s \(the Pace setting\)\.$"
        )
    )
    caption.wait_for(timeout=30_000)  # the stopped run's final draw can trail the info box on a loaded machine
    assert caption.count() == 1
    no_exception(page)
    page.screenshot(path=str(artifacts / "generation_stopped.png"), full_page=True)


def test_a_link_to_a_page_opens_it_inside_the_app_on_a_fresh_server(browser):
    """The first visit to a new server may be a bookmark of one page. Streamlit treats a folder named `pages/`
    as an old-style multipage app until app.py has called st.navigation once, and would run the page file
    alone: no shared sidebar, no model."""
    with app_server() as url:
        page = new_page(browser)
        page.goto(f"{url}/generation")
        page.get_by_role("button", name="Generate").wait_for(timeout=120_000)  # the page, with a model
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
        assert "Pre-norm vs post-norm" in nav and "Train a model" in nav  # the app's own navigation
        page.get_by_text("LayerNorm placement").first.wait_for(timeout=60_000)  # the sidebar may draw after the page
        assert page.get_by_text("LayerNorm placement").count() == 1  # the shared sidebar
        no_exception(page)
        page.close()


def test_the_first_pages_own_name_opens_it_with_the_links_settings(browser, server):
    """The Attention page is the default, served at "/"; "/attention" (typed, bookmarked) showed Streamlit's "Page
    not found" dialog. It now sends the visitor to "/" with the link's settings."""
    page = new_page(browser)
    page.goto(f"{server}/attention?source=preset&preset=tiny&prompt=the+cat+sat&att_layer=1")
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 1, head 0$")).wait_for()  # the link's layer
    page.get_by_role("radio", name="␣sat", exact=True).wait_for()  # the link's prompt
    assert page.get_by_text("Page not found").count() == 0
    assert urllib.parse.urlsplit(page.url).path == "/"
    no_exception(page)
    page.close()


NEW_VIEWS = {
    "Lines between tokens": "each query (left) to the keys",
    "On the text": "where token",
    "Inside the head": "Σ q⊙k",
    "Value-weighted": "Weight × ‖value · W_O‖",
}


def test_the_attention_views_from_other_tools_at_16_and_64_tokens(browser, server, artifacts):
    """Each view opened from a link (tiny preset) at 16 and 64 tokens draws its figure with no exception; in the
    lines view a click on a query token keeps only its lines."""
    from urllib.parse import quote

    page = new_page(browser)
    letters = [chr(ord("A") + i % 26) for i in range(64)]
    for n in (16, 64):
        prompt = " ".join(letters[:n])  # one token per letter
        for view, title in NEW_VIEWS.items():
            page.goto(f"{server}/?source=preset&preset=tiny&att_layer=1&prompt={quote(prompt)}&att_view={quote(view)}")
            page.get_by_role("tab", name=view, exact=True).and_(page.locator('[aria-selected="true"]')).wait_for()
            page.locator(".js-plotly-plot").filter(has_text=title).first.wait_for()
            wait_for_idle(page)
            assert page.get_by_text(f"{n} tokens", exact=True).count() == 1
            no_exception(page)
            page.screenshot(path=str(artifacts / f"attention_{view.split()[0].lower()}_{n}.png"), full_page=True)
    # lines view: click query token 5 in the left column
    page.goto(
        f"{server}/?source=preset&preset=tiny&prompt={quote(' '.join(letters[:16]))}"
        f"&att_view={quote('Lines between tokens')}"
    )
    lines = page.locator(".js-plotly-plot").filter(has_text="each query (left)").first
    lines.wait_for()
    wait_for_idle(page)
    lines.scroll_into_view_if_needed()
    queries = lines.locator(".scatterlayer .trace").nth(-2).locator(".point")
    box = queries.nth(5).bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=3)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.get_by_role("radio", name="␣F", exact=True).and_(page.locator('[aria-checked="true"]')).wait_for()
    # the same rerun turns the switch on, but its drawing may land after the radio's under load: wait for it
    from playwright.sync_api import expect

    expect(page.get_by_role("switch", name="Only the chosen query's lines")).to_be_checked(timeout=30_000)
    no_exception(page)
    # model view: the marker in a panel's corner opens that head in the One head view
    page.goto(
        f"{server}/?source=preset&preset=tiny&prompt={quote(' '.join(letters[:16]))}"
        f"&att_view={quote('Model view: every layer and head')}"
    )
    view = page.locator(".js-plotly-plot").filter(has_text="Every layer (rows)").first
    view.wait_for()
    wait_for_idle(page)
    view.scroll_into_view_if_needed()
    marker = view.locator(".scatterlayer .trace").last.locator(".point").nth(1 * 4 + 2)  # layer 1, head 2
    box = marker.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=3)
    page.locator(".hoverlayer .hovertext").filter(has_text="layer 1, head 2: click to open").wait_for()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.locator('[role="tab"][aria-selected="true"]').filter(has_text="One head").wait_for()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 1, head 2$")).wait_for()
    no_exception(page)
    page.close()


def test_a_long_prompt_sends_the_picked_head_in_full_and_pooled_thumbnails(browser, server, artifacts):
    """gpt2-small (random weights) at 300 tokens: a layer's 13 patterns are 1.17M cells, over what is sent whole, so
    the map gets the picked head in full and max-pooled thumbnails; picking another head loads it from the server."""
    from urllib.parse import quote

    from gptviz.figures.browser.attention_map import SEND_ALL_CELLS

    assert 13 * 300 * 300 > SEND_ALL_CELLS
    page = new_page(browser)
    # 300 rows must be cells one can hover: the map column is about half the page since the map-first layout (its
    # controls beside it), so a wide window
    page.set_viewport_size({"width": 2400, "height": 1400})
    prompt = " ".join(chr(ord("A") + i % 26) for i in range(300))  # one token per letter
    page.goto(f"{server}/?source=preset&preset=gpt2-small&att_head=1&prompt={quote(prompt)}")
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 0, head 1$")).wait_for(timeout=120_000)
    wait_for_idle(page)
    assert page.get_by_text("300 tokens", exact=True).count() == 1
    note = page.locator(".gv-note").first
    assert "the thumbnails are pooled (the largest weight of each 5 x 5 block)" in note.text_content()
    assert page.locator(".gv-map").first.locator(".gv-head").count() == 13
    heatmap = page.locator("canvas.gv-heat").first
    tip_00 = page.locator(".gv-tip").filter(has_text=re.compile(r"weight 1\.00\s*query position 0, key position 0"))
    for _ in range(5):  # the detector table above the map can still be drawing and move it: measure, hover, check
        heatmap.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        box = heatmap.bounding_box()
        left, top, cell = (float(heatmap.get_attribute(f"data-{k}")) for k in ("left", "top", "cell"))
        page.mouse.move(box["x"] + left + 0.5 * cell, box["y"] + top + 0.5 * cell, steps=3)  # query 0, key 0: all of it
        try:
            tip_00.wait_for(timeout=5_000)
            break
        except Exception:
            page.mouse.move(0, 0)
    tip_00.wait_for()
    page.locator(".gv-map").first.screenshot(path=str(artifacts / "attention_long_prompt.png"))
    page.locator(".gv-map").first.locator(".gv-head").filter(has_text="head 7").click()
    page.locator(".gv-title").filter(has_text=re.compile("^Layer 0, head 7$")).wait_for()
    note.filter(has_text="the thumbnails are pooled").wait_for(timeout=60_000)  # head 7 arrived in full
    wait_for_idle(page)
    heatmap.scroll_into_view_if_needed()
    box = heatmap.bounding_box()
    page.mouse.move(box["x"] + left + 40 * cell, box["y"] + top + 60 * cell, steps=3)  # a cell of head 7's own
    page.locator(".gv-tip").filter(has_text=re.compile(r"query position \d+, key position \d+")).wait_for()
    page.mouse.move(box["x"] + left + 0.5 * cell, box["y"] + top + 0.5 * cell, steps=3)
    page.locator(".gv-tip").filter(has_text=re.compile(r"weight 1\.00\s*query position 0, key position 0")).wait_for()
    no_exception(page)
    page.close()


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_the_hover_toolbar_leaves_a_narrow_charts_title_readable(browser, server):
    """Half-width charts with long titles (the Embeddings page's two similarity maps): on hover, neither Plotly's
    toolbar nor Streamlit's fullscreen button may cover any part of the title."""
    page = new_page(browser)
    page.goto(f"{server}/embeddings?source=preset&preset=tiny&prompt=the+cat+sat+on+the+mat")
    page.get_by_text("Cosine similarity of the prompt's token").first.wait_for()
    wait_for_idle(page)
    checked = 0
    for title in ("Cosine similarity of the prompt's token", "Cosine similarity between all"):
        chart = page.locator('[data-testid="stPlotlyChart"]').filter(has_text=title).first
        chart.scroll_into_view_if_needed()
        box = chart.bounding_box()
        assert box["width"] < 700, box  # a half-width column: the case that collided
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=2)
        toolbar = chart.locator(".modebar-container .modebar")
        toolbar.wait_for()
        page.wait_for_timeout(400)  # the toolbar fades in
        title_box = chart.locator(".gtitle").first.bounding_box()
        assert not overlap(title_box, toolbar.bounding_box()), (title, title_box, toolbar.bounding_box())
        for button in page.locator('[data-testid="stElementToolbar"]').all():
            if button.is_visible():
                assert not overlap(title_box, button.bounding_box()), (title, title_box, button.bounding_box())
        checked += 1
    assert checked == 2
    no_exception(page)
    page.close()


def test_a_figure_downloads_as_standalone_html(browser, server, tmp_path):
    """The button under a figure serves one HTML file with Plotly's JavaScript inlined and the figure's data."""
    page = new_page(browser)
    page.goto(f"{server}/?source=preset&preset=tiny&prompt=the+cat+sat+on+the+mat")
    page.locator(".gv-title").filter(has_text="Layer 0, head 0").wait_for()
    wait_for_idle(page)
    with page.expect_download() as info:
        page.get_by_role("button", name="Interactive HTML").first.click()
    download = info.value
    assert download.suggested_filename == "layer-0-head-0.html"
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    html = path.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", html) and "Plotly.newPlot" in html and "Layer 0, head 0" in html
    # the file opens offline in the browser and draws the heatmap
    offline = new_page(browser)
    offline.goto(path.as_uri())
    offline.locator(".js-plotly-plot .heatmaplayer").first.wait_for()
    offline.close()
    no_exception(page)
    page.close()


def test_the_heatmap_decodes_the_weights_python_sent_on_both_of_its_paths(browser):
    """The component's base64 -> uint16 decoder (attention_map.js `decode`) gives back exactly what
    gptviz.attention_map.quantize packed, with the browser's Uint8Array.fromBase64 and with the loop kept for
    browsers without it."""
    import base64

    import numpy as np

    from gptviz.figures.browser.attention_map import quantize

    source = (ROOT / "gptviz" / "figures" / "browser" / "attention_map.js").read_text(encoding="utf-8")
    decode = re.search(r"^function decode\(b64\) \{.*?^\}", source, re.S | re.M).group(0)
    weights = np.random.default_rng(0).random((3, 5, 7)).astype(np.float32)
    weights[0, 0, 0], weights[1, 2, 3] = 1.0, 0.0
    levels = quantize(weights).ravel()
    b64 = base64.b64encode(levels.tobytes()).decode("ascii")
    page = new_page(browser)
    try:
        both = page.evaluate(
            f"""(b64) => {{ {decode}
            const native = Array.from(decode(b64));
            const saved = Uint8Array.fromBase64;
            Uint8Array.fromBase64 = undefined;  // the loop, as a browser without it runs
            try {{ return [native, Array.from(decode(b64))]; }} finally {{ Uint8Array.fromBase64 = saved; }}
        }}""",
            b64,
        )
    finally:
        page.close()
    for decoded in both:
        assert decoded == levels.tolist()
