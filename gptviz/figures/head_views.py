"""Attention as people know it from other tools: lines between tokens (BertViz's head view), attention on the
text (CircuitsVis), one head's computation step by step and the query/key neuron view (Transformer Explainer,
BertViz). Data in, go.Figure out; no Streamlit, no I/O. Token text is escaped for Plotly (`plotly_text`)."""

from __future__ import annotations

import math

import numpy as np
import plotly.colors as pcolors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .attention import HIGHLIGHT, color_axis
from .common import (
    AXIS_TITLE_ROOM,
    DIVERGING_SCALE,
    LABEL_PAD,
    MASKED_COLOR,
    TOP_SHORT_BAR_ROOM,
    apply_layout,
    colorbar_on_top,
    escaped,
    label_px,
    reserve_margins,
)
from .palette import dark_cells, diverging, sequential

HEAD_COLORS = pcolors.qualitative.D3 + pcolors.qualitative.Dark24  # one colour per head index, everywhere
LINE_LEVELS = 20  # a line's opacity is its weight rounded to 1/20 (one trace per level, not one per line)
MONO = dict(family="DejaVu Sans Mono, Menlo, Consolas, monospace", size=13)


def head_color(head: int) -> str:
    return HEAD_COLORS[head % len(HEAD_COLORS)]


def head_lines(
    patterns,
    labels: list[str],
    heads: list[int],
    *,
    focus: int | None = None,
    min_weight: float = 0.02,
    title: str | None = None,
) -> go.Figure:
    """BertViz's head view: queries in the left column, keys in the right, a line from each query to each key
    it may see, opacity = the weight (rounded to 1/LINE_LEVELS), one colour per head; several heads overlay.
    `patterns`: [len(heads), T, T]. `focus`: draw only that query's lines. Lines under `min_weight` are left out
    (they would be invisible). Traces: per head and opacity level one line trace (meta = {head, level}), then
    the two token columns (meta = "queries" / "keys"), which carry the hover and can be clicked."""
    pats = np.asarray(patterns, dtype=np.float32)
    T = pats.shape[-1]
    texts = escaped(labels)
    traces = []
    for pattern, head in zip(pats, heads, strict=True):
        traces.append(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                line=dict(color=head_color(head), width=3),
                name=f"head {head}",
                legendgroup=f"head {head}",
                hoverinfo="skip",
            )
        )  # legend only
        levels = np.clip(np.round(pattern * LINE_LEVELS), 1, LINE_LEVELS).astype(int)
        drawn = np.tril(pattern >= min_weight)
        if focus is not None:
            drawn &= np.arange(T)[:, None] == focus
        for level in range(1, LINE_LEVELS + 1):
            qs, ks = np.nonzero(drawn & (levels == level))
            if not len(qs):
                continue
            xs = np.tile([0.0, 1.0, np.nan], len(qs))
            ys = np.stack([qs, ks, np.full(len(qs), np.nan)], axis=1).ravel()
            traces.append(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line=dict(color=head_color(head), width=2),
                    opacity=level / LINE_LEVELS,
                    hoverinfo="skip",
                    name=f"head {head}",
                    legendgroup=f"head {head}",
                    showlegend=False,
                    meta={"head": int(head), "level": level},
                )
            )
    positions = np.arange(T)
    for x, side, anchor in ((0.0, "queries", "middle left"), (1.0, "keys", "middle right")):
        role = "query" if side == "queries" else "key"
        traces.append(
            go.Scatter(
                x=np.full(T, x),
                y=positions,
                mode="markers+text",
                text=texts,
                textposition=anchor,
                textfont=dict(size=12),
                marker=dict(size=7, color="#555"),
                meta=side,
                showlegend=False,
                customdata=np.stack([positions, np.array(texts, dtype=object)], axis=1),
                hovertemplate=f"{role} %{{customdata[0]}} '%{{customdata[1]}}'"
                + ("<br>click to keep only its lines" if side == "queries" else "")
                + "<extra></extra>",
            )
        )
    fig = go.Figure(traces)
    if focus is not None and 0 <= focus < T:
        fig.add_shape(
            type="rect", x0=-0.04, x1=0.04, y0=focus - 0.5, y1=focus + 0.5, line=dict(color=HIGHLIGHT, width=2)
        )
    fig.update_xaxes(visible=False, range=[-0.75, 1.75], fixedrange=True)
    fig.update_yaxes(visible=False, autorange="reversed")
    return apply_layout(
        fig,
        title=title,
        height=int(max(320, 19 * T + 90)),
        clickmode="event+select",
        legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0.5, xanchor="center"),
        hovermode="closest",
    )


def text_layout(labels: list[str], width_chars: int = 90) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each token sits when the prompt is set as text in a monospace font: (line, start, width) in
    character cells. A token is as wide as its label plus one cell of gap; lines wrap at `width_chars`, and a
    token holding a newline (↵) ends its line."""
    lines, starts, widths = [], [], []
    line, col = 0, 0
    for label in labels:
        width = max(1, len(label)) + 1
        if col and col + width > width_chars:
            line, col = line + 1, 0
        lines.append(line)
        starts.append(col)
        widths.append(width)
        col += width
        if "↵" in label:
            line, col = line + 1, 0
    return np.array(lines), np.array(starts), np.array(widths)


def attention_text(
    values,
    labels: list[str],
    *,
    query: int | None = None,
    visible: int | None = None,
    value_name: str = "weight",
    scale: str = "linear",
    title: str | None = None,
    width_chars: int = 90,
) -> go.Figure:
    """CircuitsVis's idiom: the prompt set as a line of text, each token coloured by `values` [T]. Tokens past
    `visible` (those after the query, which it cannot see) are grey, not zero. `query` is outlined.
    Traces: [coloured tokens (customdata [position, text, value])] + [grey tokens, when any] + [the colour bar's
    carrier: two unseen markers at the scale's ends, on the layout's coloraxis].

    Each token's colour is the scale's colour at its value, computed here: bars coloured through a coloraxis made
    Plotly read each value as a colour for the text drawn on it (a warning per bar, most of the figure's drawing in
    the browser; issue 60, the "On the text" tab, `python -m benchmarks latency`)."""
    v = np.asarray(values, dtype=np.float32)
    T = len(v)
    texts = escaped(labels)
    line, start, width = text_layout(labels, width_chars)
    shown = np.arange(T) <= (T - 1 if visible is None else visible)
    axis = color_axis(scale, text=True)
    if scale == "max":
        axis["cmax"] = float(v[shown].max()) if shown.any() and v[shown].max() > 0 else 1.0
    axis["colorbar"].update(colorbar_on_top(value_name, y=1.0, length=0.4))
    at = np.clip(np.nan_to_num(v / (axis["cmax"] or 1.0)), 0.0, 1.0)  # each value's place on the scale (cmin is 0)
    dark = dark_cells(at, axis["colorscale"], lambda t: t > 0.55)  # white letters on dark cells
    scale_list = axis["colorscale"]
    if isinstance(scale_list, str):
        scale_list = pcolors.get_colorscale(scale_list)
    colours = pcolors.sample_colorscale([[float(p), c] for p, c in scale_list], at.tolist()) if T else []

    def bars(mask, colored):
        idx = np.nonzero(mask)[0]
        custom = np.stack([idx, np.array(texts, dtype=object)[idx], v[idx]], axis=1) if len(idx) else None
        return go.Bar(
            y=line[idx],
            x=width[idx] - 0.15,
            base=start[idx],
            orientation="h",
            width=0.82,
            text=[texts[i] for i in idx],
            textposition="inside",
            insidetextanchor="middle",
            textangle=0,
            insidetextfont=dict(MONO, color=["white" if colored and dark[i] else "#222" for i in idx]),
            marker=dict(
                color=[colours[i] for i in idx] if colored else MASKED_COLOR,
                line=dict(color=[HIGHLIGHT if i == query else "rgba(0,0,0,0)" for i in idx], width=2.5),
            ),
            customdata=custom,
            name=value_name if colored else "cannot be seen",
            hovertemplate=(
                f"position %{{customdata[0]}} '%{{customdata[1]}}'<br>{value_name} "
                "%{customdata[2]:.3f}<extra></extra>"
            )
            if colored
            else "position %{customdata[0]} '%{customdata[1]}'<br>after the query: it cannot look here<extra></extra>",
        )

    traces = [bars(shown, True)] + ([bars(~shown, False)] if (~shown).any() else [])
    carrier = go.Scatter(
        x=[-0.5, -0.5],
        y=[0, 0],
        mode="markers",
        marker=dict(color=[0.0, axis["cmax"]], coloraxis="coloraxis", opacity=0),
        hoverinfo="skip",
        name="colour scale",
    )
    fig = go.Figure(traces + [carrier])
    n_lines = int(line.max()) + 1 if T else 1
    fig.update_xaxes(visible=False, range=[-0.5, width_chars + 0.5], fixedrange=True)
    fig.update_yaxes(visible=False, range=[n_lines - 0.5, -0.5], fixedrange=True)
    apply_layout(
        fig,
        title=title,
        height=int(60 + 30 * n_lines + (40 if title else 0)),
        coloraxis=axis,
        showlegend=False,
        bargap=0,
        uniformtext=dict(minsize=8, mode="show"),
    )
    return reserve_margins(fig, t=TOP_SHORT_BAR_ROOM)  # the colour bar above the text (common.reserve_margins)


def _signed_heatmap(z, *, x_text=None, y_text=None, name: str, text: bool = False, **kwargs) -> go.Heatmap:
    """A diverging heatmap centred on 0 for one step's vector or matrix (its own scale, no colour bar). Its rows and
    columns are the categories `y_text` and `x_text`, which the hover reads (%{y}, %{x}), unless `x` and `y` are
    given (axes with ticks of their own): then a [rows, cols, 2] customdata holds the texts. A pair of strings per
    cell made a d_model-wide input the bulk of the figure, to build, send and parse (issue 60, the "Inside the head"
    tab, timed by `python -m benchmarks latency`)."""
    z = np.atleast_2d(np.asarray(z, dtype=np.float32))
    finite = np.abs(z[np.isfinite(z)])
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    rows, cols = z.shape
    y_text = list(y_text) if y_text is not None else [str(r) for r in range(rows)]
    x_text = list(x_text) if x_text is not None else [str(c) for c in range(cols)]
    if "x" in kwargs or "y" in kwargs:
        custom = np.empty((rows, cols, 2), dtype=object)
        custom[..., 0] = np.array(y_text, dtype=object)[:, None]
        custom[..., 1] = np.array(x_text, dtype=object)[None, :]
        where = dict(customdata=custom)
        cell = "%{customdata[0]}, %{customdata[1]}"
    else:
        where = dict(x=x_text, y=y_text)
        cell = "%{y}, %{x}"
    return go.Heatmap(
        z=z,
        zmin=-top,
        zmax=top,
        zmid=0,
        colorscale=diverging(DIVERGING_SCALE),
        showscale=False,
        name=name,
        hoverongaps=False,
        texttemplate="%{z:.2f}" if text else None,
        textfont=dict(size=10),
        hovertemplate=f"{name}<br>{cell}: %{{z:.4f}}<extra></extra>",
        **where,
        **kwargs,
    )


def head_steps_figure(steps, labels: list[str], *, title: str | None = None) -> go.Figure:
    """One head's computation for one query with the real numbers and the shape of each step: the input x, the
    head's query, keys and values, q·kᵀ, the 1/√d_head scale, the causal mask, softmax, the weighted sum z and
    the output projection back into the residual stream. `steps`: a gptviz.methods.head_steps.HeadSteps."""
    T, C = steps.x.shape
    dh, qi = steps.q.shape[0], steps.query
    texts = escaped(labels)
    seen = [f"{j} '{texts[j]}'" for j in range(qi + 1)]
    every = [f"{j} '{texts[j]}'" for j in range(T)]
    dims = [f"dim {d}" for d in range(dh)]
    what = "ln_1's output" if steps.norm == "pre" else "the residual stream (post-norm normalises after)"
    titles = (
        f"1 · input x: {what} [{T} × {C}]",
        f"2 · q = x[{qi}] W_Q + b [1 × {dh}]",
        f"3 · K = x[0..{qi}] W_K + b [{qi + 1} × {dh}]",
        f"4 · V = x[0..{qi}] W_V + b [{qi + 1} × {dh}]",
        f"5 · scores for query {qi}: q·kᵀ, × 1/√{dh} = {steps.scale:.4f}, causal mask, softmax [4 × {T}]",
        f"6 · z = Σ weightⱼ vⱼ [1 × {dh}]",
        f"7 · z W_O: this head's write to the residual stream [1 × {C}]",
    )
    # the panels' domains and titles from make_subplots; the traces, axes, shape and note set once as plain dicts
    # (added and updated one by one, Plotly validated the growing figure each time; issue 60, the "Inside the head"
    # tab in `python -m benchmarks latency`)
    grid = make_subplots(
        rows=4,
        cols=3,
        specs=[[{"colspan": 3}, None, None], [{}, {}, {}], [{"colspan": 3}, None, None], [{}, {"colspan": 2}, None]],
        subplot_titles=titles,
        vertical_spacing=0.09,
        horizontal_spacing=0.06,
        row_heights=[0.3, 0.25, 0.22, 0.1],
    )
    layout = grid.layout.to_plotly_json()

    def axes(row: int, col: int) -> dict:
        panel = grid.get_subplot(row, col)
        return dict(
            xaxis=panel.xaxis.plotly_name.replace("axis", ""), yaxis=panel.yaxis.plotly_name.replace("axis", "")
        )

    table = np.full((3, T), np.nan, dtype=np.float32)
    table[0, : qi + 1] = steps.dots
    table[1, : qi + 1] = steps.scores
    masked = np.asarray(steps.masked, dtype=np.float32)
    table[2] = np.where(np.isfinite(masked), masked, np.nan)
    row_names = ["q·kᵀ", f"× 1/√{dh}", "causal mask", "softmax"]
    small = T <= 40
    weights = np.full((1, T), np.nan, dtype=np.float32)
    weights[0, : qi + 1] = steps.weights
    scores = axes(3, 1)
    traces = [
        _signed_heatmap(steps.x, y_text=every, x_text=[f"dim {d}" for d in range(C)], name="x", **axes(1, 1)),
        _signed_heatmap(steps.q[None], y_text=[f"query {qi}"], x_text=dims, name="q", **axes(2, 1)),
        _signed_heatmap(steps.k, y_text=seen, x_text=dims, name="k", **axes(2, 2)),
        _signed_heatmap(steps.v, y_text=seen, x_text=dims, name="v", **axes(2, 3)),
        _signed_heatmap(
            table, y_text=row_names[:3], x_text=every, name="score", text=small, y=[0, 1, 2], x=np.arange(T), **scores
        ),
        go.Heatmap(
            z=weights,
            x=np.arange(T),
            y=[3],
            zmin=0,
            zmax=1,
            colorscale=sequential("Blues"),
            showscale=False,
            name="softmax",
            texttemplate="%{z:.2f}" if small else None,
            textfont=dict(size=10),
            customdata=np.array([every], dtype=object),
            hoverongaps=False,
            hovertemplate="softmax<br>key %{customdata}: %{z:.4f}<extra></extra>",
            **scores,
        ),
        _signed_heatmap(steps.z[None], y_text=["z"], x_text=dims, name="z", **axes(4, 1)),
        _signed_heatmap(
            steps.out[None], y_text=["head output"], x_text=[f"dim {d}" for d in range(C)], name="z W_O", **axes(4, 2)
        ),
    ]
    for name, axis in layout.items():
        if name.startswith("yaxis"):
            axis.update(autorange="reversed", showticklabels=False)
        elif name.startswith("xaxis"):
            axis.update(showticklabels=False)
    score_x, score_y = (scores[a].replace(a[0], a[0] + "axis") for a in ("xaxis", "yaxis"))
    layout[score_y].update(showticklabels=True, tickmode="array", tickvals=[0, 1, 2, 3], ticktext=row_names)
    step = max(1, -(-T // 32))
    layout[score_x].update(
        showticklabels=True,
        tickmode="array",
        tickvals=list(range(0, T, step)),
        ticktext=[texts[j] for j in range(0, T, step)],
        tickangle=-60,
        tickfont=dict(size=10),
    )
    for note in layout["annotations"]:
        note["font"] = dict(note.get("font", {}), size=12)
    if qi + 1 < T:  # the masked keys: -inf before the softmax, weight exactly 0 after
        where = dict(xref=scores["xaxis"], yref=scores["yaxis"])
        layout["shapes"] = [
            dict(
                type="rect",
                x0=qi + 0.5,
                x1=T - 0.5,
                y0=1.5,
                y1=3.5,
                fillcolor=MASKED_COLOR,
                opacity=0.9,
                line=dict(width=0),
                layer="above",
                **where,
            )
        ]
        layout["annotations"].append(
            dict(
                x=(qi + T) / 2,
                y=2.5,
                text="−∞ before softmax → weight 0",
                showarrow=False,
                font=dict(size=12, color="#555"),
                **where,
            )
        )
    fig = go.Figure(data=traces, layout=layout)
    apply_layout(fig, title=title, height=900)
    return reserve_margins(fig, l=label_px(row_names) + LABEL_PAD)  # the score table's row names


def neuron_view(steps, key: int, labels: list[str], *, title: str | None = None) -> go.Figure:
    """BertViz's neuron view for one query/key pair: q, k and their element-wise product, whose sum times
    1/√d_head is the score before the softmax. The title carries the sum, so the arithmetic is on screen."""
    if not 0 <= key <= steps.query:
        raise ValueError(f"key {key} is not one query {steps.query} can see (0..{steps.query})")
    q, k = np.asarray(steps.q, dtype=np.float32), np.asarray(steps.k[key], dtype=np.float32)
    product = q * k
    dh = len(q)
    texts = escaped(labels)
    rows = [f"q (query {steps.query} '{texts[steps.query]}')", f"k (key {key} '{texts[key]}')", "q ⊙ k"]
    fig = go.Figure(
        _signed_heatmap(
            np.stack([q, k, product]),
            y_text=rows,
            x_text=[f"dim {d}" for d in range(dh)],
            name="neuron view",
            text=dh <= 32,
            x=np.arange(dh),
            y=[0, 1, 2],
        )
    )
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=[0, 1, 2], ticktext=rows)
    fig.update_xaxes(title_text="dimension of the head", dtick=1 if dh <= 32 else 8)
    total = float(product.sum())
    sub = (
        f"Σ q⊙k = {total:.4f}; × 1/√{dh} = {total / math.sqrt(dh):.4f}, the score "
        f"(weight after softmax: {float(steps.weights[key]):.4f})"
    )
    apply_layout(fig, title=f"{title}<br><sup>{sub}</sup>" if title else sub, height=270)
    # the row names, and the dimensions' numbers with their title (common.reserve_margins)
    return reserve_margins(fig, l=label_px(rows) + LABEL_PAD, b=13 + LABEL_PAD + AXIS_TITLE_ROOM, r=16)
