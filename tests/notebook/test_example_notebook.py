"""docs/example.ipynb runs from top to bottom (nbclient, a real kernel) and shows what it says it shows; its HTML export
(nbconvert, with the widget state nbclient saves in the notebook's metadata) opened offline in Chromium: nbconvert's
own export draws the static() copy of the heatmap, not the widgets (their manager comes from a CDN); gptviz's exporter
(gptviz.notebook.html_export) draws every widget (docs/notebook.md)."""

from __future__ import annotations

import re

import pytest

from tests.support import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("anywidget")
pytest.importorskip("transformer_lens")

WIDGET = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
from tests.support.offline_browser import CHROMIUM, offline_page  # noqa: E402


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.read(ROOT / "docs" / "example.ipynb", as_version=4)
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", store_widget_state=True, resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    return nb


def outputs_of(nb) -> list:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]


@pytest.mark.slow
def test_example_notebook_runs(executed):
    outputs = outputs_of(executed)
    assert not [o for o in outputs if o.output_type == "error"]
    # nothing a newcomer reads as an error (issue 62: the TransformerLens cell printed torch's requires_grad warning)
    assert not ["".join(o.text) for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert re.search(r"4 layers, 4 heads, \d+ tokens", text)
    widgets = [o for o in outputs if o.output_type == "execute_result" and WIDGET in o.data]
    # the heatmap, the text view, the unit view, the attribution figures, the heatmap after the ablation, the
    # heatmap from TransformerLens's cache
    assert len(widgets) == 6
    gaps = [float(g) for g in re.findall(r"max \|logits difference\|: ([-+0-9.e]+)", text)]
    assert len(gaps) == 2 and all(g <= 1e-4 for g in gaps)
    equal, total = map(int, re.search(r"hook points equal within 1e-4: (\d+) of (\d+)", text).groups())
    assert equal == total == 4 + 14 * 4
    assert "L2N26: active on " in text  # the unit's summary, from the shipped index
    diff, parts = map(float, re.search(r"logit difference ([-+0-9.]+), sum of the parts ([-+0-9.]+)", text).groups())
    assert diff == pytest.approx(parts, abs=2e-3)
    before, after = map(float, re.search(r"zero-ablated: logit difference ([-+0-9.]+) -> ([-+0-9.]+)", text).groups())
    assert before == pytest.approx(diff, abs=1e-3) and after != pytest.approx(before, abs=1e-4)
    static = [
        o
        for o in outputs
        if o.output_type == "execute_result"
        and WIDGET not in o.data
        and "text/html" in o.data
        and "gv-map" in o.data["text/html"]
    ]
    assert len(static) == 1
    assert WIDGET_STATE in executed.metadata["widgets"]  # saved, as a notebook saved with its widget state


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_html_export_offline(executed, tmp_path):
    """nbconvert's HTML export in Chromium with every non-file request aborted. What draws: the static() copy (the
    app's JavaScript inline). What does not: the widgets, though their state is in the file: nbconvert's page loads
    @jupyter-widgets/html-manager (and it, anywidget's front end) from a CDN, so offline their places stay empty."""
    pytest.importorskip("playwright.sync_api")
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(executed)
    page_file = tmp_path / "example.html"
    page_file.write_text(body, encoding="utf-8")
    assert body.count('<script type="application/vnd.jupyter.widget-view+json">') == 6  # the widgets are in the export
    with offline_page(1200, 900) as (page, blocked, errors):
        page.goto(page_file.as_uri())
        page.wait_for_function("document.querySelectorAll('canvas.gv-heat[data-cell]').length >= 1", timeout=60_000)
        page.wait_for_timeout(2000)  # time for anything else that would draw
        # where each drawn heatmap sits: a widget's output area, or the static copy's HTML output
        drawn = page.evaluate("""() => Array.from(document.querySelectorAll('canvas.gv-heat[data-cell]'),
            c => c.closest('.jupyter-widgets') ? 'widget' : 'text/html')""")
        title = page.locator(".gv-map .gv-title").first.text_content()
        widget_views = page.locator(".jupyter-widgets.jp-OutputArea-output").count()
        empty = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.jupyter-widgets.jp-OutputArea-output')).filter(
            el => !el.querySelector('canvas, .gv-rows, .widget-box, .js-plotly-plot')).length""")
    assert drawn == ["text/html"] and title == "Layer 1, head 0"  # static(widget): drawn offline
    assert widget_views == 6 and empty == 6  # the widgets: not drawn offline
    assert any("html-manager" in url for url in blocked), blocked  # because their manager was to come from a CDN
    assert not errors, errors


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_offline_html_export_draws_every_widget(executed, tmp_path):
    """gptviz's exporter (gptviz.notebook.html_export) writes each widget from the saved state as the same drawing:
    offline, all six widgets' places are drawn (three heatmaps beside the static copy, two text views, four Plotly
    figures), with no widget manager or anything of theirs from a network, and Plotly's script in the page once."""
    pytest.importorskip("playwright.sync_api")
    from gptviz.notebook import export_html

    source = tmp_path / "example.ipynb"
    nbformat.write(executed, source)
    page_file = export_html(source)
    body = page_file.read_text(encoding="utf-8")
    assert WIDGET not in body and WIDGET_STATE not in body and "html-manager" not in body
    assert body.count("Plotly.newPlot") == 4 and body.count("plotly.js v") == 1  # its script once, for four figures
    with offline_page(1200, 900) as (page, blocked, errors):
        page.goto(page_file.as_uri())
        page.wait_for_function("document.querySelectorAll('canvas.gv-heat[data-cell]').length >= 4", timeout=60_000)
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4", timeout=60_000)
        titles = page.locator(".gv-map .gv-title").all_text_contents()
        rows = page.locator(".gv-rows").count()
        row_tokens = page.evaluate("() => Array.from(document.querySelectorAll('.gv-rows'), r => r.textContent.length)")
        figures = page.locator(".js-plotly-plot").count()
        lines = page.locator(".gv-line").all_text_contents()
    # what was asked of the network: only nbconvert's own page chrome (require.js and MathJax, for other outputs and
    # LaTeX), whose failure leaves every drawing in place; nothing for the widgets
    assert {url.split("/ajax/libs/")[-1].split("/")[0] for url in blocked} <= {"require.js", "mathjax"}, blocked
    assert not errors, errors
    assert len(titles) == 4 and titles[0] == "Layer 1, head 0"
    assert rows == 2 and all(n > 0 for n in row_tokens)
    assert figures == 4
    assert any("L2N26: active on " in line for line in lines)  # the unit view's summary line, from the saved state
