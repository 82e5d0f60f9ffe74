"""Where one query token looks: its attention weights over the keys it can see, as bars drawn by the browser.

Why not a Plotly figure: this chart sits beside the heatmap on the app's first screen, and Plotly's script (megabytes)
is then evaluated before the heatmap is drawn: seconds of a cold start's wait (docs/benchmarks-history.md, "The first
wait"; `python -m benchmarks latency` times the first screen). Here the bars are a canvas; the interactive-HTML download
still builds the Plotly figure, on click.

`payload` is pure (tested); `query_bars` mounts it (Streamlit's components v2, no iframe). Token text reaches the
page only as canvas text or textContent, never as HTML.
"""

from __future__ import annotations

import numpy as np

from ..attention import HIGHLIGHT

NAME = "gptviz_query_bars"
BAR_COLOUR = "#3a78b5"  # figures.span_bars.query_bars' colour, so the download looks the same


def payload(
    weights, labels: list[str], query: int, *, title: str, height: int = 330, span_start: int | None = None
) -> dict:
    """The query's weights over keys 0..query (they sum to 1 for a softmax row) and their labels, as plain data.
    `span_start`: the weights are the rows of queries span_start..query summed (their own keys drawn highlighted)."""
    if not 0 <= query < len(labels):
        raise ValueError(f"query {query} is not in 0..{len(labels) - 1}")
    start = query if span_start is None else int(span_start)
    if not 0 <= start <= query:
        raise ValueError(f"span_start {start} is not in 0..{query}")
    w = np.asarray(weights, dtype=np.float64)[: query + 1]
    if len(w) != query + 1:
        raise ValueError(f"{len(w)} weights for keys 0..{query}")
    if not np.all(np.isfinite(w)):
        raise ValueError("the weights must be finite")
    return {
        "title": str(title),
        "weights": [round(float(v), 6) for v in w],
        "labels": [str(t) for t in labels[: query + 1]],
        "query": int(query),
        "span_start": start,
        "value_name": "weight" if start == query else "summed weight",
        "colour": BAR_COLOUR,
        "highlight": HIGHLIGHT,
        "height": int(height),
    }
