"""Showing things: figures with their downloads, tables as CSV, and text that must stay text.

Token text is a visitor's or the model's: it reaches the page through st.text, st.code, a Plotly label escaped by
figures.common.plotly_text, or Markdown escaped by md_text, never as HTML.
"""

from __future__ import annotations

import re
from pathlib import Path

import streamlit as st

from ..export import annotation_min_widths, annotation_width_css, csv_bytes, figure_file_name, figure_html
from ..figures import palette
from ..model.heads import MEAN_HEAD
from . import keys as K


def session_palette() -> str | None:
    """The visitor's colour scales (the sidebar's setting), read by every figure factory as it builds; None outside a
    script run (a thread of the server's own), which draws in the standard look."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    if get_script_run_ctx(suppress_warning=True) is None:
        return None
    return st.session_state.get(K.PALETTE)


palette.set_source(session_palette)

EXPORT_FORMATS = ("png", "svg")
# Buttons that repeat a gesture (drag zooms, double-click resets) or suit no figure here (box and lasso select):
# without them the hover toolbar is four icons wide and no longer covers a narrow chart's title
MODEBAR_REMOVED = ("zoomIn2d", "zoomOut2d", "autoScale2d", "select2d", "lasso2d")
HTML_HELP = "This figure as one HTML file that opens offline in any browser, with zoom and hover."

SAVED_WIDE_FIGURE_PX = 1000  # px: the camera's image of a figure whose annotations hide when narrow
# A page whose first screen is tight on a phone (Streamlit stacks columns below 640 px): a one-line title and less
# room above it. A CSS rule only, for a page's own <style>.
PHONE_TITLE_CSS = (
    "@media (max-width: 640px) {[data-testid='stMainBlockContainer'] {padding-top: 3.5rem;} "
    "[data-testid='stMainBlockContainer'] h1 {font-size: 1.4rem; padding: 0;}}"
)


def head_name(head: int) -> str:
    return "mean of all heads" if head == MEAN_HEAD else f"head {head}"


def md_text(text: str) -> str:
    """Token text made literal in Markdown (pills and captions render it): escape ASCII punctuation."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


# Streamlit's option widgets (pills, selectbox, select_slider) send the label the visitor picked, which the server
# maps back to the last option with that label: a token that appears twice picked its last copy. Repeats are made
# distinct with zero-width spaces, which nobody sees.
_UNSEEN = "\u200b"


def distinct_labels(labels: list[str]) -> list[str]:
    """`labels` with each repeat made distinct by invisible zero-width spaces (the second copy gets one, the third
    two...), so a widget that maps a picked label back to its option finds the copy picked."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        n = seen[label] = seen.get(label, -1) + 1
        out.append(label + _UNSEEN * n)
    return out


def plotly_config(fig=None) -> dict:
    """Plotly's own export (the camera button in each figure's toolbar, no internet), in the format
    chosen in the sidebar. A figure whose annotations hide when narrow (a phone) is saved at a width showing them all:
    the saved image draws every annotation, without the page's CSS."""
    fmt = st.session_state.get(K.EXPORT_FORMAT, "png")
    image = {"format": fmt, "scale": 2 if fmt == "png" else 1}
    widths = annotation_min_widths(fig) if fig is not None else []
    if any(widths):
        image.update(width=max(max(widths), SAVED_WIDE_FIGURE_PX), height=fig.layout.height)
    return {"displaylogo": False, "toImageButtonOptions": image, "modeBarButtonsToRemove": list(MODEBAR_REMOVED)}


def show_figure(fig, key: str | None = None, **kwargs):
    """st.plotly_chart with the shared export settings, and a button that downloads the figure as a standalone
    interactive HTML file (built only when clicked; clicking reruns nothing). Use it for every figure."""
    if key:  # labels placed for a wide figure hide in a narrow one (style only: numbers and the key, no figure text)
        css = annotation_width_css(fig, f".st-key-{key}")
        if css:
            st.html(css)
    chart = st.plotly_chart(fig, config=plotly_config(fig), key=key, **kwargs)
    seq = st.session_state.get(K.FIGURE_SEQ, 0)
    st.session_state[K.FIGURE_SEQ] = seq + 1
    st.download_button(
        "Interactive HTML",
        data=lambda: figure_html(fig),
        file_name=figure_file_name(fig),
        mime="text/html",
        key=K.per_item("html", key) if key else K.per_item("html_seq", seq),
        on_click="ignore",
        type="tertiary",
        icon=":material/download:",
        help=HTML_HELP,
    )
    return chart


# Streamlit loads its Plotly bundle (megabytes of JavaScript) the first time a page shows a Plotly figure, so a
# visitor's first figure waited seconds longer than the next (issue 60). A session's first run ends with a script that
# imports that bundle once the page has been still for a moment and the browser is idle, so it loads while the visitor
# reads, then draws one tiny figure out of sight and removes it (Plotly's one-time set-up). Not at once: parsing it
# held up the first screen's map (`python -m benchmarks latency` times the first screen and the first figure). A fixed
# script: no user or model text is part of it; the bundle's file name is read from the installed Streamlit (none
# found: nothing is sent).
_WARM_JS = """<script>(() => {{
  if (window.__gvPlotlyWarm) return;  // once per browser tab
  window.__gvPlotlyWarm = true;
  const main = document.querySelector('script[type="module"][src*="/static/js/index."]');
  if (!main) return;
  const url = new URL({chunk!r}, main.src).href;
  let still = 0;
  const wait = setInterval(() => {{  // the page still (no script run) for a second, then an idle moment
    still = document.querySelector('[data-testid="stStatusWidget"]') ? 0 : still + 1;
    if (still < 4) return;
    clearInterval(wait);
    (window.requestIdleCallback || ((f) => setTimeout(f, 0)))(() => import(url).then(warmDraw).catch(() => {{}}),
                                                              {{timeout: 5000}});
  }}, 250);
  // The bundle's first figure also pays Plotly's one-time set-up (its styles, each trace type's first draw): one tiny
  // figure of the kinds the pages draw, out of sight, then removed.
  const warmDraw = () => {{
    const P = window.Plotly;
    if (!P || !P.newPlot) return;
    const div = document.createElement('div');
    div.style.cssText = 'position:fixed;left:-10000px;top:0;width:320px;height:240px;';
    div.className = 'gv-plotly-warm';  // benchmarks/bench_latency.py leaves it out of what a visitor sees
    div.setAttribute('aria-hidden', 'true');
    document.body.appendChild(div);
    const data = [
      {{type: 'heatmap', z: [[0, 1], [1, 0]], colorscale: 'Blues'}},
      {{type: 'scatter', x: [0, 1], y: [1, 0], mode: 'lines+markers+text', text: ['a', 'b'], xaxis: 'x2', yaxis: 'y2'}},
      {{type: 'bar', x: [1, 2], y: [2, 1], xaxis: 'x3', yaxis: 'y3'}},
    ];
    const layout = {{grid: {{rows: 1, columns: 3, pattern: 'independent'}}, annotations: [{{text: 'a', x: 0, y: 0}}],
                    shapes: [{{type: 'line', x0: 0, x1: 1, y0: 0, y1: 1}}]}};
    P.newPlot(div, data, layout, {{staticPlot: false, displayModeBar: true}})
      .then(() => {{ P.purge(div); div.remove(); }}, () => div.remove());
  }};
}})();</script>"""


def plotly_chunk() -> str | None:
    """The file name of the installed Streamlit's Plotly bundle (PlotlyChart.<hash>.js), or None."""
    folder = Path(st.__file__).parent / "static" / "static" / "js"
    found = sorted(folder.glob("PlotlyChart.*.js"))
    return found[0].name if found else None


def warm_plotly() -> None:
    """Once per session, at the end of its first run: the script that loads Plotly's bundle when the page is idle."""
    if st.session_state.get(K.PLOTLY_WARMED):
        return
    st.session_state[K.PLOTLY_WARMED] = True
    chunk = plotly_chunk()
    if chunk is not None:
        st.html(_WARM_JS.format(chunk=chunk), unsafe_allow_javascript=True)


def lazy_expander(label: str, key: str):
    """An expander whose content is drawn only while it is open: None while closed. Streamlit sends a closed
    expander's content all the same, so its tables and figures were redrawn in the browser on every change of the
    page's choices (issue 60); opening it reruns the page, which then draws them."""
    box = st.expander(label, key=key, on_change="rerun")
    return box if box.open else None


def figure_download(build, file_name: str, key: str, label: str = "Interactive HTML") -> None:
    """show_figure's download button for a view not drawn with Plotly: `build()` makes the figure only when clicked."""
    st.download_button(
        label,
        data=lambda: figure_html(build()),
        file_name=file_name,
        mime="text/html",
        key=K.per_item("html", key),
        on_click="ignore",
        type="tertiary",
        icon=":material/download:",
        help=HTML_HELP,
    )


def download_csv(frame, file_name: str, key: str, label: str = "Data as CSV") -> None:
    """A download button for the data behind a view. `frame`: a DataFrame, or a function returning one
    (then the CSV is built only when the button is clicked). Clicking reruns nothing."""
    data = (lambda: csv_bytes(frame())) if callable(frame) else csv_bytes(frame)
    st.download_button(
        label, data=data, file_name=file_name, mime="text/csv", key=key, on_click="ignore", icon=":material/download:"
    )


# Live text in st.code's font: the generated text does not reflow when the finished st.code replaces it, and the
# next-token list's padded columns line up. A fixed rule for keyed boxes (no user or model text is ever part of it).
MONO_KEY = "gv_mono"
_MONO_CSS = (
    f'<style>[class*="st-key-{MONO_KEY}"] [data-testid="stText"], [class*="st-key-{MONO_KEY}"] '
    '[data-testid="stText"] * {font-family: "Source Code Pro", monospace; font-size: 0.875rem; '
    "line-height: 1.6;}</style>"
)


def monospace_text(text: str, name: str, border: bool = False, height: int | None = None) -> None:
    """Plain text (st.text: never Markdown) in a monospace font, in a box keyed `gv_mono_<name>` (unique per run).
    `height`: a fixed box that scrolls, kept at its end as text is added."""
    st.html(_MONO_CSS)  # style only: Streamlit puts it in the page's event container, taking no space
    with st.container(
        border=border, key=K.per_item(MONO_KEY, name), **({"height": height, "autoscroll": True} if height else {})
    ):
        st.text(text)


# On a phone Streamlit's tab row scrolls sideways behind an arrow, so a page's later tabs ("Logit lens", "Saliency")
# sit off-screen where few find them: under 640 px (where Streamlit also stacks columns) the row wraps instead.
# A box keyed NARROW_ONLY shows only up to 768 px, Streamlit's width for starting with the sidebar closed, so what it
# repeats from the sidebar is on screen exactly where the sidebar is not.
NARROW_PX = 768
# Right-to-left prompts (issue 62): each line of a text view (the generated text, the prompt box, plain text boxes) is
# laid out in its own script's direction, so an Arabic line starts at the right; each chip (a token, a unit id) is
# isolated and set in its own direction, while the chips keep the model's order left to right.
_BIDI_CSS = (
    '[data-testid="stCode"] pre, [data-testid="stCode"] pre > div, [data-testid="stText"], '
    '[data-testid="stTextArea"] textarea {unicode-bidi: plaintext; text-align: start;} '
    '[data-testid="stButtonGroup"] button p {unicode-bidi: plaintext;}'
)
_RESPONSIVE_CSS = (
    '<style>@media (max-width: 640px) {[data-testid="stTabs"] [role="tablist"] {flex-wrap: wrap; '
    "row-gap: 0.25rem; overflow-x: visible;}} "
    f"@media (min-width: {NARROW_PX + 1}px) {{.st-key-{K.NARROW_ONLY} {{display: none;}}}} "
    f"{_BIDI_CSS}</style>"
)


def responsive_style() -> None:
    """The app's few layout rules for narrow screens (style only: no user or model text is ever part of it)."""
    st.html(_RESPONSIVE_CSS)


# Streamlit closes the sidebar after a page is picked only where the browser names itself a phone; a narrow window
# that does not (or a phone asking for the desktop site) kept it open over most of the page. Up to NARROW_PX, where the
# sidebar starts closed, a pick in its page list now closes it too. A fixed script: no user or model text is part of it.
_CLOSE_SIDEBAR_JS = f"""<script>(() => {{
  if (window.__gvCloseSidebarOnNav) return;  // installed once per browser tab, whatever reruns the app
  window.__gvCloseSidebarOnNav = true;
  document.addEventListener("click", (event) => {{
    const link = event.target instanceof Element && event.target.closest('[data-testid="stSidebarNav"] a');
    if (!link || window.innerWidth > {NARROW_PX}) return;
    setTimeout(() => {{  // after Streamlit's own handler has started the page change
      const bar = document.querySelector('[data-testid="stSidebar"]');
      const close = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
      if (bar && bar.getAttribute("data-collapsed") === "false" && close) close.click();
    }}, 0);
  }}, true);
}})();</script>"""


def close_sidebar_after_navigation() -> None:
    """On a narrow screen, a page picked in the sidebar closes the sidebar (drawn at the sidebar's foot)."""
    st.sidebar.html(_CLOSE_SIDEBAR_JS, unsafe_allow_javascript=True)
