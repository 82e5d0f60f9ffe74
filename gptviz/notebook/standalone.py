"""A view as a self-contained HTML page that opens offline: the app's component JavaScript and CSS inline, its data
as JSON, Plotly's JavaScript inline once for the Plotly figures. Nothing is fetched from a network.

Why: a widget's drawing lives in the notebook's widget state, and a static export (nbconvert's HTML, or a saved
notebook viewed outside Jupyter) draws it only through @jupyter-widgets/html-manager and anywidget's front end, both
loaded from a CDN (cdn.jsdelivr.net, unpkg.com): offline, the export shows nothing where the widget was
(docs/notebook.md, tests/notebook/test_notebook_export.py). `save_html(view, path)` writes a file that opens anywhere;
`static(view)` displays the same HTML as a cell's output, which nbconvert's HTML export keeps and draws offline.

Token text stays data: it travels in a JSON script block (its `<` written \\u003c, so no `</script>` inside a token
can end the block) and the components set it with textContent.
"""

from __future__ import annotations

from pathlib import Path

from .page import Page
from .widgets import AttentionWidget, TokenRowsWidget

_COMPONENTS = {AttentionWidget: ("attention_map", "gv-map"), TokenRowsWidget: ("token_rows", "gv-rows")}


class _Page(Page):
    """A Page that takes the notebook's views: widgets, figures, text lines and boxes of them."""

    def component(self, widget) -> None:
        stem, root_class = next(v for k, v in _COMPONENTS.items() if isinstance(widget, k))
        self.component_data(stem, root_class, widget.data)

    def add(self, view) -> None:
        import ipywidgets
        import plotly.graph_objects as go

        if isinstance(view, tuple(_COMPONENTS)):
            self.component(view)
        elif isinstance(view, go.FigureWidget) or isinstance(view, go.Figure):
            self.figure(view)
        elif isinstance(view, ipywidgets.HTML):  # gptviz's text lines: already escaped (widgets.text_line)
            self.body.append(f'<div class="gv-line">{view.value}</div>')
        elif isinstance(view, ipywidgets.Box):
            for child in view.children:
                self.add(child)
        else:
            raise TypeError(f"cannot write a {type(view).__name__} as static HTML")


def to_html(view, title: str = "gptviz") -> str:
    """A whole HTML page drawing `view` (an attention or text widget, a unit view, a figure column) offline."""
    page = _Page()
    page.add(view)
    return page.html(title)


def save_html(view, path, title: str = "gptviz") -> Path:
    """Write to_html(view) to `path` (a file that opens in any browser, without a network)."""
    path = Path(path)
    path.write_text(to_html(view, title), encoding="utf-8")
    return path


def static(view):
    """The view as a cell's HTML output (IPython.display.HTML): drawn by the same JavaScript, with no widget
    behind it, so a notebook's HTML export (nbconvert) shows it offline. A layer or head a long prompt left out of
    the payload cannot be fetched from there."""
    from IPython.display import HTML

    page = _Page()
    page.add(view)
    return HTML(page.fragment())


__all__ = ["to_html", "save_html", "static"]
