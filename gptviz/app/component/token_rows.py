"""Rows of coloured tokens (the unit page's top examples), drawn by the browser as text.

Why not a Plotly figure: the examples were a bar chart with a text label in every bar (about 800 bars for 20 rows),
and Plotly measures every label to fit it, which took seconds to draw in Chromium on a 2-core machine, longer than
the rest of the page. Here each token is a <span> whose text is set with textContent: never parsed as HTML, like
the attention map beside it. The interactive-HTML download still builds the Plotly figure, on click.

`payload` is pure (tested); `token_rows` mounts it (Streamlit's components v2, no iframe).
"""
from __future__ import annotations

from importlib import resources

import numpy as np
import plotly.colors as pcolors
import streamlit as st

from ...figures.attention import HIGHLIGHT
from ...figures.units import EXAMPLE_SCALE, LEFT_CHARS, RIGHT_CHARS, ExampleRow

NAME = "gptviz_token_rows"


def colour_stops(scale: str = EXAMPLE_SCALE) -> list[list]:
    """A Plotly colour scale as [position, [r, g, b]] stops."""
    stops = pcolors.get_colorscale(scale)
    rgb = (pcolors.unlabel_rgb(c) if c.startswith("rgb") else pcolors.hex_to_rgb(c) for _, c in stops)
    return [[float(s), [int(round(v)) for v in c]] for (s, _), c in zip(stops, rgb)]


def window(labels: list[str], peak: int, left: int = LEFT_CHARS, right: int = RIGHT_CHARS) -> tuple[int, int]:
    """The tokens [start, end) shown around the peak: whole tokens within `left` characters before the peak's
    start and `right` after it (a character each for the space between tokens), as the Plotly figure shows them."""
    widths = [max(1, len(label)) + 1 for label in labels]
    start, used = peak, 0
    while start > 0 and used + widths[start - 1] <= left:
        start, used = start - 1, used + widths[start - 1]
    end, used = peak + 1, widths[peak]
    while end < len(labels) and used + widths[end] <= right:
        end, used = end + 1, used + widths[end]
    return start, end


def payload(rows: list[ExampleRow], *, value_name: str, cmax: float) -> dict:
    """Plain data for the browser: every row's shown tokens, their values (NaN: none, drawn grey) and the peak's
    place among them. Token text travels as data and is drawn with textContent."""
    out = []
    for row in rows:
        if not 0 <= row.peak < len(row.labels):
            raise ValueError(f"peak {row.peak} is outside the row's {len(row.labels)} tokens")
        start, end = window(row.labels, row.peak)
        values = np.asarray(row.values, dtype=np.float64)[start:end]
        out.append({"name": str(row.name), "hover": str(row.hover), "tokens": [str(t) for t in row.labels[start:end]],
                    "values": [None if not np.isfinite(v) else round(float(v), 5) for v in values],
                    "peak": row.peak - start})
    return {"rows": out, "value_name": str(value_name), "cmax": float(cmax) if cmax > 0 else 1.0,
            "colors": colour_stops(), "highlight": HIGHLIGHT}


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


_component = None


def token_rows(data: dict, *, key: str):
    """Mount the component with `payload`'s data."""
    global _component
    if _component is None:  # register once per process
        _component = st.components.v2.component(NAME, html='<div class="gv-rows"></div>',
                                                css=_asset("token_rows.css"), js=_asset("token_rows.js"))
    return _component(data=data, key=key)
