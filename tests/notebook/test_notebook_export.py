"""gptviz.notebook.html_export without a kernel or a browser: a notebook whose widget output points into its saved
widget state becomes plain HTML holding the same payload; a widget without saved state becomes a line saying so; the
command line writes the file or says what is missing. (The executed example in Chromium: test_example_notebook.)"""

from __future__ import annotations

import json

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("anywidget")
pytest.importorskip("nbconvert")

from gptviz.__main__ import main  # noqa: E402
from gptviz.notebook import attention, export_html  # noqa: E402
from gptviz.notebook.html_export import WIDGET_STATE, WIDGET_VIEW, offline_notebook  # noqa: E402


def notebook_with(widget_states: dict, model_ids: list[str]):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("widget")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": m},
                "text/plain": "AttentionWidget()",
            },
        )
        for m in model_ids
    ]
    nb.cells = [cell]
    nb.metadata["widgets"] = {WIDGET_STATE: {"version_major": 2, "version_minor": 0, "state": widget_states}}
    return nb


def saved(widget) -> dict:
    """A widget's entry as a notebook saves it (the synced state, by anywidget's class id)."""
    return {
        "model_name": "AnyModel",
        "model_module": "anywidget",
        "model_module_version": "~0.9.*",
        "state": {"_anywidget_id": f"{type(widget).__module__}.{type(widget).__name__}", "data": widget.data},
    }


def test_a_saved_attention_widget_becomes_html_with_its_payload():
    import torch

    patterns = torch.softmax(torch.randn(2, 3, 5, 5), -1).tril()
    tokens = ["</script><img src=x onerror=alert(1)>", "b", "c", "d", "e"]
    widget = attention(patterns, tokens, layer=1, head=2)
    nb = offline_notebook(notebook_with({"m1": saved(widget)}, ["m1", "m1"]))
    outputs = nb.cells[0].outputs
    assert "widgets" not in nb.metadata and all(WIDGET_VIEW not in o.data for o in outputs)
    first, second = (o.data["text/html"] for o in outputs)
    assert first.count('<script type="module">') == 2 and second.count('<script type="module">') == 1  # defined once
    block = first.split('type="application/json"')[1].split(">", 1)[1].split("</script>")[0]
    assert json.loads(block) == json.loads(json.dumps(widget.data))  # the same payload, read back exactly
    assert "<img" not in first and "\\u003c/script\\u003e" in first  # token text stays data


def test_a_widget_without_saved_state_says_so(tmp_path):
    nb = notebook_with({}, ["missing"])
    html = offline_notebook(nb).cells[0].outputs[0].data["text/html"]
    assert "state was not saved with the notebook" in html
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    assert "state was not saved" in export_html(path).read_text(encoding="utf-8")


def test_the_command_line_writes_the_export_or_names_what_is_missing(tmp_path, capsys):
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook_with({}, []), path)
    assert main(["notebook-html", str(path), str(tmp_path / "out.html")]) == 0
    assert (tmp_path / "out.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert main(["notebook-html", str(tmp_path / "none.ipynb")]) == 2
    assert "no notebook at" in capsys.readouterr().err
