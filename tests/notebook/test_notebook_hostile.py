"""Token text is data, never HTML, in the notebook's views: hostile token strings ("<img src=x onerror=...>",
"</script>") drawn by the app's own component JavaScript in a real Chromium, offline (a page save_html writes, every
non-file request aborted): no element is made from them, no handler runs, and the text reads as written."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("anywidget")

from gptviz.figures.unit_page import ExampleRow  # noqa: E402
from gptviz.notebook import attention, attention_on_text, save_html  # noqa: E402
from gptviz.notebook.inputs import labels_of  # noqa: E402
from gptviz.notebook.widgets import TokenRowsWidget, text_line  # noqa: E402
from tests.support.offline_browser import CHROMIUM, offline_page  # noqa: E402

HOSTILE = [
    '<img src=x onerror="window.__pwned=1">',
    "</script><img src=y onerror=window.__pwned=2>",
    "<script>window.__pwned=3</script>",
    "&lt;b&gt;",
    '"quoted" & <b>bold</b>',
    "plain",
]
SHOWN = labels_of(HOSTILE, len(HOSTILE))  # as the attention views label them: spaces made visible (␣)


def views():
    import ipywidgets

    from gptviz.figures.browser.token_rows import payload

    T = len(HOSTILE)
    g = np.random.default_rng(0)
    scores = np.where(np.tril(np.ones((T, T), bool)), g.random((2, 3, T, T)), -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    rows = TokenRowsWidget(
        data=payload(
            [ExampleRow(HOSTILE, np.linspace(0, 1, T), 2, HOSTILE[1], HOSTILE[0])], value_name="<i>value</i>", cmax=1.0
        )
    )
    return ipywidgets.VBox(children=[text_line(HOSTILE[0]), attention(p, HOSTILE), attention_on_text(p, HOSTILE), rows])


def test_hostile_tokens_travel_as_data():
    box = views()
    heat, on_text, rows = box.children[1], box.children[2], box.children[3]
    assert SHOWN[0] == '<img␣src=x␣onerror="window.__pwned=1">' and SHOWN[2] == HOSTILE[2]
    assert heat.data["row_labels"] == SHOWN  # the strings themselves, for textContent to draw
    # the text view's rows: the query (last) and the tokens before it that fit its 64 characters, as written
    shown = on_text.data["rows"][0]["tokens"]
    assert shown[-1] == SHOWN[-1] and shown == SHOWN[len(SHOWN) - len(shown) :] and len(shown) >= 3
    assert rows.data["rows"][0]["name"] == HOSTILE[1]
    assert "<img" not in box.children[0].value


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_hostile_tokens_are_not_interpreted_in_the_browser(tmp_path):
    pytest.importorskip("playwright.sync_api")
    page_file = save_html(views(), tmp_path / "hostile.html")
    html = page_file.read_text(encoding="utf-8")
    assert "<img" not in html.split("<body>", 1)[1].split("<script", 1)[0]  # nothing of it before the scripts
    assert "</script><img" not in html  # no token can close the data's script block
    dialogs = []
    with offline_page(1200, 1400) as (page, blocked, errors):
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(page_file.as_uri())
        page.wait_for_function("document.querySelectorAll('canvas.gv-heat[data-cell]').length === 1")
        page.wait_for_function("document.querySelectorAll('.gv-rows .gv-tok').length >= 2 * 6")
        heat = page.locator("canvas.gv-heat")
        d = heat.evaluate("c => ({left: +c.dataset.left, top: +c.dataset.top, cell: +c.dataset.cell})")
        heat.hover(position={"x": d["left"] + 0.5 * d["cell"], "y": d["top"] + 0.5 * d["cell"]})  # query 0, key 0
        page.wait_for_function("getComputedStyle(document.querySelector('.gv-tip')).display === 'block'")
        seen = page.evaluate("""() => ({
            pwned: window.__pwned === undefined ? null : window.__pwned,
            images: document.querySelectorAll('img').length, bold: document.querySelectorAll('b, i').length,
            tip: document.querySelector('.gv-tip').textContent,
            line: document.querySelector('.gv-line').textContent,
            spans: Array.from(document.querySelectorAll('.gv-rows'), r => Array.from(r.querySelectorAll('.gv-row'),
                row => Array.from(row.querySelectorAll('.gv-tok'), t => t.textContent))),
            names: Array.from(document.querySelectorAll('.gv-rows .gv-name'), n => n.textContent),
            titles: Array.from(document.querySelectorAll('.gv-rows .gv-tok'), t => t.title)})""")
    assert seen["pwned"] is None and seen["images"] == 0 and not dialogs
    assert seen["bold"] == 0  # not even the <b> the text lines are wrapped in: text_line(bold=False) here
    assert seen["tip"].startswith(f"'{SHOWN[0]}' → '{SHOWN[0]}': weight 1.00")
    assert seen["line"] == HOSTILE[0]
    box = views()  # every token drawn as written, in order: the DOM's text is the payload's
    assert seen["spans"] == [[row["tokens"] for row in w.data["rows"]] for w in box.children[2:]]
    assert HOSTILE[1] in seen["spans"][1][0] and SHOWN[4] in seen["spans"][0][0]
    assert HOSTILE[1] in seen["names"] and any(HOSTILE[0] in t for t in seen["titles"])
    assert not blocked and not errors, (blocked, errors)
