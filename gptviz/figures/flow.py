"""The information-flow graph (gptviz.methods.flow) as a Plotly figure: tokens along x, the residual stream rising
through each layer's attention and MLP along y, one line per kept edge, thicker for a larger share."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .common import apply_layout, escaped, legend_on_top_room, rows_axis, segments_trace, token_axis

COLORS = {"attention": "#2f6db5", "residual": "#9a9a9a", "mlp": "#e07b22"}
NAMES = {
    "attention": "attention (key's stream → query)",
    "residual": "residual (the skip, with self-attention)",
    "mlp": "MLP (its output into the stream)",
}
# The skip into an attention sum carries the token's attention to itself too: the tool's graph has one edge there.
HOVER = {
    "attention": "a query reads a key's stream",
    "residual": "the skip (into attention: with the token's attention to itself)",
    "mlp": "the MLP's output",
}
WIDTH_BINS = (0.1, 0.25, 0.5, 0.75)  # importances are drawn in five line widths (one trace each: fast to draw)
WIDTHS = (1.0, 2.0, 3.5, 5.5, 8.0)
MLP_DX = 0.3  # the MLP's node sits beside its position's stream


def _level(layer: int, sublayer: str, after: bool) -> float:
    """y of the stream: 2l before layer l, 2l + 1 after its attention, 2l + 2 after its MLP."""
    return 2 * layer + (1 if sublayer == "attn" else 2) if after else 2 * layer + (0 if sublayer == "attn" else 1)


def _segments(edge) -> list[tuple[float, float, float, float]]:
    """Line segments (x0, y0, x1, y1) drawing one edge."""
    y0, y1 = _level(edge.layer, edge.sublayer, False), _level(edge.layer, edge.sublayer, True)
    if edge.kind == "mlp":
        x, ym = edge.target + MLP_DX, (y0 + y1) / 2
        return [(edge.source, y0, x, ym), (x, ym, edge.target, y1)]
    return [(edge.source, y0, edge.target, y1)]


def flow_figure(
    graph, labels: list[str], *, n_heads: int, title: str | None = None, height: int | None = None
) -> go.Figure:
    """Kept edges as lines (colour: kind; width: importance), each with a hover point at its middle naming both
    tokens, the layer, the share and (attention) the head that writes most along it beside an even split's
    share, 1 / n_heads; nodes where the graph reaches the stream."""
    texts = escaped(labels)
    fig = go.Figure()
    bins = np.digitize([e.importance for e in graph.edges], WIDTH_BINS)
    for kind in ("residual", "mlp", "attention"):
        for b, width in enumerate(WIDTHS):
            segments = [
                s
                for edge, eb in zip(graph.edges, bins, strict=True)
                if edge.kind == kind and eb == b
                for s in _segments(edge)
            ]
            trace = segments_trace(segments, COLORS[kind], width, legendgroup=kind)
            if trace is not None:
                fig.add_trace(trace)
        mids = [(e, _segments(e)[0]) for e in graph.edges if e.kind == kind]
        if kind == "mlp":
            mids = [(e, (s[2], s[3], s[2], s[3])) for e, s in mids]  # the MLP's own node
        fig.add_trace(
            go.Scatter(
                x=[(s[0] + s[2]) / 2 for _, s in mids],
                y=[(s[1] + s[3]) / 2 for _, s in mids],
                mode="markers",
                marker=dict(
                    color=COLORS[kind],
                    size=[9 if kind == "mlp" else 6 for _ in mids],
                    symbol="square" if kind == "mlp" else "circle",
                    opacity=1 if kind == "mlp" else 0.35,
                ),
                name=NAMES[kind],
                legendgroup=kind,
                customdata=[
                    [
                        e.layer,
                        "attention" if e.sublayer == "attn" else "MLP",
                        f"'{texts[e.source]}'",
                        e.source,
                        f"'{texts[e.target]}'",
                        e.target,
                        e.importance,
                        f"<br>largest head write: head {e.head}, {e.head_share:.0%} of the heads' "
                        f"({1 / n_heads:.0%} if even)"
                        if e.head >= 0
                        else "",
                    ]
                    for e, _ in mids
                ],
                hovertemplate=f"layer %{{customdata[0]}} %{{customdata[1]}}: {HOVER[kind]}<br>from %{{customdata[2]}} "
                "(position %{customdata[3]}) to %{customdata[4]} (position %{customdata[5]})"
                "<br>%{customdata[6]:.1%} of the sum%{customdata[7]}<extra></extra>",
            )
        )
    nodes = sorted(
        {(e.source, _level(e.layer, e.sublayer, False)) for e in graph.edges}
        | {(e.target, _level(e.layer, e.sublayer, True)) for e in graph.edges}
    )
    fig.add_trace(
        go.Scatter(
            x=[n[0] for n in nodes],
            y=[n[1] for n in nodes],
            mode="markers",
            showlegend=False,
            marker=dict(color="#333", size=5),
            customdata=[f"'{texts[n[0]]}'" for n in nodes],
            hovertemplate="%{customdata} (position %{x})<extra></extra>",
        )
    )
    L = graph.n_layers
    names = ["embeddings"] + [n for layer in range(L) for n in (f"L{layer} attention", f"L{layer} MLP")]
    fig.update_xaxes(
        title_text="position (prompt token)",
        tickangle=-60,
        range=[-0.7, graph.n_tokens - 0.3],
        showgrid=False,
        zeroline=False,
        **token_axis(texts, max_ticks=48),
    )
    fig.update_yaxes(title_text="residual stream after", **rows_axis(names, pad=0.5))
    apply_layout(
        fig,
        title=title,
        height=height or int(min(900, max(380, 34 * 2 * L + 220))),
        plot_bgcolor="white",
        hovermode="closest",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0),
    )
    fig.update_layout(margin=dict(t=legend_on_top_room(title)))
    return fig
