"""A notebook's HTML export that draws gptviz's views offline.

nbconvert's own HTML export keeps each widget as a reference into the widget state saved with the notebook, and its
page loads require.js and @jupyter-widgets/html-manager from CDNs to draw them: offline, every widget's place stays
empty (docs/notebook.md). This exporter reads that saved state instead and writes each widget output as plain HTML
drawn by the same JavaScript (standalone._Page): the app's components from their payloads, Plotly figures with
Plotly's script inlined once, ipywidgets' text and boxes as they are. The page then needs no network.

    jupyter nbconvert --to gptviz.notebook.html_export.OfflineHTMLExporter notebook.ipynb
    python -m gptviz notebook-html notebook.ipynb [out.html]
    gptviz.notebook.export_html("notebook.ipynb", "notebook.html")

A widget whose state was not saved (JupyterLab saves it with "Save Widget State Automatically", nbclient with
store_widget_state) or whose kind this exporter does not know is replaced by a line saying so, never left blank.
"""

from __future__ import annotations

import base64
import copy
import html
from pathlib import Path

import numpy as np
from nbconvert import HTMLExporter

from .standalone import _Page

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_MODEL_REF = "IPY_MODEL_"
# anywidget records the Python class of each widget (`_anywidget_id`): gptviz's components by that name
_GPTVIZ_COMPONENTS = {
    "gptviz.notebook.widgets.AttentionWidget": ("attention_map", "gv-map"),
    "gptviz.notebook.widgets.TokenRowsWidget": ("token_rows", "gv-rows"),
}
_PLOTLY_WIDGET = "plotly.graph_objs._figurewidget.FigureWidget"
_BOXES = {"BoxModel", "VBoxModel", "HBoxModel", "GridBoxModel"}


def _note(text: str) -> str:
    return f'<div class="gv-line"><em>{html.escape(text)}</em></div>'


def _with_buffers(entry: dict) -> dict:
    """A saved model's state with its binary buffers (base64 in the notebook) put back where they were cut out."""
    state = copy.deepcopy(entry.get("state", {}))
    for buffer in entry.get("buffers", []):
        *where, last = buffer["path"]
        target = state
        for key in where:
            target = target[key]
        data = buffer["data"]
        target[last] = base64.b64decode(data) if buffer.get("encoding", "base64") == "base64" else data
    return state


def _typed_arrays(value):
    """Plotly's widget sends numeric arrays as {"dtype", "shape", "buffer"}: read back as numpy arrays."""
    if isinstance(value, dict):
        if isinstance(value.get("buffer"), (bytes, bytearray)) and "dtype" in value:
            array = np.frombuffer(value["buffer"], dtype=np.dtype(value["dtype"]))
            return array.reshape(value["shape"]) if "shape" in value else array
        return {k: _typed_arrays(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed_arrays(v) for v in value]
    return value


class SavedWidgets:
    """The widgets of one notebook's saved state, written as HTML into one shared page (scripts and styles once)."""

    def __init__(self, widget_state: dict | None):
        self.models: dict = (widget_state or {}).get("state", {})
        self.page = _Page()

    def html(self, model_id: str) -> str:
        """The HTML for one widget output (what the views since the last call need, and no more)."""
        self._add(model_id, depth=0)
        return self.page.fragment()

    def _add(self, model_id: str, depth: int) -> None:
        entry = self.models.get(model_id)
        if entry is None or depth > 32:
            self.page.body.append(
                _note(
                    "A widget whose state was not saved with the notebook: save it with its "
                    "widget state, or show gptviz.notebook.static(view) instead."
                )
            )
            return
        state = _with_buffers(entry)
        kind = state.get("_anywidget_id") or entry.get("model_name", "")
        if kind in _GPTVIZ_COMPONENTS:
            stem, root_class = _GPTVIZ_COMPONENTS[kind]
            self.page.component_data(stem, root_class, state["data"])
        elif kind == _PLOTLY_WIDGET:
            import plotly.graph_objects as go

            figure = go.Figure(
                data=_typed_arrays(state.get("_widget_data", [])), layout=_typed_arrays(state.get("_widget_layout", {}))
            )
            self.page.plotly = True
            self.page.body.append(figure.to_html(full_html=False, include_plotlyjs=False))
        elif kind == "HTMLModel":  # ipywidgets.HTML: HTML by design (gptviz's lines are escaped: widgets.text_line)
            self.page.body.append(f'<div class="gv-line">{state.get("value", "")}</div>')
        elif kind in _BOXES:
            for child in state.get("children", []):
                self._add(str(child).removeprefix(_MODEL_REF), depth + 1)
        else:
            self.page.body.append(_note(f"A {kind or 'widget'} that gptviz's offline export does not draw."))


def offline_notebook(nb):
    """A copy of `nb` whose widget outputs are HTML drawn from the saved widget state, without the state itself (so
    the export does not load the widget manager from a CDN)."""
    nb = copy.deepcopy(nb)
    widgets = nb.metadata.pop("widgets", {}) or {}
    saved = SavedWidgets(widgets.get(WIDGET_STATE))
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            view = data.pop(WIDGET_VIEW)
            data["text/html"] = saved.html(str(view.get("model_id", "")))
    return nb


class OfflineHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter with gptviz's views (and Plotly figures, text and boxes) drawn from the saved
    widget state: the page opens without a network."""

    export_from_notebook = "HTML, widgets drawn offline (gptviz)"

    def from_notebook_node(self, nb, resources=None, **kw):
        return super().from_notebook_node(offline_notebook(nb), resources, **kw)


def export_html(notebook, path=None) -> Path:
    """Write `notebook` (a path to an .ipynb) as HTML that draws its widgets offline; `path` defaults to the
    notebook's name with .html. Returns the path written."""
    import nbformat

    notebook = Path(notebook)
    body, _ = OfflineHTMLExporter().from_notebook_node(nbformat.read(notebook, as_version=4))
    path = Path(path) if path is not None else notebook.with_suffix(".html")
    path.write_text(body, encoding="utf-8")
    return path


__all__ = ["OfflineHTMLExporter", "export_html", "offline_notebook"]
