"""The attribution graph and the QK decomposition as notebook views (issue 58): the library's numbers, drawn by the
Why page's figure factories, the title's line escaped, a click showing a node's numbers, bad input refused."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")

from plotly.callbacks import Points  # noqa: E402

from gptviz.figures.graph import qk_sentence  # noqa: E402
from gptviz.methods.graph import attribution_graph  # noqa: E402
from gptviz.methods.graph_qk import qk_decomposition  # noqa: E402
from gptviz.model.tokenizer import token_labels  # noqa: E402
from gptviz.notebook import graph, static, why_attends  # noqa: E402
from tests.support.graph_reference import prompt, unit_model  # noqa: E402

pytestmark = pytest.mark.slow  # widgets and a graph: about a second


def test_the_graph_view_draws_the_librarys_graph_and_shows_a_clicked_nodes_numbers():
    model, ids = unit_model(), prompt()
    view = graph(model, ids, 5, 9, max_nodes=30)
    expected = attribution_graph(model, ids, 5, 9, max_nodes=30)
    assert [n.id for n in view.result.nodes] == [n.id for n in expected.nodes]
    drawn = {
        c[0] for t in view.figures[0].data if t.mode == "markers" and t.customdata is not None for c in t.customdata
    }
    assert drawn == {n.id for n in expected.nodes}
    title = view.children[0].value
    assert f"= {expected.real_metric:+.3f}; kept {expected.pruning.nodes_kept} of" in title
    trace = next(t for t in view.figures[0].data if t.name == "head")
    node_id = trace.customdata[0][0]
    for callback in trace._click_callbacks:
        callback(trace, Points(point_inds=[0], xs=[0], ys=[0], trace_name="head", trace_index=0), None)
    node = expected.node(node_id)
    assert view.picked == node_id and f"{node_id}: influence {node.influence:+.3f}" in view.children[1].value
    assert node_id in static(view).data  # the offline HTML carries the figure


def test_the_qk_view_writes_the_pages_sentence_and_bad_input_is_refused():
    model = unit_model()
    ids = prompt(T=7)
    view = why_attends(model, ids, 1, 2, 6, 3)
    expected = qk_decomposition(model, ids, 1, 2, 6, 3)
    assert float(view.result.score) == pytest.approx(expected.score)
    labels = token_labels(ids)
    assert (
        view.children[0].value
        == "<b>" + __import__("html").escape(qk_sentence(expected, labels[6], labels[3]), quote=True) + "</b>"
    )
    with pytest.raises(ValueError, match="above the diagonal"):
        why_attends(model, ids, 0, 0, 2, 5)
    with pytest.raises(ValueError, match="is 2 tokens, not one"):
        graph(model, ids, " Romeo and", None)
    with pytest.raises(ValueError, match="the prompt is empty"):
        graph(model, [], 5)
