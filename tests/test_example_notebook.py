"""docs/example.ipynb runs from top to bottom (nbclient, a real kernel) and shows what it says it shows."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("anywidget")
pytest.importorskip("transformer_lens")

ROOT = Path(__file__).resolve().parents[1]
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.mark.slow
def test_example_notebook_runs():
    nb = nbformat.read(ROOT / "docs" / "example.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert re.search(r"4 layers, 4 heads, \d+ tokens", text)
    widgets = [o for o in outputs if o.output_type == "execute_result" and WIDGET in o.data]
    assert len(widgets) == 3  # the heatmap, the text view, the heatmap from TransformerLens's cache
    gaps = [float(g) for g in re.findall(r"max \|logits difference\|: ([-+0-9.e]+)", text)]
    assert len(gaps) == 2 and all(g <= 1e-4 for g in gaps)
    equal, total = map(int, re.search(r"hook points equal within 1e-4: (\d+) of (\d+)", text).groups())
    assert equal == total == 4 + 14 * 4
