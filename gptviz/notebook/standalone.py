"""A view as a self-contained HTML page that opens offline: the app's component JavaScript and CSS inline, its data
as JSON, Plotly's JavaScript inline once for the Plotly figures. Nothing is fetched from a network.

Why: a widget's drawing lives in the notebook's widget state, and a static export (nbconvert's HTML, or a saved
notebook viewed outside Jupyter) draws it only through @jupyter-widgets/html-manager and anywidget's front end, both
loaded from a CDN (cdn.jsdelivr.net, unpkg.com): offline, the export shows nothing where the widget was
(docs/notebook.md, tests/test_notebook_offline.py). `save_html(view, path)` writes a file that opens anywhere;
`static(view)` displays the same HTML as a cell's output, which nbconvert's HTML export keeps and draws offline.

Token text stays data: it travels in a JSON script block (its `<` written \\u003c, so no `</script>` inside a token
can end the block) and the components set it with textContent.
"""
from __future__ import annotations

import html
import json
import uuid
from pathlib import Path

from ..app.component import asset
from .widgets import _JUPYTER_THEME, AttentionWidget, TokenRowsWidget

_COMPONENTS = {AttentionWidget: ("attention_map", "gv-map"), TokenRowsWidget: ("token_rows", "gv-rows")}
_APP_EXPORT = "export default function (component)"


def _json_for_script(value) -> str:
    """JSON safe inside <script>: '<', '>' and '&' escaped as JSON unicode escapes (the browser reads them back)."""
    return json.dumps(value, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Page:
    """The parts of one page: CSS once per component, scripts once per component, a block per view."""

    def __init__(self):
        self.styles: dict[str, str] = {}
        self.scripts: dict[str, str] = {}
        self.body: list[str] = []
        self.plotly = False
        self.count = 0
        self.prefix = f"gv-{uuid.uuid4().hex[:8]}"  # several pages' fragments can share one document
        self.emitted: set[str] = set()            # what fragment() already wrote: each style and script once

    def component(self, widget) -> None:
        stem, root_class = next(v for k, v in _COMPONENTS.items() if isinstance(widget, k))
        self.component_data(stem, root_class, widget.data)

    def component_data(self, stem: str, root_class: str, data: dict) -> None:
        """A component drawn from its payload (a widget's `data`, or the same read back from a saved notebook)."""
        self.styles.setdefault(stem, asset(stem, "css"))
        source = asset(stem, "js")
        if source.count(_APP_EXPORT) != 1:
            raise RuntimeError(f"{stem}.js no longer has one `{_APP_EXPORT}`: update gptviz/notebook/standalone.py")
        # each component's module defines its mount once, as window.gptviz[stem]
        self.scripts.setdefault(stem, source.replace(_APP_EXPORT, "function mount(component)")
                                + f"\n(window.gptviz = window.gptviz || {{}})[{json.dumps(stem)}] = mount;\n")
        self.count += 1
        box = f"{self.prefix}-{self.count}"
        self.body.append(
            f'<div id="{box}" class="gv-view"><div class="{root_class}"></div></div>\n'
            f'<script type="application/json" id="{box}-data">{_json_for_script(data)}</script>\n'
            f'<script type="module">\nconst box = document.getElementById("{box}");\n'
            f'const data = JSON.parse(document.getElementById("{box}-data").textContent);\n'
            f'window.gptviz[{json.dumps(stem)}]({{data, parentElement: box, setStateValue: () => {{}}}});\n</script>')

    def add(self, view) -> None:
        import ipywidgets
        import plotly.graph_objects as go
        if isinstance(view, tuple(_COMPONENTS)):
            self.component(view)
        elif isinstance(view, go.FigureWidget) or isinstance(view, go.Figure):
            self.plotly = True
            self.body.append(go.Figure(view).to_html(full_html=False, include_plotlyjs=False))
        elif isinstance(view, ipywidgets.HTML):  # gptviz's text lines: already escaped (widgets.text_line)
            self.body.append(f"<div class=\"gv-line\">{view.value}</div>")
        elif isinstance(view, ipywidgets.Box):
            for child in view.children:
                self.add(child)
        else:
            raise TypeError(f"cannot write a {type(view).__name__} as static HTML")

    def html(self, title: str) -> str:
        from plotly.offline import get_plotlyjs
        styles = "\n".join(self.styles.values()) + _JUPYTER_THEME
        # component modules first (type=module scripts run in document order, after parsing)
        scripts = "".join(f'<script type="module">\n{s}</script>\n' for s in self.scripts.values())
        plotly = f'<script type="text/javascript">{get_plotlyjs()}</script>\n' if self.plotly else ""
        return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
                f'\n<style>\nbody {{ font-family: Inter, "Segoe UI", Helvetica, Arial, sans-serif; margin: 16px; }}\n'
                f'{styles}</style>\n{plotly}</head><body>\n{scripts}' + "\n".join(self.body) + "\n</body></html>\n")

    def fragment(self) -> str:
        """For a cell's output (text/html): the views added since the last fragment, without <html>, with the styles
        and scripts no earlier fragment of this page wrote (Plotly's only when a figure needs it). The outputs of
        one document share them, as the scripts run in document order."""
        from plotly.offline import get_plotlyjs
        parts = [f"<style>\n{css}</style>\n" for stem, css in self._new(self.styles, "css")]
        if "css:theme" not in self.emitted:
            self.emitted.add("css:theme")
            parts.append(f"<style>\n{_JUPYTER_THEME}</style>\n")
        if self.plotly and "plotly" not in self.emitted:
            self.emitted.add("plotly")
            parts.append(f'<script type="text/javascript">{get_plotlyjs()}</script>\n')
        parts += [f'<script type="module">\n{js}</script>\n' for stem, js in self._new(self.scripts, "js")]
        body, self.body = self.body, []
        return "".join(parts) + "\n".join(body)

    def _new(self, parts: dict[str, str], kind: str) -> list[tuple[str, str]]:
        fresh = [(stem, text) for stem, text in parts.items() if f"{kind}:{stem}" not in self.emitted]
        self.emitted.update(f"{kind}:{stem}" for stem, _ in fresh)
        return fresh


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
