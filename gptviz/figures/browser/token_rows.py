"""Rows of coloured tokens (the unit page's top examples), drawn by the browser as text.

Why not a Plotly figure: the examples were a bar chart with a text label in every bar (about 800 bars for 20 rows),
and Plotly measures every label to fit it, which took seconds to draw in Chromium on a 2-core machine, longer than
the rest of the page. Here each token is a <span> whose text is set with textContent: never parsed as HTML, like
the attention map beside it. The interactive-HTML download still builds the Plotly figure, on click.

`payload` is pure (tested); `token_rows` mounts it (Streamlit's components v2, no iframe).
"""

from __future__ import annotations

import numpy as np

from ..attention import HIGHLIGHT
from ..palette import behind_text
from ..unit_page import EXAMPLE_SCALE, ExampleRow, window
from .attention_map import colour_stops

NAME = "gptviz_token_rows"
# A row's height (one line; on a phone two, the name above the text) and the legend's, measured in Chromium at 1400 and
# 390 px wide with token_rows.css
ROW_PX, PHONE_ROW_PX, LEGEND_PX = 23.8, 41.4, 23.2
PHONE_PX = 640  # token_rows.css's breakpoint


def payload(rows: list[ExampleRow], *, value_name: str, cmax: float) -> dict:
    """Plain data for the browser: every row's shown tokens, their values (NaN: none, drawn grey) and the peak's
    place among them. Token text travels as data and is drawn with textContent."""
    out = []
    for row in rows:
        if not 0 <= row.peak < len(row.labels):
            raise ValueError(f"peak {row.peak} is outside the row's {len(row.labels)} tokens")
        start, end = window(row.labels, row.peak)
        values = np.asarray(row.values, dtype=np.float64)[start:end]
        out.append(
            {
                "name": str(row.name),
                "hover": str(row.hover),
                "tokens": [str(t) for t in row.labels[start:end]],
                "values": [None if not np.isfinite(v) else round(float(v), 5) for v in values],
                "peak": row.peak - start,
            }
        )
    return {
        "rows": out,
        "value_name": str(value_name),
        "cmax": float(cmax) if cmax > 0 else 1.0,
        "colors": colour_stops(behind_text(EXAMPLE_SCALE)),
        "highlight": HIGHLIGHT,
    }


def reserve_css(key: str, n_rows: int) -> str:
    """A <style> that keeps the rows' height free in the component's keyed box before they are drawn: the component
    mounts a moment after the text around it, which otherwise jumps down by the rows' height (850 px on a phone)."""
    n = max(0, int(n_rows))
    wide, phone = LEGEND_PX + n * ROW_PX, LEGEND_PX + n * PHONE_ROW_PX
    return (
        f"<style>.st-key-{key} {{min-height: {wide:.0f}px;}} "
        f"@media (max-width: {PHONE_PX}px) {{.st-key-{key} {{min-height: {phone:.0f}px;}}}}</style>"
    )
