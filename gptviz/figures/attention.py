"""Attention figures: one head's pattern, small multiples over heads and layers, where one query looks,
and per-head entropy. Data in, go.Figure out; no Streamlit, no I/O.

Conventions: a pattern is [query, key] (rows attend to columns); the causal mask's upper triangle is NaN in
the weight trace and drawn as a separate grey trace (or shows the grey plot background), so it can never be
mistaken for a zero weight. Token text is escaped for Plotly (`plotly_text`): Plotly renders a few HTML-like
tags in labels, and a prompt is text.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.colors as pcolors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import (
    ATTENTION_SCALE,
    AXIS_TITLE_ROOM,
    COLORAXIS_BAR_ROOM,
    LABEL_PAD,
    MASKED_COLOR,
    TOP_BAR_ROOM,
    TRACE_BAR_ROOM,
    angled_label_px,
    apply_layout,
    colorbar_on_top,
    escaped,
    label_px,
    plotly_text,
    reserve_margins,
    token_categories,
    token_category_axis,
)
from .palette import behind_text, sequential

# Colour scales for attention weights (every figure of one view shares one).
SCALES = {
    "linear": "linear, 0 to 1",
    "max": "linear, 0 to the largest weight shown",
    "sqrt": "square root, 0 to 1 (small weights stand out)",
}
# The pages' default: most weights of a trained head are small, and on a linear scale nearly every head looks pale
# except its few largest cells; the square root keeps 0 and 1 where they are and makes the small weights visible.
DEFAULT_SCALE = "sqrt"
HIGHLIGHT = "#f58518"  # the chosen query row / head
OUT_OF_WINDOW_COLOR = "#f2f2f2"  # keys that slid out of the context window during generation
ENTROPY_SCALE = "Purples_r"  # reversed: dark = low entropy = a focused head, light = spread evenly


def position_texts(labels) -> list[str]:
    """Unique per position ('3 ␣the'), escaped: categorical axes and hover where repeats must differ."""
    return [f"{i} {plotly_text(label)}" for i, label in enumerate(labels)]


def causal_masked(pattern) -> np.ndarray:
    """A float copy of a [..., query, key] pattern with the future (key > query) set to NaN."""
    z = np.array(pattern, dtype=np.float32, copy=True)
    T_q, T_k = z.shape[-2:]
    future = np.arange(T_k)[None, :] > np.arange(T_q)[:, None]
    z[..., future] = np.nan
    return z


def color_axis(scale: str = "linear", values=None, text: bool = False) -> dict:
    """A layout coloraxis for attention weights. 'max' runs to the largest weight in `values` outside the
    first query row (which is always 1: the first token can only look at itself). `text`: its cells hold text
    (palette.behind_text)."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    colours = (behind_text if text else sequential)(ATTENTION_SCALE)
    axis = dict(cmin=0.0, cmax=1.0, colorscale=colours, colorbar=dict(title=dict(text="weight"), thickness=12, len=0.8))
    if scale == "max" and values is not None:
        v = np.asarray(values, dtype=np.float32)
        body = v[..., 1:, :] if v.ndim >= 2 and v.shape[-2] > 1 else v
        top = float(np.nanmax(body)) if body.size and np.isfinite(body).any() else 1.0
        axis["cmax"] = top if top > 0 else 1.0
    elif scale == "sqrt":
        stops = np.linspace(0, 1, 21)
        colors = pcolors.sample_colorscale(colours, [math.sqrt(s) for s in stops])
        axis["colorscale"] = [[float(s), c] for s, c in zip(stops, colors, strict=True)]
        # Plotly's colour bar runs linearly in the weight (the square root shows as colour packed at its low end),
        # so a tick at 0.05 sat on the 0 in short bars (seen on the Generation page's one-step figure)
        axis["colorbar"]["tickvals"] = [0, 0.25, 0.5, 0.75, 1]
    return axis


def _pair_customdata(query_texts: list[str], key_texts: list[str]) -> np.ndarray:
    """[queries, keys, 4] object array of (query text, key text, query position, key position) for hover
    (with token tick labels, %{x} and %{y} would show the tick text, not the position)."""
    Q, K = len(query_texts), len(key_texts)
    custom = np.empty((Q, K, 4), dtype=object)
    custom[..., 0] = np.array(query_texts, dtype=object)[:, None]
    custom[..., 1] = np.array(key_texts, dtype=object)[None, :]
    custom[..., 2] = np.arange(Q)[:, None]
    custom[..., 3] = np.arange(K)[None, :]
    return custom


def masked_trace(z, x, y, colorscale: list, hover: str) -> go.Heatmap:
    """The cells a query cannot see, as a trace of their own in `colorscale`'s flat colours (z from 0 to 1, no colour
    bar); its NaN cells, those the query sees, are not drawn and have no hover. One hover sentence and no per-cell
    data: that would double the figure's size."""
    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        zmin=0,
        zmax=1,
        showscale=False,
        hoverongaps=False,
        colorscale=colorscale,
        name="masked",
        hovertemplate=hover + "<extra></extra>",
    )


def query_key_axes(
    fig: go.Figure, key_title: str, query_title: str, keys: dict, queries: dict, *, tick_size: int
) -> None:
    """The axes of a query × key heatmap: keys across (angled labels), queries down from the top, no grid or zero
    line over the cells; `keys`, `queries`: each axis's ticks."""
    fig.update_xaxes(
        title_text=key_title, tickangle=-60, tickfont_size=tick_size, showgrid=False, zeroline=False, **keys
    )
    fig.update_yaxes(
        title_text=query_title,
        autorange="reversed",
        tickfont_size=tick_size,
        showgrid=False,
        zeroline=False,
        **queries,
    )


def attention_heatmap(
    pattern,
    labels: list[str],
    *,
    title: str | None = None,
    scale: str = "linear",
    query: int | None = None,
    height: int = 560,
    value_name: str = "weight",
) -> go.Figure:
    """One head (or a mean of heads): queries as rows, keys as columns, on integer axes with token tick
    labels. Traces: [weights (future NaN), causal mask (grey, only the future)]. `query` outlines a row.
    `value_name` names what the cells hold (another row-normalised share, e.g. value-weighted attention)."""
    z = causal_masked(pattern)
    T = z.shape[0]
    texts = [f"'{t}'" for t in escaped(labels)]
    custom = _pair_customdata(texts, texts)
    idx = np.arange(T)
    # category axes that thin their own labels to the width drawn: 28 tokens' array of tick labels ran into each
    # other on a phone. Positions in the hover come from customdata; shapes address a category by its index.
    cats = token_categories(escaped(labels))
    weights = go.Heatmap(
        z=z,
        x=cats,
        y=cats,
        customdata=custom,
        coloraxis="coloraxis",
        hoverongaps=False,
        name=value_name,
        hovertemplate="%{customdata[0]} → %{customdata[1]}: " + value_name + " %{z:.3g}"
        "<br>query position %{customdata[2]}, key position %{customdata[3]}<extra></extra>",
    )
    future = np.where(idx[None, :] > idx[:, None], 1.0, np.nan)
    mask = masked_trace(
        future, cats, cats, [[0, MASKED_COLOR], [1, MASKED_COLOR]], "masked: a token cannot look at later tokens"
    )
    fig = go.Figure([weights, mask])
    query_key_axes(
        fig, "key (looked at)", "query (looking)", token_category_axis(cats), token_category_axis(cats), tick_size=11
    )
    if query is not None and 0 <= query < T:
        fig.add_shape(
            type="rect",
            x0=-0.5,
            x1=query + 0.5,
            y0=query - 0.5,
            y1=query + 0.5,
            line=dict(color=HIGHLIGHT, width=2),
            fillcolor="rgba(0,0,0,0)",
        )
    axis = color_axis(scale, z)
    axis["colorbar"].update(colorbar_on_top(value_name, y=1.01, length=0.5))
    apply_layout(fig, title=title, height=height, coloraxis=axis, plot_bgcolor=MASKED_COLOR)
    # room for the token labels, the axis titles and the colour bar (common.reserve_margins: one layout pass)
    texts = escaped(labels)
    return reserve_margins(
        fig,
        l=label_px(texts, 11) + LABEL_PAD + AXIS_TITLE_ROOM,
        b=angled_label_px(texts, 11) + LABEL_PAD + AXIS_TITLE_ROOM,
        t=TOP_BAR_ROOM,
        r=16,  # the last angled key label's top end
    )


def attention_grid(
    patterns,
    labels: list[str],
    *,
    panel_names: list[list[str]],
    row_titles: list[str] | None = None,
    col_titles: list[str] | None = None,
    scale: str = "linear",
    selected: tuple[int, int] | None = None,
    title: str | None = None,
    width_px: int = 900,
) -> go.Figure:
    """Small multiples: patterns [rows, cols, T, T] (layers x heads, or one layer's heads wrapped into
    rows), one heatmap per panel on one shared colour axis; the future shows the grey plot background.
    Trace i is panel (i // cols, i % cols), named panel_names[r][c] (its hover and, without row/column
    titles, its subplot title; an all-NaN panel named "" is padding). `selected` outlines one panel."""
    z = causal_masked(patterns)
    R, C = z.shape[:2]
    pos = position_texts(labels)
    gap = 0.03 if C <= 8 else 0.012
    by_panel = row_titles is None and col_titles is None
    # the panels' domains and titles from make_subplots, as plain dicts set once: traces added panel by panel and
    # axes and titles updated in place had Plotly validate the growing figure again each time, most of the server's
    # time on the "All heads of the layer" tab (issue 60, `python -m benchmarks latency`)
    layout = make_subplots(
        rows=R,
        cols=C,
        horizontal_spacing=gap if C > 1 else 0.0,
        vertical_spacing=(0.3 / R if by_panel else min(gap * 2, 0.5 / R)) if R > 1 else 0.0,
        subplot_titles=[n for row in panel_names for n in row] if by_panel else None,
        column_titles=col_titles,
        row_titles=row_titles,
    ).layout.to_plotly_json()
    axis = dict(type="category", showticklabels=False, showgrid=False, zeroline=False)
    for name, value in layout.items():
        if name.startswith(("xaxis", "yaxis")):
            value.update(axis, **({"autorange": "reversed"} if name.startswith("yaxis") else {}))
    for note in layout.get("annotations", ()):
        note.update(font=dict(note.get("font", {}), size=12), yshift=6)
        if row_titles and note["text"] in row_titles:
            note.update(textangle=0, xshift=8)
    if selected is not None and 0 <= selected[0] < R and 0 <= selected[1] < C:
        n = selected[0] * C + selected[1] + 1
        suffix = "" if n == 1 else str(n)
        layout["shapes"] = [
            dict(
                type="rect",
                xref=f"x{suffix} domain",
                yref=f"y{suffix} domain",
                x0=-0.02,
                x1=1.02,
                y0=-0.02,
                y1=1.02,
                line=dict(color=HIGHLIGHT, width=3),
            )
        ]
    traces = [
        go.Heatmap(
            z=z[r, c],
            x=pos,
            y=pos,
            xaxis=f"x{'' if r * C + c == 0 else r * C + c + 1}",
            yaxis=f"y{'' if r * C + c == 0 else r * C + c + 1}",
            coloraxis="coloraxis",
            hoverongaps=False,
            name=panel_names[r][c],
            hovertemplate=f"{panel_names[r][c]}<br>%{{y}} → %{{x}}: %{{z:.3g}}<extra></extra>",
        )
        for r in range(R)
        for c in range(C)
    ]
    fig = go.Figure(data=traces, layout=layout)
    panel = max(40, min(220, (width_px - 80) / C))
    extra = 24 * R if by_panel else 0
    apply_layout(
        fig,
        title=title,
        height=int(R * panel + extra + 60 + (30 if title else 0)),
        coloraxis=color_axis(scale, z),
        plot_bgcolor=MASKED_COLOR,
    )
    return reserve_margins(fig, r=COLORAXIS_BAR_ROOM)


def model_view(
    patterns,
    labels: list[str],
    *,
    row_names: list[str],
    col_names: list[str],
    col_ticks: list[str] | None = None,
    scale: str = "linear",
    selected: tuple[int, int] | None = None,
    title: str | None = None,
    width_px: int = 900,
    clickable: bool = False,
) -> go.Figure:
    """Every layer (rows) and head (columns) at once: patterns [rows, cols, T, T] tiled into ONE heatmap
    trace (panels separated by one white row/column; the future NaN on the grey plot background), so a
    12 x 12 model view stays one trace instead of 144 subplots (several times faster to build and draw).
    Categorical axes whose labels name the panel and the token ('layer 2 · '␣cat' (5)'), so the hover
    reads 'layer 2 · query → head 3 · key: weight'. `col_ticks`: shorter column labels for the top axis.
    `selected` outlines one panel. `clickable` adds a marker on each panel's first cell (the first token looking at
    itself: always 1, so it hides nothing) carrying [row, column] as customdata, for a click that opens the head."""
    z = causal_masked(patterns)
    R, C, T = z.shape[0], z.shape[1], z.shape[-1]
    g = T + 1  # panel stride: T cells and one gap
    tiled = np.full((R * g - 1, C * g - 1), np.nan, dtype=np.float32)
    for r in range(R):
        for c in range(C):
            tiled[r * g : r * g + T, c * g : c * g + T] = z[r, c]
    texts = escaped(labels)
    ys = [f"{row_names[i // g]} · '{texts[i % g]}' ({i % g})" if i % g < T else f"gap {i}" for i in range(R * g - 1)]
    xs = [f"{col_names[i // g]} · '{texts[i % g]}' ({i % g})" if i % g < T else f"gap {i}" for i in range(C * g - 1)]
    fig = go.Figure(
        go.Heatmap(
            z=tiled,
            x=xs,
            y=ys,
            coloraxis="coloraxis",
            hoverongaps=False,
            name="weights",
            hovertemplate="%{y} → %{x}: %{z:.3g}<extra></extra>",
        )
    )
    fig.update_xaxes(
        type="category",
        side="top",
        showgrid=False,
        zeroline=False,
        tickangle=0,
        tickvals=[xs[c * g + T // 2] for c in range(C)],
        ticktext=col_ticks or col_names,
    )
    fig.update_yaxes(
        type="category",
        autorange="reversed",
        showgrid=False,
        zeroline=False,
        tickvals=[ys[r * g + T // 2] for r in range(R)],
        ticktext=row_names,
    )
    # the white gaps between panels and the chosen panel's outline, set once (add_shape validated all the shapes so
    # far again on each call; issue 60, the model view's tab in `python -m benchmarks latency`)
    gap_style = dict(type="rect", fillcolor="white", line=dict(width=0), layer="above")
    shapes = [dict(gap_style, xref="paper", x0=0, x1=1, y0=r * g - 1.5, y1=r * g - 0.5) for r in range(1, R)]
    shapes += [dict(gap_style, yref="paper", y0=0, y1=1, x0=c * g - 1.5, x1=c * g - 0.5) for c in range(1, C)]
    if selected is not None and 0 <= selected[0] < R and 0 <= selected[1] < C:
        r, c = selected
        shapes.append(
            dict(
                type="rect",
                x0=c * g - 0.5,
                x1=c * g + T - 0.5,
                y0=r * g - 0.5,
                y1=r * g + T - 0.5,
                line=dict(color=HIGHLIGHT, width=3),
                layer="above",
            )
        )
    fig.update_layout(shapes=shapes)
    panel = max(30, min(220, (width_px - 120) / C))
    extra = {}
    if clickable:
        rows, cols = np.meshgrid(np.arange(R), np.arange(C), indexing="ij")
        fig.add_trace(
            go.Scatter(
                x=[xs[c * g] for c in cols.ravel()],
                y=[ys[r * g] for r in rows.ravel()],
                mode="markers",
                name="open",
                customdata=np.stack([rows.ravel(), cols.ravel()], axis=-1),
                marker=dict(symbol="square-open", size=max(8, min(14, panel / T)), color=HIGHLIGHT, line_width=2),
                hovertemplate="layer %{customdata[0]}, head %{customdata[1]}: click to open this head<extra></extra>",
                selected=dict(marker=dict(opacity=1)),
                unselected=dict(marker=dict(opacity=1)),
            )
        )
        extra = dict(clickmode="event+select", showlegend=False)
    apply_layout(
        fig,
        title=title,
        height=int(R * panel + 80 + (30 if title else 0)),
        coloraxis=color_axis(scale, z),
        plot_bgcolor=MASKED_COLOR,
        **extra,
    )
    return reserve_margins(fig, l=label_px(row_names) + LABEL_PAD, r=COLORAXIS_BAR_ROOM)


def entropy_map(
    mean_entropy,
    *,
    query_entropy=None,
    query_label: str | None = None,
    uniform_entropy: float | None = None,
    selected: tuple[int, int] | None = None,
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """Per-head attention entropy in nats, layers as rows and heads as columns. Traces: [heatmap (no
    hover), invisible markers, one per head, that carry the hover and can be clicked to pick the head
    (customdata [layer, head, ...])]. Colours run from 0 (every query looks at one key) to
    `uniform_entropy` (every query spreads evenly over all the keys it can see)."""
    ent = np.asarray(mean_entropy, dtype=np.float32)
    L, H = ent.shape
    layer, head = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
    qent = np.asarray(query_entropy, dtype=np.float32) if query_entropy is not None else np.full_like(ent, np.nan)
    # one token: every head can only look at itself (entropy 0, and so is the even spread); keep a 0..1 scale
    top = uniform_entropy if uniform_entropy else (float(np.nanmax(ent)) if np.nanmax(ent) > 0 else 1.0)
    heat = go.Heatmap(
        z=ent,
        x=np.arange(H),
        y=np.arange(L),
        colorscale=sequential(ENTROPY_SCALE),
        zmin=0,
        zmax=top,
        hoverinfo="skip",
        name="entropy",
        texttemplate="%{z:.2f}" if L * H <= 160 else None,
        textfont_size=10,
        colorbar=dict(title=dict(text="nats"), thickness=12, len=0.8),
    )
    custom = np.stack([layer.ravel(), head.ravel(), ent.ravel(), qent.ravel()], axis=-1)
    hover = "layer %{customdata[0]}, head %{customdata[1]}<br>mean entropy %{customdata[2]:.3f} nats"
    if uniform_entropy:
        hover += f"<br>(even spread over the keys: {uniform_entropy:.3f} nats)"
    if query_entropy is not None and query_label is not None:
        hover += f"<br>at query '{plotly_text(query_label)}': %{{customdata[3]:.3f}} nats"
    hover += "<br>click to open this head<extra></extra>"
    points = go.Scatter(
        x=head.ravel(),
        y=layer.ravel(),
        mode="markers",
        customdata=custom,
        name="heads",
        marker=dict(size=14, symbol="square", opacity=0),
        hovertemplate=hover,
        selected=dict(marker=dict(opacity=0)),
        unselected=dict(marker=dict(opacity=0)),
    )
    fig = go.Figure([heat, points])
    # heads across, layers down (layer 0 on top): a tick at every index, or every 4th past 32
    for update_axes, what, n, extra in (
        (fig.update_xaxes, "head", H, dict(range=[-0.5, H - 0.5])),
        (fig.update_yaxes, "layer", L, dict(autorange="reversed")),
    ):
        update_axes(
            title_text=what, tickmode="linear", dtick=1 if n <= 32 else 4, showgrid=False, zeroline=False, **extra
        )
    if selected is not None:
        sl, sh = selected
        fig.add_shape(
            type="rect", x0=sh - 0.5, x1=sh + 0.5, y0=sl - 0.5, y1=sl + 0.5, line=dict(color=HIGHLIGHT, width=3)
        )
    apply_layout(
        fig,
        title=title,
        height=height or int(min(700, max(260, 34 * L + 110))),
        hoverdistance=-1,
        clickmode="event+select",
        showlegend=False,
    )
    return reserve_margins(
        fig,
        l=label_px([str(L - 1)]) + LABEL_PAD + AXIS_TITLE_ROOM,
        b=13 + LABEL_PAD + AXIS_TITLE_ROOM,  # a line of tick numbers and the title
        r=TRACE_BAR_ROOM,
    )


def selected_head(selection) -> tuple[int, int] | None:
    """(layer, head) from a Streamlit plotly selection of the entropy map, or None when nothing usable
    was selected. The marker trace sits at x = head, y = layer; customdata [layer, head, ...] is the
    fallback (it may arrive as a list or as a dict keyed by index)."""
    try:
        points = selection["selection"]["points"] if "selection" in selection else selection["points"]
    except (KeyError, TypeError):
        return None
    for point in points or []:
        if not isinstance(point, dict):
            continue
        try:
            if isinstance(point.get("x"), (int, float)) and isinstance(point.get("y"), (int, float)):
                return int(point["y"]), int(point["x"])
            custom = point.get("customdata")
            if isinstance(custom, dict):
                custom = [custom.get(0, custom.get("0")), custom.get(1, custom.get("1"))]
            if custom is not None and len(custom) >= 2 and None not in custom[:2]:
                return int(custom[0]), int(custom[1])
        except (TypeError, ValueError):
            continue
    return None
