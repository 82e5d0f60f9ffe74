"""The attribution graph's and the QK decomposition's figures (gptviz.figures.graph), on hand-made data: each node at
its position's column and its row, sizes growing with |influence|, edges as lines between the nodes they join,
hover numbers, tokens escaped and thinned so no two shown labels touch, and the sentence read from the numbers."""

from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch

from gptviz.figures import graph as figs
from gptviz.methods.graph_qk import QKDecomposition

TOKENS = ["<b>A</b>", " cat", " sat", " on", " the"]


def node(id, kind, layer, index, position, influence, direct=0.0, ablation=None):
    return NS(
        id=id,
        kind=kind,
        layer=layer,
        index=index,
        position=position,
        influence=influence,
        direct=direct,
        ablation=ablation,
    )


def a_graph():
    nodes = [node(f"E@{p}", "embeddings", None, None, p, 0.1 * (p + 1)) for p in range(5)]
    nodes += [
        node("L0H1@4", "head", 0, 1, 4, 2.0, 1.5, NS(predicted=-2.0, actual=-1.6)),
        node("L0N3@4", "neuron", 0, 3, 4, -1.0, -0.4),
        node("L0N5@4", "neuron", 0, 5, 4, 0.5),
        node("L1H0@2", "head", 1, 0, 2, 0.25),
        node("B:L1.mlp.out-bias@4", "bias", 1, None, 4, 0.3),
        node("metric", "metric", None, None, 4, 1.5, 1.5),
    ]
    edges = [
        NS(source="E@1", target="L0H1@4", weight=0.8),
        NS(source="L0H1@4", target="metric", weight=1.5),
        NS(source="L0N3@4", target="metric", weight=-0.4),
    ]
    return NS(nodes=nodes, edges=edges, metric=1.5)


def node_points(fig) -> dict[str, tuple[float, float, float, list]]:
    """Node id -> (x, y, marker size, customdata) from the figure's node traces."""
    found = {}
    for trace in fig.data:
        if trace.mode == "markers" and trace.customdata is not None:
            sizes = trace.marker.size
            for i, custom in enumerate(trace.customdata):
                found[custom[0]] = (trace.x[i], trace.y[i], sizes[i], list(custom))
    return found


def test_nodes_sit_at_their_position_and_row_and_grow_with_influence():
    g = a_graph()
    fig = figs.graph_figure(g, TOKENS, n_layers=2)
    points = node_points(fig)
    assert set(points) == {n.id for n in g.nodes}
    layout = figs.node_layout(g.nodes, 2, len(TOKENS))
    centres = layout.centres
    assert centres == sorted(centres)  # left to right in prompt order
    rows = {"embeddings": 0, "L0 heads": 1, "L0 MLP": 2, "L1 heads": 3, "L1 MLP": 4, "metric": 5}
    expect = {
        "E@0": ("embeddings", 0),
        "E@3": ("embeddings", 3),
        "L0H1@4": ("L0 heads", 4),
        "L0N3@4": ("L0 MLP", 4),
        "L0N5@4": ("L0 MLP", 4),
        "L1H0@2": ("L1 heads", 2),
        "B:L1.mlp.out-bias@4": ("L1 MLP", 4),
        "metric": ("metric", 4),
    }
    for node_id, (row, position) in expect.items():
        x, y, *_ = points[node_id]
        assert abs(y - rows[row]) <= figs.ROW_BAND / 2, node_id  # in its row's band (layers bottom to top)
        half = (centres[position] - (centres[position - 1] if position else -centres[0])) / 2
        assert abs(x - centres[position]) < half, node_id  # in its position's column
    assert points["L0N3@4"][:2] != points["L0N5@4"][:2]  # two neurons in one cell do not overlap
    sizes = {i: p[2] for i, p in points.items() if i != "metric"}
    by_influence = sorted(sizes, key=lambda i: abs(next(n.influence for n in g.nodes if n.id == i)))
    assert [sizes[i] for i in by_influence] == sorted(sizes.values())  # size grows with |influence|
    assert max(sizes.values()) == figs.LARGEST and min(sizes.values()) > figs.SMALLEST
    assert list(fig.layout.yaxis.ticktext) == list(rows)


def test_edges_join_their_nodes_and_widen_with_weight():
    g = a_graph()
    fig = figs.graph_figure(g, TOKENS, n_layers=2)
    points = node_points(fig)
    lines = [t for t in fig.data if t.mode == "lines"]
    segments = {}
    for t in lines:
        xs, ys = list(t.x), list(t.y)
        for i in range(0, len(xs), 3):
            segments[((xs[i], ys[i]), (xs[i + 1], ys[i + 1]))] = t.line.width
    for e in g.edges:
        key = (points[e.source][:2], points[e.target][:2])
        assert key in segments, e
    widths = {e.weight: segments[(points[e.source][:2], points[e.target][:2])] for e in g.edges}
    assert widths[1.5] > widths[0.8] > widths[-0.4]
    colours = {t.line.color for t in lines}
    assert colours == {figs.POSITIVE, figs.NEGATIVE}  # red pushes the metric up, blue down


def test_hover_names_the_node_and_its_numbers_with_token_text_escaped():
    fig = figs.graph_figure(a_graph(), TOKENS, n_layers=2, title="t")
    custom = node_points(fig)["L0H1@4"][3]
    assert custom[:6] == [
        "L0H1@4",
        "head 1 of layer 0 at ' the' (position 4)",
        2.0,
        1.5,
        pytest.approx(2.0 / 1.5),
        "L0H1",
    ]
    assert custom[6] == "<br>removed: predicted -2.000, actual -1.600"
    head_trace = next(t for t in fig.data if t.name == "head")
    assert "influence %{customdata[2]:+.3f} (%{customdata[4]:+.0%} of the metric)" in head_trace.hovertemplate
    assert "click: what this unit does" in head_trace.hovertemplate
    e0 = node_points(fig)["E@0"][3]
    assert e0[1] == "token + position embedding of '&lt;b&gt;A&lt;/b&gt;' (position 0)" and e0[5] == ""
    texts = [a.text for a in fig.layout.annotations]
    assert texts == ["&lt;b&gt;A&lt;/b&gt;", " cat", " sat", " on", " the"]  # the prompt along the bottom, escaped
    assert fig.layout.clickmode == "event+select"


def test_token_labels_hide_where_they_would_touch_and_the_last_always_shows():
    T = 40
    nodes = [node(f"E@{p}", "embeddings", None, None, p, 1.0 + (p % 7)) for p in range(T)]
    nodes += [node(f"L0N{i}@{T - 1}", "neuron", 0, i, T - 1, 0.5) for i in range(30)]
    fig = figs.graph_figure(NS(nodes=nodes, edges=[], metric=1.0), [f"t{p}" for p in range(T)], n_layers=1)
    widths = fig.layout.meta[figs.ANNOTATION_MIN_WIDTH]
    centres = [a.x for a in fig.layout.annotations]
    slots = figs.node_layout(nodes, 1, T).slots
    assert widths[T - 1] == 0  # the explained position's label always shows
    for figure_px in (390, 700, 1400):
        shown = [c for c, w in zip(centres, widths, strict=True) if w <= figure_px]
        px = [(c * (figure_px - figs.PLOT_SIDES_PX) / (slots + 1)) for c in shown]
        assert all(b - a >= figs.LABEL_PX - 1e-6 for a, b in zip(px, px[1:], strict=False)), figure_px
    assert sum(w <= 390 for w in widths) < sum(w <= 1400 for w in widths) <= T


def test_a_click_reads_the_node_and_its_unit_from_either_customdata_form():
    as_list = {"selection": {"points": [{"customdata": ["L1H0@2", "words", 0.2, 0.1, 0.3, "L1H0", ""]}]}}
    as_dict = {"selection": {"points": [{"customdata": {"0": "E@3", "5": ""}}]}}
    assert figs.clicked_node(as_list) == ("L1H0@2", "L1H0")
    assert figs.clicked_node(as_dict) == ("E@3", "")
    assert figs.clicked_node({"selection": {"points": [{"x": 1}]}}) is None
    assert figs.clicked_node({}) is None


def a_qk(terms, score=None):
    terms = torch.tensor(terms, dtype=torch.float32)
    n, m = terms.shape
    return QKDecomposition(
        1,
        0,
        7,
        3,
        float(terms.sum()) if score is None else score,
        ["embeddings", "L0H2", "L0 MLP", "query bias"][:n],
        ["embeddings", "L0H2", "L0 MLP"][:m],
        terms,
    )


def test_the_qk_sentence_is_read_from_the_numbers():
    qk = a_qk([[1.0, 0.2, 0.0], [0.3, 6.2, 0.1], [0.0, 0.4, 1.8]])  # score 10.0: L0H2 x L0H2 is 62% of it
    assert figs.qk_sentence(qk, " the", " cat") == (
        "62% of the score (+10.00): L0H2's output at ' the' meets L0H2's output at ' cat' (+6.20)."
    )
    bigger = a_qk([[5.0, -3.0], [0.5, 0.5]])
    assert figs.qk_sentence(bigger, "a", "b").startswith("The largest term, +5.00, is more than the whole score")
    against = a_qk([[-5.0, 3.0], [3.0, 0.5]])
    assert figs.qk_sentence(against, "a", "b").startswith("The largest term, -5.00, works against the score (+1.50)")
    assert figs.source_words("embeddings", "x") == "the token + position embedding at 'x'"
    assert figs.source_words("query bias", "x") == "the query bias"


def test_the_qk_heatmap_keeps_the_sources_of_the_top_terms():
    terms = np.zeros((4, 3))
    terms[1, 1], terms[3, 2], terms[0, 0] = 5.0, -4.0, 0.01
    qk = a_qk(terms.tolist())
    fig = figs.qk_figure(qk, "<q>", " cat", top=2)
    heat = fig.data[0]
    assert list(heat.y) == ["L0H2", "query bias"] and list(heat.x) == ["L0H2", "L0 MLP"]
    assert np.allclose(np.array(heat.z), [[5.0, 0.0], [0.0, -4.0]])
    assert "&lt;q&gt;" in heat.hovertemplate and "<q>" not in heat.hovertemplate
