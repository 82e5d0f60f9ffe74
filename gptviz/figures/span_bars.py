"""The Attention page's bars as Plotly figures: where one query looks (the interactive-HTML download of the canvas
view gptviz.figures.browser.query_bars), and the "to the span" bars: how much each token looks at a span of tokens
(its columns summed)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .common import apply_layout, escaped, token_axis


def span_reach_bars(
    weights, labels: list[str], start: int, end: int, *, title: str | None = None, height: int = 330
) -> go.Figure:
    """How much each query looks at the span start..end-1: its weights on the span's keys summed (0..end-start),
    over queries start..T-1 (earlier ones cannot see the span); the span's own tokens in the highlight colour."""
    w = np.asarray(weights, dtype=np.float32)
    texts = escaped(labels)
    span = f"tokens {start}-{end - 1}"
    queries = np.arange(start, len(w))
    custom = np.array([[f"'{texts[q]}'", span, q] for q in queries], dtype=object)
    fig = go.Figure(
        go.Bar(
            x=queries,
            y=w[start:],
            customdata=custom,
            marker_color=["#e8730c" if q < end else "#3a78b5" for q in queries],
            name="summed weight",
            hovertemplate="%{customdata[0]} → %{customdata[1]}: %{y:.3g}<br>query position %{customdata[2]}"
            "<extra></extra>",
        )
    )
    fig.update_xaxes(
        title_text="query (looking)", tickangle=-60, tickfont_size=11, **token_axis(texts[start:], 16, start=start)
    )
    fig.update_yaxes(title_text="summed weight on the span", rangemode="tozero")
    return apply_layout(fig, title=title, height=height, bargap=0.15)


def query_bars(weights, labels: list[str], query: int, *, title: str | None = None, height: int = 330) -> go.Figure:
    """Where one query looks: its attention weights over keys 0..query (they sum to 1)."""
    w = np.asarray(weights, dtype=np.float32)[: query + 1]
    texts = escaped(labels[: query + 1])
    q_text = f"'{texts[query]}'"
    custom = np.array([[q_text, f"'{t}'", k] for k, t in enumerate(texts)], dtype=object)
    fig = go.Figure(
        go.Bar(
            x=np.arange(query + 1),
            y=w,
            customdata=custom,
            marker_color="#3a78b5",
            name="weight",
            hovertemplate="%{customdata[0]} → %{customdata[1]}: %{y:.3g}<br>key position %{customdata[2]}"
            "<extra></extra>",
        )
    )
    # a third of the page wide: 16 angled labels at most, or they run into each other (64 tokens: every 4th)
    fig.update_xaxes(title_text="key", tickangle=-60, tickfont_size=11, **token_axis(texts, max_ticks=16))
    fig.update_yaxes(title_text="weight", rangemode="tozero")
    return apply_layout(fig, title=title, height=height, bargap=0.15)
