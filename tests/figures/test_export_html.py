"""Every figure downloads as a standalone interactive HTML file: Plotly's JavaScript inlined (no CDN), the data
escaped so token text cannot break out of the script, one button under each figure of a page."""

from __future__ import annotations

import json
import re

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from gptviz.export import figure_file_name, figure_html
from tests.support.pagetest import figures, run_page

HOSTILE = "</script><script>alert(1)</script>"


def test_the_html_file_inlines_plotly_and_holds_the_figure_data():
    fig = go.Figure(go.Bar(x=["a", HOSTILE], y=[0.25, 0.75]), layout={"title": {"text": "Where <b>token 3</b> looks"}})
    html = figure_html(fig).decode("utf-8")
    assert get_plotlyjs() in html  # the installed package's own plotly.js, inlined whole
    assert not re.search(r"<script[^>]+src=", html)  # nothing fetched from a CDN or anywhere else
    assert "<script>alert(1)" not in html and "\\u003c\\u002fscript\\u003e" in html
    spec = re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', html, re.S).group(1)
    (trace,) = json.loads(spec)
    assert trace["x"] == ["a", HOSTILE] and trace["y"] == [0.25, 0.75]


def test_file_names_come_from_the_title_and_are_safe():
    titled = go.Figure(layout={"title": {"text": "Layer 2 · head 3: <i>attention</i> ../../etc"}})
    assert figure_file_name(titled) == "layer-2-head-3-attention-etc.html"
    assert figure_file_name(go.Figure()) == "gptviz-figure.html"


def test_each_figure_of_a_page_has_its_html_download():
    at = run_page("attention")
    assert not at.exception
    buttons = [b for b in at.get("download_button") if b.proto.label.lower().endswith("interactive html")]
    components = [el.proto.component_name for el in at.get("bidi_component")]
    drawn = [name for name in components if name != "gptviz_chip_span"]  # the chips' drag listener draws nothing
    # every Plotly figure, and each canvas view (the heatmap, the query's bars: each downloads as the Plotly version
    # of the same data)
    assert sorted(components) == ["gptviz_attention_map", "gptviz_chip_span", "gptviz_query_bars"]
    assert len(buttons) == len(figures(at)) + len(drawn)
