"""Generation figures: the next-token distribution of one step (with the sampled token and the
top-k/top-p cut-off), the attention rows of the generating queries growing one row per token, one step's
attention across heads, and per-step probability/entropy. Data in, go.Figure out; no Streamlit, no I/O.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .attention import HIGHLIGHT, OUT_OF_WINDOW_COLOR, color_axis, masked_trace, query_key_axes
from .common import (
    MASKED_COLOR,
    apply_layout,
    distinct_percent_format,
    escaped,
    legend_on_top_room,
    plotly_text,
    token_axis,
    token_categories,
    token_category_axis,
)

KEPT_COLOR = "#3a78b5"
CUT_COLOR = "#c9c9c9"
SAMPLED_COLOR = HIGHLIGHT


def next_token_bars(
    ids,
    probs,
    allowed,
    labels: list[str],
    *,
    sampled_id: int,
    sampled_rank: int,
    sampled_prob: float,
    sampled_label: str,
    n_allowed: int,
    kept_mass: float,
    title: str | None = None,
    height: int | None = None,
    cut_by: str = "top-k/top-p",
) -> go.Figure:
    """The most probable next tokens (probabilities over the full vocabulary, after temperature), most
    probable at the top. Kept: blue; cut (by `cut_by`: top-k/top-p, or greedy decoding): grey; the sampled
    token: orange. A dashed line marks the cut-off when it falls among the bars shown."""
    probs = np.asarray(probs, dtype=np.float64)
    n = len(probs)
    ranks = np.arange(1, n + 1)
    texts = escaped(labels)
    colors = [
        SAMPLED_COLOR if int(i) == sampled_id else (KEPT_COLOR if ok else CUT_COLOR)
        for i, ok in zip(ids, allowed, strict=True)
    ]
    renorm = [p / kept_mass if ok and kept_mass > 0 else 0.0 for p, ok in zip(probs, allowed, strict=True)]
    status = [
        "sampled" if int(i) == sampled_id else ("kept" if ok else f"cut by {cut_by}")
        for i, ok in zip(ids, allowed, strict=True)
    ]
    custom = np.array(
        [[f"'{t}'", int(i), s, r, k] for t, i, s, r, k in zip(texts, ids, status, renorm, ranks, strict=True)],
        dtype=object,
    )
    fig = go.Figure(
        go.Bar(
            x=probs,
            y=ranks,
            orientation="h",
            marker_color=colors,
            customdata=custom,
            name="probability",
            hovertemplate="rank %{customdata[4]}: %{customdata[0]} (id %{customdata[1]})<br>p = %{x:.4g}"
            "<br>%{customdata[2]}; %{customdata[3]:.4g} among the kept tokens<extra></extra>",
        )
    )
    fig.update_yaxes(
        autorange="reversed", tickfont_size=11, **token_axis(texts, max_ticks=n, start=1)
    )  # bars at ranks 1..n
    fig.update_xaxes(
        title_text="probability", rangemode="tozero", tickformat=distinct_percent_format(probs.max() if n else 1.0)
    )
    if n_allowed < n:
        fig.add_hline(y=n_allowed + 0.5, line=dict(color="#444", dash="dash", width=1.5))
        fig.add_annotation(
            x=1,
            xref="paper",
            y=n_allowed + 0.5,
            yanchor="middle",
            xanchor="right",
            showarrow=False,
            font=dict(size=11, color="#222"),
            bgcolor="rgba(255,255,255,0.9)",
            bordercolor="#444",
            borderwidth=1,
            borderpad=2,
            text=f"cut-off: {n_allowed:,} kept ({kept_mass:.1%} of the mass)",
        )
        cut_note = None
    else:
        cut_note = f"all {n} shown are kept<br>({n_allowed:,} kept in all, {kept_mass:.1%} of the mass)"
    notes = []
    if cut_note:
        notes.append(cut_note)
    if sampled_rank > n:
        notes.append(f"sampled '{plotly_text(sampled_label)}' at rank {sampled_rank:,} (p = {sampled_prob:.3g})")
    lines = sum(note.count("<br>") + 1 for note in notes)
    apply_layout(fig, title=title, height=(height or 22 * n + 110) + 16 * lines, bargap=0.2)
    if notes and title:
        # below the title as apply_layout placed it (a long title wraps to two lines: the notes go under both)
        fig.update_layout(
            title_subtitle=dict(text="<br>".join(notes), font=dict(size=11, color="#444")),
            margin=dict(t=fig.layout.margin.t + 16 * lines),
        )
    elif notes:
        fig.add_annotation(
            x=0,
            xref="paper",
            y=1,
            yref="paper",
            yanchor="bottom",
            xanchor="left",
            showarrow=False,
            align="left",
            font=dict(size=11, color="#444"),
            text="<br>".join(notes),
        )
        fig.update_layout(margin=dict(t=20 + 15 * lines))
    return fig


def generation_heatmap(
    rows,
    window_starts,
    labels: list[str],
    n_prompt: int,
    *,
    scale: str = "linear",
    highlight: int | None = None,
    title: str | None = None,
    height: int | None = None,
    hover_tokens: bool = True,
) -> go.Figure:
    """The attention row of each generating query, one row per new token (it grows while generating).
    rows[s] holds step s's weights over the keys window_starts[s] .. n_prompt - 1 + s (its own query
    position); labels cover every position (prompt then generated); `highlight` outlines one step's row.
    Traces: [weights, masked: future (grey) and keys that slid out of the context window (light grey)].
    `hover_tokens=False` leaves the tokens out of the hover (it shows the weight only): for a live view
    redrawn several times a second, where the per-cell texts would be most of the figure's cost."""
    S = len(rows)
    N = n_prompt + S - 1  # key positions that any generating query could see
    z = np.full((S, N), np.nan, dtype=np.float32)
    blank = np.full((S, N), np.nan, dtype=np.float32)
    for s, row in enumerate(rows):
        q = n_prompt - 1 + s
        w0 = int(window_starts[s])
        row = np.asarray(row, dtype=np.float32)
        z[s, w0 : q + 1] = row[: q + 1 - w0]
        blank[s, q + 1 :] = 1.0
        blank[s, :w0] = 0.0
    texts = escaped(labels)
    steps, keys = np.arange(S), np.arange(N)
    colors = [[0, OUT_OF_WINDOW_COLOR], [0.5, OUT_OF_WINDOW_COLOR], [0.5, MASKED_COLOR], [1, MASKED_COLOR]]
    masked = masked_trace(blank, keys, steps, colors, "not visible: a later token, or out of the context window")
    if hover_tokens:
        custom = np.empty((S, N, 5), dtype=object)
        custom[..., 0] = np.array([f"'{texts[n_prompt + s]}'" for s in range(S)], dtype=object)[:, None]
        custom[..., 1] = np.array([f"'{texts[n_prompt - 1 + s]}'" for s in range(S)], dtype=object)[:, None]
        custom[..., 2] = np.array([f"'{t}'" for t in texts[:N]], dtype=object)[None, :]
        custom[..., 3] = steps[:, None]
        custom[..., 4] = keys[None, :]
        hover = (
            "%{customdata[1]} → %{customdata[2]}: %{z:.3g}<br>step %{customdata[3]}: this query "
            "predicted %{customdata[0]}; key position %{customdata[4]}<extra></extra>"
        )
    else:
        custom, hover = None, "weight %{z:.3g}<extra></extra>"
    weights = go.Heatmap(
        z=z,
        x=keys,
        y=steps,
        customdata=custom,
        coloraxis="coloraxis",
        hoverongaps=False,
        name="weight",
        hovertemplate=hover,
    )
    fig = go.Figure([weights, masked])
    # the heatmap sits in three fifths of the page, about 300 px of plot: 48 angled labels ran into each other
    # (seen at 64 tokens + 30 generated), 24 fit
    query_key_axes(
        fig,
        "key position (prompt, then generated)",
        "generated token",
        token_axis(texts[:N], max_ticks=24),
        token_axis([texts[n_prompt + s] for s in range(S)], max_ticks=40),
        tick_size=10,
    )
    if 0 < n_prompt < N + 1:
        fig.add_vline(x=n_prompt - 0.5, line=dict(color=HIGHLIGHT, dash="dot", width=1.5))
    if highlight is not None and 0 <= highlight < S:
        q = n_prompt - 1 + highlight
        fig.add_shape(
            type="rect",
            x0=int(window_starts[highlight]) - 0.5,
            x1=q + 0.5,
            y0=highlight - 0.5,
            y1=highlight + 0.5,
            line=dict(color=HIGHLIGHT, width=2),
        )
    apply_layout(
        fig,
        title=title,
        height=height or int(min(620, max(260, 16 * S + 170))),
        coloraxis=color_axis(scale, z),
        plot_bgcolor="white",
    )
    return fig


def step_attention(
    weights,
    key_labels: list[str],
    *,
    window_start: int,
    query_label: str,
    predicted_label: str,
    row_titles: list[str],
    scale: str = "linear",
    title: str | None = None,
    height: int | None = None,
) -> go.Figure:
    """One generation step's attention: weights [rows, keys] (e.g. the heads of one layer), keys at
    positions window_start .. on an integer axis with token tick labels."""
    z = np.asarray(weights, dtype=np.float32)
    R, K = z.shape
    keys = np.arange(window_start, window_start + K)
    texts = escaped(key_labels)
    q = f"'{plotly_text(query_label)}'"
    custom = np.empty((R, K, 3), dtype=object)
    custom[..., 0] = np.array(row_titles, dtype=object)[:, None]
    custom[..., 1] = np.array([f"'{t}'" for t in texts], dtype=object)[None, :]
    custom[..., 2] = keys[None, :]
    names = token_categories(list(texts))
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=names,
            y=np.arange(R),
            customdata=custom,
            coloraxis="coloraxis",
            name="weight",
            hovertemplate="%{customdata[0]}: " + q + " → %{customdata[1]}: %{z:.3g}"
            f"<br>key position %{{customdata[2]}}; predicted '{plotly_text(predicted_label)}'"
            "<extra></extra>",
        )
    )
    # a category axis thins its own labels to the width drawn (a phone's 61 keys piled up as an array of ticks)
    fig.update_xaxes(
        title_text="key", tickangle=-60, tickfont_size=10, showgrid=False, zeroline=False, **token_category_axis(names)
    )
    fig.update_yaxes(
        autorange="reversed",
        tickmode="array",
        tickvals=list(range(R)),
        ticktext=row_titles,
        showgrid=False,
        zeroline=False,
    )
    return apply_layout(fig, title=title, height=height or int(min(520, 26 * R + 170)), coloraxis=color_axis(scale, z))


def step_curves(probs, entropies, labels: list[str], *, title: str | None = None, height: int = 300) -> go.Figure:
    """Per step: the sampled token's probability (left axis) and the entropy of the distribution it was
    drawn from, in nats (right axis)."""
    steps = np.arange(len(probs))
    texts = [f"'{t}'" for t in escaped(labels)]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for values, name, color, hover, right in (
        (probs, "p(sampled token)", SAMPLED_COLOR, "%{customdata} p = %{y:.3g}", False),
        (entropies, "entropy (nats)", KEPT_COLOR, "entropy %{y:.3f} nats", True),
    ):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=np.asarray(values, dtype=np.float64),
                mode="lines+markers",
                name=name,
                customdata=texts,
                line_color=color,
                hovertemplate=f"step %{{x}}: {hover}<extra></extra>",
            ),
            secondary_y=right,
        )
    fig.update_yaxes(title_text="p(sampled)", range=[0, 1.02], secondary_y=False)
    fig.update_yaxes(title_text="entropy (nats)", rangemode="tozero", secondary_y=True, showgrid=False)
    fig.update_xaxes(title_text="step", tickmode="auto")
    apply_layout(
        fig, title=title, height=height, legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1)
    )
    fig.update_layout(margin=dict(t=legend_on_top_room(title)))
    return fig
