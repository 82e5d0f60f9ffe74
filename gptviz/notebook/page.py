"""The widget-free core of a self-contained HTML page (standalone.py adds the notebook's widgets to it): the app's
component JavaScript and CSS inline once per component, each view's data as JSON in a script block, Plotly's
JavaScript inline once. Nothing is fetched from a network. The app's unit export builds its page here without the
notebook extra (ipywidgets, anywidget) installed.

Token text stays data: it travels in a JSON script block (its `<` written \\u003c, so no `</script>` inside a token
can end the block) and the components set it with textContent; text lines are escaped.
"""

from __future__ import annotations

import html
import json
import uuid

from ..figures.browser import asset

# the components' colours from Jupyter's theme where there is one (the app's come from Streamlit's)
JUPYTER_THEME = """
.gv-map, .gv-rows { --st-text-color: var(--jp-ui-font-color1, #31333f);
  --st-border-color: var(--jp-border-color1, #d6d6d9); --st-background-color: var(--jp-layout-color0, #fff); }
"""
_APP_EXPORT = "export default function (component)"


def json_for_script(value) -> str:
    """JSON safe inside <script>: '<', '>' and '&' escaped as JSON unicode escapes (the browser reads them back)."""
    return json.dumps(value, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class Page:
    """The parts of one page: CSS once per component, scripts once per component, a block per view (a component's
    payload, a Plotly figure, a line of text). Widgets are added by standalone._Page."""

    def __init__(self):
        self.styles: dict[str, str] = {}
        self.scripts: dict[str, str] = {}
        self.body: list[str] = []
        self.plotly = False
        self.count = 0
        self.prefix = f"gv-{uuid.uuid4().hex[:8]}"  # several pages' fragments can share one document
        self.emitted: set[str] = set()  # what fragment() already wrote: each style and script once

    def component_data(self, stem: str, root_class: str, data: dict) -> None:
        """A component drawn from its payload (a widget's `data`, or the same read back from a saved notebook)."""
        self.styles.setdefault(stem, asset(stem, "css"))
        source = asset(stem, "js")
        if source.count(_APP_EXPORT) != 1:
            raise RuntimeError(f"{stem}.js no longer has one `{_APP_EXPORT}`: update gptviz/notebook/page.py")
        # each component's module defines its mount once, as window.gptviz[stem]
        self.scripts.setdefault(
            stem,
            source.replace(_APP_EXPORT, "function mount(component)")
            + f"\n(window.gptviz = window.gptviz || {{}})[{json.dumps(stem)}] = mount;\n",
        )
        self.count += 1
        box = f"{self.prefix}-{self.count}"
        self.body.append(
            f'<div id="{box}" class="gv-view"><div class="{root_class}"></div></div>\n'
            f'<script type="application/json" id="{box}-data">{json_for_script(data)}</script>\n'
            f'<script type="module">\nconst box = document.getElementById("{box}");\n'
            f'const data = JSON.parse(document.getElementById("{box}-data").textContent);\n'
            f"window.gptviz[{json.dumps(stem)}]({{data, parentElement: box, setStateValue: () => {{}}}});\n</script>"
        )

    def figure(self, fig) -> None:
        """A Plotly figure (its JavaScript goes in once per page)."""
        import plotly.graph_objects as go

        self.plotly = True
        self.body.append(go.Figure(fig).to_html(full_html=False, include_plotlyjs=False))

    def text(self, text: str, tag: str = "div") -> None:
        """A line of text, escaped (it may hold token text), in <tag class="gv-line">."""
        self.body.append(f'<{tag} class="gv-line">{html.escape(str(text), quote=True)}</{tag}>')

    def html(self, title: str) -> str:
        from plotly.offline import get_plotlyjs

        styles = "\n".join(self.styles.values()) + JUPYTER_THEME
        # component modules first (type=module scripts run in document order, after parsing)
        scripts = "".join(f'<script type="module">\n{s}</script>\n' for s in self.scripts.values())
        plotly = f'<script type="text/javascript">{get_plotlyjs()}</script>\n' if self.plotly else ""
        return (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'\n<style>\nbody {{ font-family: Inter, "Segoe UI", Helvetica, Arial, sans-serif; margin: 16px; }}\n'
            f"{styles}</style>\n{plotly}</head><body>\n{scripts}" + "\n".join(self.body) + "\n</body></html>\n"
        )

    def fragment(self) -> str:
        """For a cell's output (text/html): the views added since the last fragment, without <html>, with the styles
        and scripts no earlier fragment of this page wrote (Plotly's only when a figure needs it). The outputs of
        one document share them, as the scripts run in document order."""
        from plotly.offline import get_plotlyjs

        parts = [f"<style>\n{css}</style>\n" for stem, css in self._new(self.styles, "css")]
        if "css:theme" not in self.emitted:
            self.emitted.add("css:theme")
            parts.append(f"<style>\n{JUPYTER_THEME}</style>\n")
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
