"""The app's browser components as anywidget widgets: the same JavaScript and CSS files (gptviz/figures/browser/),
mounted through a few lines of adapter instead of Streamlit's components v2, so there is one drawing code.

The app's modules export `default function (component)` taking {data, parentElement, setStateValue}; the adapter
below gives them that from the widget's model: `data` is a synced trait, and a pick in the browser comes back as
the `pick` trait, on which Python sends the layer or head a long prompt left out (as the app's rerun does).
"""

from __future__ import annotations

import html

import anywidget
import ipywidgets
import traitlets

from ..figures.browser import asset
from .page import JUPYTER_THEME as _JUPYTER_THEME

_APP_EXPORT = "export default function (component)"

# JupyterLab's theme colours for what the app reads from Streamlit's (the files fall back to a light theme):
# page.JUPYTER_THEME

_ADAPTER = """
export default {
  render({ model, el }) {
    const root = document.createElement("div");
    root.className = "%(root_class)s";
    el.appendChild(root);
    const component = () => ({
      data: model.get("data"),
      parentElement: el,
      setStateValue: (name, value) => { model.set(name, value); model.save_changes(); },
    });
    let cleanup = mount(component());
    const redraw = () => { if (typeof cleanup === "function") cleanup(); cleanup = mount(component()); };
    model.on("change:data", redraw);
    return () => { model.off("change:data", redraw); if (typeof cleanup === "function") cleanup(); };
  },
};
"""


def shared_esm(stem: str, root_class: str) -> str:
    """The app's `<stem>.js` as an anywidget module: its default export renamed `mount`, and the adapter."""
    source = asset(stem, "js")
    if source.count(_APP_EXPORT) != 1:
        raise RuntimeError(f"{stem}.js no longer has one `{_APP_EXPORT}`: update gptviz/notebook/widgets.py")
    return source.replace(_APP_EXPORT, "function mount(component)") + _ADAPTER % {"root_class": root_class}


class AttentionWidget(anywidget.AnyWidget):
    """The Attention page's heatmap: layer and head pickers with thumbnails, drag to zoom, hover for a weight.
    `pick` follows the browser's choice ({"layer", "head"}; head == n_heads is the mean of all heads)."""

    _esm = shared_esm("attention_map", "gv-map")
    _css = asset("attention_map", "css") + _JUPYTER_THEME
    data = traitlets.Dict().tag(sync=True)
    pick = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)

    def __init__(self, patterns, labels, *, layer: int, head, query: int, scale: str, height: int):
        from ..figures.browser.attention_map import payload

        self._patterns, self._labels = patterns, labels
        self._options = dict(query=query, scale=scale, height=height)
        super().__init__(data=payload(patterns, labels, layer=layer, head=head, **self._options))

    @property
    def layer(self) -> int:
        return int((self.pick or self.data)["layer"])

    @property
    def head(self) -> int:
        """The picked head; n_heads stands for the mean of all heads."""
        return int((self.pick or self.data)["head"])

    @traitlets.observe("pick")
    def _send_what_was_left_out(self, change) -> None:
        """A long prompt sends one layer (or one head in full); a pick of another is answered with a new payload."""
        value = change["new"]
        if not isinstance(value, dict) or not {"layer", "head"} <= set(value):
            return
        layer, head = int(value["layer"]), int(value["head"])
        if layer in self.data["layers"] and head in self.data["heads"]:
            return
        from ..figures.browser.attention_map import payload

        n_heads = self.data["n_heads"]
        self.data = payload(
            self._patterns, self._labels, layer=layer, head="mean" if head == n_heads else head, **self._options
        )


class TokenRowsWidget(anywidget.AnyWidget):
    """Rows of tokens coloured by a value (the unit page's examples component)."""

    _esm = shared_esm("token_rows", "gv-rows")
    _css = asset("token_rows", "css") + _JUPYTER_THEME
    data = traitlets.Dict().tag(sync=True)


def text_line(text: str, bold: bool = False) -> ipywidgets.HTML:
    """A line of text that may hold token text ("'<', '&'" in a summary): escaped, so it is drawn as written and never
    read as HTML. (ipywidgets.Label is text too, but cuts a long line with an ellipsis.)"""
    body = html.escape(str(text), quote=True)
    return ipywidgets.HTML(value=f"<b>{body}</b>" if bold else body)


class UnitView(ipywidgets.VBox):
    """The unit page as a widget (gptviz.notebook.unit): summary, top examples (the app's token_rows component),
    the histogram and the direct effect (Plotly FigureWidgets of the page's figures). `data` holds the numbers."""

    def __init__(self, data):
        import plotly.graph_objects as go

        self.data = data
        held = sum(data.index.documents[e.doc]["held_out"] for e in data.examples)
        self.examples = TokenRowsWidget(data=data.payload)
        self.histogram = go.FigureWidget(data.histogram)
        self.effect = go.FigureWidget(data.effect) if data.effect is not None else None
        children = [
            text_line(data.summary, bold=True),
            text_line(
                f"Top {len(data.examples)} examples over {data.index.tokens:,} tokens, peak token "
                f"outlined ({held} from plays the model never trained on, marked held out)."
            ),
            self.examples,
            text_line(data.distribution),
            self.histogram,
        ]
        if self.effect is not None:
            children += [text_line(data.effect_line), self.effect]
        super().__init__(children=children)
