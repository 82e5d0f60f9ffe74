"""The attribution graph (gptviz.methods.graph) and the QK decomposition (gptviz.methods.graph_qk) as Plotly figures.

The graph: the prompt's positions left to right, the stream's writers bottom to top (embeddings, then each layer's
heads and MLP neurons, the metric on top), node size by |influence|, edge width by |weight|, red pushing the metric
up and blue down (as in the Why page's other figures). Nodes that share a position and a row sit in a small grid in
their cell, largest first, so none hides another. Data in, go.Figure out; token text escaped for Plotly.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go

from .common import ANNOTATION_MIN_WIDTH, DIVERGING_SCALE, apply_layout, escaped, rows_axis, segments_trace
from .palette import diverging
from .why import NEGATIVE, POSITIVE, sign_colours  # noqa: F401 (POSITIVE, NEGATIVE: the standard look's, read by tests)

SYMBOLS = {"embeddings": "square", "head": "circle", "neuron": "diamond", "bias": "triangle-up", "metric": "star"}
KIND_NAMES = {
    "embeddings": "embeddings (token + position)",
    "head": "head",
    "neuron": "MLP neuron",
    "bias": "bias (a constant)",
    "metric": "the metric",
}
SMALLEST, LARGEST, METRIC_SIZE = 6.0, 22.0, 18.0  # marker diameters, px
# a cell's nodes fill up to 2 rows within 0.6 of its row: a row is about 38 px high, so a third row put nodes' centres
# 7 px apart, and a click on the largest head opened its neighbour's page
SUB_ROWS, ROW_BAND = 2, 0.6
MIN_SLOTS = 2  # a position's column: at least 2 node widths, more for a full cell
LABEL_PX = 16  # px between two tokens' labels at -60 degrees (a 13 px line)
PLOT_SIDES_PX = 95  # the figure's width less its plot's: the row names and margins
EDGE_BINS = (0.1, 0.25, 0.5, 0.75)  # |weight| / the largest, drawn in five widths (one trace each)
EDGE_WIDTHS = (0.6, 1.2, 2.2, 3.5, 5.0)
ATTN_BIASES, MLP_BIASES = ("attn.out-bias", "ln_1.beta"), ("mlp.out-bias", "ln_2.beta")


def _get(item, name):
    return item[name] if isinstance(item, dict) else getattr(item, name)


def node_row(node, n_layers: int) -> int:
    """The node's row: 0 embeddings, 1 + 2l layer l's heads (and attention bias), 2 + 2l its MLP, 2L + 1 the metric."""
    kind, layer = _get(node, "kind"), _get(node, "layer")
    if kind == "embeddings":
        return 0
    if kind == "metric":
        return 2 * n_layers + 1
    if kind == "head" or (kind == "bias" and _get(node, "id").split(".", 1)[1].split("@")[0] in ATTN_BIASES):
        return 1 + 2 * layer
    return 2 + 2 * layer


class Layout(NamedTuple):
    places: dict  # node id -> (x, y)
    centres: list[float]  # each position's column centre (x)
    slots: float  # the columns' width together, in node widths (the x range is half a slot wider each side)


def node_layout(nodes, n_layers: int, T: int) -> Layout:
    """Where each node sits: its position's column, its row; nodes sharing a cell in a grid of up to SUB_ROWS rows,
    the largest |influence| first. A column is as many node widths wide as its fullest cell needs (at least
    MIN_SLOTS), so the last position's dozens of nodes get room and an empty position little."""
    cells: dict[tuple[int, int], list] = {}
    for n in nodes:
        cells.setdefault((_get(n, "position"), node_row(n, n_layers)), []).append(n)
    width = [MIN_SLOTS] * T
    for (p, _), members in cells.items():
        if 0 <= p < T:
            width[p] = max(width[p], math.ceil(len(members) / SUB_ROWS) + 1)
    edges = np.concatenate([[0.0], np.cumsum(width)])
    centres = ((edges[:-1] + edges[1:]) / 2).tolist()
    places = {}
    for (p, y), members in cells.items():
        members.sort(key=lambda n: -abs(_get(n, "influence")))
        rows = min(SUB_ROWS, len(members))
        cols = math.ceil(len(members) / rows)
        x = centres[p] if 0 <= p < T else float(p)
        for i, n in enumerate(members):
            c, r = divmod(i, rows)  # down a column first: the largest nodes sit together on the left
            dx = c - (cols - 1) / 2
            dy = (r - (rows - 1) / 2) * (ROW_BAND / rows) if rows > 1 else 0.0
            places[_get(n, "id")] = (x + dx, y - dy)
    return Layout(places, centres, float(edges[-1]))


def label_min_widths(centres: list[float], slots: float, priority: list[float]) -> list[int]:
    """For each token's label, the figure width (px) below which it hides so that no two shown labels come closer
    than LABEL_PX: labels placed by priority (largest first), each hidden wherever a label placed before it is
    too close (a width that keeps every higher-priority label it could touch far enough)."""
    order = sorted(range(len(centres)), key=lambda i: -priority[i])
    widths = [0] * len(centres)
    placed: list[int] = []
    for i in order:
        need = 0.0
        for j in placed:
            gap = abs(centres[i] - centres[j])
            need = max(need, PLOT_SIDES_PX + LABEL_PX * (slots + 1) / gap if gap else float("inf"))
        widths[i] = 0 if not placed else int(math.ceil(need))
        placed.append(i)
    return widths


def describe(node, tokens: list[str]) -> str:
    """What a node is, in words, with its token (escaped for Plotly)."""
    kind, layer, index, p = (_get(node, k) for k in ("kind", "layer", "index", "position"))
    at = f"'{tokens[p]}' (position {p})" if 0 <= p < len(tokens) else f"position {p}"
    if kind == "embeddings":
        return f"token + position embedding of {at}"
    if kind == "head":
        return f"head {index} of layer {layer} at {at}"
    if kind == "neuron":
        return f"neuron {index} of layer {layer}'s MLP at {at}"
    if kind == "bias":
        return f"layer {layer}'s {_get(node, 'id').split('.', 1)[1].split('@')[0]} at {at}"
    return f"the metric at {at}"


def node_unit(node) -> str:
    """A head's or neuron's unit id ("L1H0"), else ""."""
    node_id = _get(node, "id")
    return node_id.split("@")[0] if _get(node, "kind") in ("head", "neuron") else ""


def graph_figure(
    graph, tokens: list[str], *, n_layers: int, title: str | None = None, height: int | None = None
) -> go.Figure:
    """`graph`: anything with .nodes, .edges and .metric (an AttributionGraph; nodes with id, kind, layer, index,
    position, influence, direct and ablation). Hover names each node with its influence, its share of the metric,
    its direct effect and, where checked, its ablation; a node's customdata is [id, words, influence, direct, share,
    unit, ablation line]. The tokens are annotations under their columns, each hidden below the figure width at
    which it would touch a more influential position's (layout.meta's annotation_min_width)."""
    texts = escaped(tokens)
    T = len(tokens)
    layout = node_layout(graph.nodes, n_layers, T)
    fig = go.Figure()
    _add_edges(fig, graph.edges, layout.places)
    top = max([abs(_get(n, "influence")) for n in graph.nodes if _get(n, "kind") != "metric"] or [1.0]) or 1.0
    for kind in ("embeddings", "bias", "neuron", "head", "metric"):
        members = [n for n in graph.nodes if _get(n, "kind") == kind]
        if members:
            fig.add_trace(_node_trace(kind, members, layout.places, texts, top, graph.metric))
    weight = [0.0] * T
    for n in graph.nodes:
        if 0 <= _get(n, "position") < T and _get(n, "kind") != "metric":
            weight[_get(n, "position")] += abs(_get(n, "influence"))
    weight[-1] = float("inf")  # the position whose next token is explained: always labelled
    widths = label_min_widths(layout.centres, layout.slots, weight)
    # one update for all (add_annotation validates the whole list again each time: quadratic in the tokens)
    fig.update_layout(
        annotations=[
            dict(
                x=x,
                y=0,
                xref="x",
                yref="paper",
                text=text,
                showarrow=False,
                textangle=-60,
                xanchor="right",
                yanchor="top",
                yshift=-4,
                font=dict(size=11),
            )
            for x, text in zip(layout.centres, texts, strict=True)
        ]
    )
    rows = 2 * n_layers + 2
    fig.update_xaxes(range=[-0.5, layout.slots + 0.5], showticklabels=False, showgrid=False, zeroline=False)
    fig.update_yaxes(**rows_axis(row_names(n_layers), pad=0.6))
    apply_layout(
        fig,
        title=title,
        height=height or int(min(1000, max(400, 38 * rows + 170))),
        plot_bgcolor="white",
        hovermode="closest",
        clickmode="event+select",
        meta={ANNOTATION_MIN_WIDTH: widths},
        showlegend=False,
    )
    # no legend: on a phone its five entries stood in five lines over the title (the pages and the notebook say the key)
    fig.update_layout(margin=dict(b=80))
    return fig


def _node_trace(kind: str, members: list, places: dict, texts: list[str], top: float, metric: float) -> go.Scatter:
    infl = np.array([_get(n, "influence") for n in members], dtype=float)
    up, down = sign_colours()
    sizes = (
        np.full(len(members), METRIC_SIZE)
        if kind == "metric"
        else SMALLEST + (LARGEST - SMALLEST) * np.sqrt(np.abs(infl) / top)
    )
    return go.Scatter(
        x=[places[_get(n, "id")][0] for n in members],
        y=[places[_get(n, "id")][1] for n in members],
        mode="markers",
        name=KIND_NAMES[kind],
        marker=dict(
            symbol=SYMBOLS[kind],
            size=sizes.tolist(),
            opacity=0.9,
            line=dict(color="#222", width=0.6),
            color=["#333" if kind == "metric" else up if v >= 0 else down for v in infl],
        ),
        customdata=[
            [
                _get(n, "id"),
                describe(n, texts),
                v,
                _get(n, "direct"),
                v / metric if metric else float("nan"),
                node_unit(n),
                _ablation_line(n, kind),
            ]
            for n, v in zip(members, infl, strict=True)
        ],
        hovertemplate=(
            "<b>%{customdata[0]}</b>: %{customdata[1]}<br>"
            + (
                "value %{customdata[2]:+.3f}"
                if kind == "metric"
                else "influence %{customdata[2]:+.3f} (%{customdata[4]:+.0%} of the metric)"
            )
            + "<br>direct effect %{customdata[3]:+.3f}%{customdata[6]}"
            + ("<br>click: what this unit does" if kind in ("head", "neuron") else "")
            + "<extra></extra>"
        ),
    )


def row_names(n_layers: int) -> list[str]:
    return ["embeddings"] + [n for layer in range(n_layers) for n in (f"L{layer} heads", f"L{layer} MLP")] + ["metric"]


def _ablation_line(node, kind: str) -> str:
    ablation = None if kind == "metric" else _get(node, "ablation")
    if ablation is None:
        return ""
    predicted, actual = _get(ablation, "predicted"), _get(ablation, "actual")
    return f"<br>removed: predicted {predicted:+.3f}, actual {actual:+.3f}"


def _add_edges(fig: go.Figure, edges, places) -> None:
    """Edges as lines, one trace per sign and width bin (a few traces however many edges: fast to draw)."""
    edges = [e for e in edges if _get(e, "source") in places and _get(e, "target") in places]
    if not edges:
        return
    weights = np.array([_get(e, "weight") for e in edges], dtype=float)
    top = float(np.abs(weights).max()) or 1.0
    bins = np.digitize(np.abs(weights) / top, EDGE_BINS)
    for sign, color in zip((1, -1), sign_colours(), strict=True):
        for b, width in enumerate(EDGE_WIDTHS):
            segments = [
                (*places[_get(e, "source")], *places[_get(e, "target")])
                for e, w, eb in zip(edges, weights, bins, strict=True)
                if eb == b and (w >= 0) == (sign > 0)
            ]
            trace = segments_trace(segments, color, width, opacity=0.25 + 0.1 * b)
            if trace is not None:
                fig.add_trace(trace)


def clicked_node(selection) -> tuple[str, str] | None:
    """(node id, unit id or "") of the node a Streamlit plotly selection picked, or None (its customdata may arrive
    as a list or as a dict keyed by index)."""
    try:
        points = selection["selection"]["points"] if "selection" in selection else selection["points"]
    except (KeyError, TypeError):
        return None
    for point in points or []:
        custom = point.get("customdata") if isinstance(point, dict) else None
        if isinstance(custom, dict):
            custom = [custom.get(i, custom.get(str(i))) for i in range(6)]
        if isinstance(custom, (list, tuple)) and len(custom) >= 6 and isinstance(custom[0], str):
            return custom[0], custom[5] if isinstance(custom[5], str) else ""
    return None


# ---- the QK decomposition --------------------------------------------------------------------------------------


def top_sources(terms: np.ndarray, n: int) -> tuple[list[int], list[int]]:
    """The query sources (rows) and key sources (columns) of the n largest terms by size, in the model's order."""
    order = np.argsort(-np.abs(terms), axis=None)[:n]
    rows, cols = np.unravel_index(order, terms.shape)
    return sorted(set(rows.tolist())), sorted(set(cols.tolist()))


def qk_figure(qk, query_label: str, key_label: str, *, top: int = 8, title: str | None = None) -> go.Figure:
    """The top terms' query sources x key sources as a heatmap, each cell's term written in it (signed, centred
    on 0); `qk` a QKDecomposition, the labels its two tokens' text."""
    terms = np.asarray(qk.terms, dtype=float)
    rows, cols = top_sources(terms, top)
    z = terms[np.ix_(rows, cols)]
    span = float(np.abs(z).max()) or 1.0
    q_names = [qk.query_sources[i] for i in rows]
    k_names = [qk.key_sources[j] for j in cols]
    q, k = escaped([query_label, key_label])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=k_names,
            y=q_names,
            colorscale=diverging(DIVERGING_SCALE),
            zmid=0,
            zmin=-span,
            zmax=span,
            texttemplate="%{z:+.2f}",
            colorbar=dict(title=dict(text="term", side="right"), thickness=12),
            hovertemplate=f"query side: %{{y}} at '{q}'<br>key side: %{{x}} at '{k}'<br>term %{{z:+.3f}} of a score of "
            f"{qk.score:+.3f}<extra></extra>",
        )
    )
    # short axis titles: a long one ran up past a three-row plot into the figure's title (the tokens are in the hover)
    fig.update_xaxes(title_text=f"key side, position {qk.key}", tickangle=-45, type="category")
    fig.update_yaxes(title_text=f"query side, {qk.query}", type="category", autorange="reversed")
    return apply_layout(fig, title=title, height=int(max(320, 40 * len(rows) + 210)))


def source_words(source: str, token: str) -> str:
    """A QK source in words, at its token: "L0H2's output at 'the'"."""
    if source == "embeddings":
        return f"the token + position embedding at '{token}'"
    if source in ("query bias", "key bias"):
        return f"the {source}"
    if source == "norm bias":
        return f"the norms' biases at '{token}'"
    if source.endswith(" MLP"):
        return f"{source}'s output at '{token}'"
    if source.endswith(" attn bias"):
        return f"{source.split()[0]}'s attention bias at '{token}'"
    return f"{source}'s output at '{token}'"


def qk_sentence(qk, query_token: str, key_token: str) -> str:
    """One sentence from the numbers: the largest term, as a share of the score where that share means something (the
    same sign, no larger than the score), else beside the score. Plain text: the page shows it escaped."""
    a, b, term = qk.top_terms(1)[0]
    pair = f"{source_words(a, query_token)} meets {source_words(b, key_token)}"
    if qk.score != 0 and term * qk.score > 0 and abs(term) <= abs(qk.score):
        return f"{term / qk.score:.0%} of the score ({qk.score:+.2f}): {pair} ({term:+.2f})."
    if term * qk.score > 0:
        return (
            f"The largest term, {term:+.2f}, is more than the whole score ({qk.score:+.2f}): {pair}; other terms "
            "pull the other way."
        )
    return (
        f"The largest term, {term:+.2f}, works against the score ({qk.score:+.2f}): {pair}; the other terms "
        "outweigh it."
    )
