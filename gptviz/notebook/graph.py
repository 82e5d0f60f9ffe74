"""The attribution graph and the QK decomposition (issue 58) as notebook views: the Why page's figures, built by the
same factories (gptviz.figures.graph) from the same library calls (gptviz.methods).

    view = graph(model, ids, " Romeo", " lady")           # target and rival: one token each, as text or an id
    view.result                                            # the AttributionGraph: nodes, edges, pruning
    view.picked                                            # the node last clicked (its numbers show under the title)
    why_attends(model, ids, layer=1, head=0, query=28, key=11).result   # the QKDecomposition
"""

from __future__ import annotations

import torch

from .figures import figure_box, one_token

KEY = (
    "■ embeddings · ● heads · ◆ MLP neurons · ▲ biases · ★ the metric; red pushes the metric up, blue down; size: "
    "|influence|; line width: |edge weight|."
)


def _ids(model, ids) -> list[int]:
    """A prompt's ids (text is encoded, no beginning-of-text token added), checked against the context."""
    from ..model.tokenizer import encode, tokenizer_for

    ids = (
        encode(ids, tokenizer_for(model))
        if isinstance(ids, str)
        else [int(i) for i in torch.as_tensor(ids).reshape(-1)]
    )
    if not ids:
        raise ValueError("the prompt is empty: give some text or ids")
    if len(ids) > model.config.n_ctx:
        raise ValueError(f"{len(ids)} tokens is more than the model's context of {model.config.n_ctx}")
    return ids


def graph_figures(
    model, ids, target, other=None, *, node_threshold: float = 0.8, edge_threshold: float = 0.98, max_nodes: int = 200
):
    """(AttributionGraph, [its figure]) for logit(target) - logit(other) (or logit(target)) after `ids`."""
    from ..figures.common import plotly_text
    from ..figures.graph import graph_figure
    from ..methods.graph import attribution_graph
    from ..model.tokenizer import token_labels, tokenizer_for

    ids, enc = _ids(model, ids), tokenizer_for(model)
    vocab = model.config.vocab_size
    target = one_token(target, vocab, enc)
    other = None if other is None else one_token(other, vocab, enc)
    result = attribution_graph(
        model, ids, target, other, node_threshold=node_threshold, edge_threshold=edge_threshold, max_nodes=max_nodes
    )
    labels = token_labels(ids, enc)
    title = plotly_text(f"Why '{token_labels([target], enc)[0]}' after '{labels[-1]}': the attribution graph")
    return result, [graph_figure(result, labels, n_layers=model.config.n_layers, title=title)]


def metric_name(target: int, other: int | None, enc=None) -> str:
    """ "logit(' Romeo') - logit(' lady')", as the graph's metric reads (`enc`: the model's tokenizer)."""
    from ..model.tokenizer import token_labels

    names = token_labels([target] + ([other] if other is not None else []), enc)
    return f"logit('{names[0]}')" + (f" - logit('{names[1]}')" if other is not None else "")


def graph(
    model, ids, target, other=None, *, node_threshold: float = 0.8, edge_threshold: float = 0.98, max_nodes: int = 200
):
    """The attribution graph as a widget: `.result` the AttributionGraph, `.figures` the graph (hover a node for its
    numbers; a click shows them under the title and sets `.picked` to its id)."""
    result, figures = graph_figures(
        model, ids, target, other, node_threshold=node_threshold, edge_threshold=edge_threshold, max_nodes=max_nodes
    )
    from ..model.tokenizer import tokenizer_for

    p = result.pruning
    box = figure_box(
        figures,
        f"{metric_name(result.target, result.other, tokenizer_for(model))} = {result.real_metric:+.3f}; "
        f"kept {p.nodes_kept} of {p.nodes_total:,} nodes "
        f"({p.node_share:.0%} of the total |influence|), {p.edges_kept:,} of {p.edges_total:,} "
        f"edges. {KEY}",
    )
    box.result, box.picked = result, None
    _follow_clicks(box, result)
    return box


def _follow_clicks(box, result) -> None:
    """A click on a node writes its numbers in a line under the title (escaped: it names tokens)."""
    from .widgets import text_line

    line = text_line("Click a node for its numbers.")
    box.children = (box.children[0], line) + tuple(box.children[1:])

    def clicked(trace, points, _state):
        if not points.point_inds:
            return
        node_id = trace.customdata[points.point_inds[0]][0]
        node = result.node(node_id)
        box.picked = node_id
        check = (
            f"; removed: predicted {node.ablation.predicted:+.3f}, actual {node.ablation.actual:+.3f}"
            if getattr(node, "ablation", None)
            else ""
        )
        line.value = text_line(f"{node_id}: influence {node.influence:+.3f}, direct {node.direct:+.3f}{check}").value

    for trace in box.figures[0].data:
        if trace.mode == "markers" and trace.customdata is not None:
            trace.on_click(clicked)


def why_attends(model, ids, layer: int, head: int, query: int, key: int, *, top: int = 8):
    """Why does this head attend here: the score of (layer, head, query, key) split into query-source x key-source
    terms, as the sentence the Why page writes and a heatmap of the top terms; `.result` the QKDecomposition."""
    from ..figures.graph import qk_figure, qk_sentence
    from ..methods.graph_qk import qk_decomposition
    from ..model.tokenizer import token_labels, tokenizer_for

    ids = _ids(model, ids)
    result = qk_decomposition(model, ids, layer, head, query, key)
    labels = token_labels(ids, tokenizer_for(model))
    fig = qk_figure(
        result, labels[query], labels[key], top=top, title=f"L{layer}H{head}: query {query} meets key {key}"
    )
    box = figure_box([fig], qk_sentence(result, labels[query], labels[key]))
    box.result = result
    return box
