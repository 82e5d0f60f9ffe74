"""docs/example.ipynb in JupyterLab in a real Chromium: run every cell, and the app's heatmap is drawn by the widget
(cells coloured on the canvas, the pickers there, a layer click redraws). Screenshots at 1400x1000 and 390x844."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from benchmarks.servers import free_port, jupyterlab, stop_process
from tests.support import ROOT

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.skipif(shutil.which("jupyter-lab") is None, reason="needs jupyterlab"),
]


@pytest.fixture(scope="module")
def lab():
    """`jupyter lab` on a free port over a folder holding a copy of the example notebook; kernels import gptviz
    from the checkout. Yields the base URL."""
    pytest.importorskip("anywidget")
    pytest.importorskip("transformer_lens")
    folder = Path(tempfile.mkdtemp(prefix="gptviz-lab-"))
    shutil.copy(ROOT / "docs" / "example.ipynb", folder / "example.ipynb")
    port = free_port()
    try:
        proc = jupyterlab(folder, port, ROOT, timeout=120)
    except RuntimeError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, timeout=20)
        shutil.rmtree(folder, ignore_errors=True)


def screenshots_dir(tmp_path) -> Path:
    kept = os.environ.get("GPTVIZ_TEST_SCREENSHOTS")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        return Path(kept)
    return tmp_path


# the colour of the heatmap's centre cell of the visible map, read from the canvas (r, g, b, a)
CELL_PIXEL = """(canvas) => {
  const d = canvas.dataset, dpr = window.devicePixelRatio || 1;
  const x = (Number(d.left) + Number(d.cell) * 0.5) * dpr, y = (Number(d.top) + Number(d.cell) * 0.5) * dpr;
  return Array.from(canvas.getContext('2d').getImageData(Math.floor(x), Math.floor(y), 1, 1).data);
}"""


def test_example_notebook_draws_the_heatmap_in_jupyterlab(lab, browser, tmp_path):
    shots = screenshots_dir(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{lab}/lab/tree/example.ipynb")
    page.wait_for_function("window.jupyterapp && document.querySelector('.jp-Notebook')")
    # run the cells once the notebook's kernel is up and idle (a fixed 3 s sleep was not always enough: once, on a
    # loaded machine, the cells never ran and the heatmap wait below timed out)
    page.wait_for_function(
        "(() => { const w = window.jupyterapp.shell.currentWidget; const c = w && w.sessionContext;"
        " return !!(c && c.isReady && c.session && c.session.kernel"
        " && c.session.kernel.status === 'idle'); })()"
    )
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        "document.querySelectorAll('.gv-map canvas.gv-heat[data-cell]').length >= 2", timeout=240_000
    )
    page.wait_for_function("document.querySelectorAll('.gv-rows').length >= 1")
    first = page.locator(".gv-map").first
    assert first.locator(".gv-title").text_content() == "Layer 1, head 0"
    assert first.locator(".gv-layer").count() == 4 and first.locator(".gv-head").count() == 5  # 4 heads + mean
    heat = first.locator("canvas.gv-heat")
    rgba = heat.evaluate(CELL_PIXEL)
    assert rgba[3] == 255 and rgba[:3] != [255, 255, 255]  # the first query's only key: weight 1, painted
    first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "notebook-attention-1400.png"))
    first.locator(".gv-layer", has_text="layer 2").click()
    page.wait_for_function("document.querySelector('.gv-map .gv-title').textContent === 'Layer 2, head 0'")
    assert "gv-on" in first.locator(".gv-layer").nth(2).get_attribute("class")
    # the text view: tokens as text (the bundled model's prompt), coloured spans
    rows_text = page.locator(".gv-rows").first.text_content()
    assert "Juliet" in rows_text and "sun" in rows_text
    page.locator(".gv-rows").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "notebook-on-text-1400.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    if page.locator(".jp-SideBar.jp-mod-left .lm-mod-current").count():  # the file browser would take the width
        page.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
    time.sleep(1)
    first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "notebook-attention-390.png"))
    box = heat.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390  # redrawn to the phone's width, not cut
    page.close()
