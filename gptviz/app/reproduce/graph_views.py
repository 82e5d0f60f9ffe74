"""Copy as Python for the attribution graph and the QK decomposition (issue 58): the call that rebuilds the view,
then the lines that print the numbers it shows (the nodes' table, the counts; the score and its top terms)."""

from __future__ import annotations

from ..model_service import ModelSpec
from .core import pieces_comment, prompt_lines, snippet

GRAPH_ROW = (
    "    print(f'{n.id:>16} {n.influence:+.3f} {n.influence / result.metric:+.0%} {n.direct:+.3f}'"
    " + (f' {n.ablation.predicted:+.3f} {n.ablation.actual:+.3f}' if n.ablation else ''))"
)


def attribution_graph(
    spec: ModelSpec,
    ids,
    target: int,
    other: int,
    node_threshold: float,
    edge_threshold: float,
    max_nodes: int,
    rows: int,
    text: str | None,
) -> str:
    """Why this token?, attribution graph: the graph at the page's thresholds, then its counts and its `rows` most
    influential nodes as the page's table shows them (influence, share of the metric, direct effect, and for the
    checked ones the ablation's predicted and actual change)."""
    return snippet(
        "Why this token?, attribution graph",
        spec,
        prompt_lines(ids, text, spec=spec),
        f"target, other = {target}, {other}           # {pieces_comment(target, other, spec=spec)}",
        f"result = attribution_graph(model, ids, target, other, node_threshold={node_threshold!r}, "
        f"edge_threshold={edge_threshold!r}, max_nodes={max_nodes!r})",
        "p = result.pruning",
        "print(f'metric {result.metric:+.3f} (real model {result.real_metric:+.3f}); {p.nodes_kept} of "
        "{p.nodes_total} nodes ({p.node_share:.0%} of the influence), {p.edges_kept} of {p.edges_total} edges')",
        "print('node, influence, share of the metric, direct, ablation predicted, actual')",
        f"for n in sorted((n for n in result.nodes if n.kind != 'metric'), key=lambda n: -abs(n.influence))[:{rows}]:",
        GRAPH_ROW,
        imports="from gptviz.methods import attribution_graph",
    )


def qk(spec: ModelSpec, ids, layer: int, head: int, query: int, key: int, top: int, text: str | None) -> str:
    """Why a head attends: the score of (layer, head, query, key) split into query-source x key-source terms; prints
    the score and its `top` largest terms."""
    return snippet(
        "Why this token?, why a head attends",
        spec,
        prompt_lines(ids, text, spec=spec),
        f"result = qk_decomposition(model, ids, layer={layer}, head={head}, query={query}, key={key})",
        "print(f'score {result.score:+.3f} = the sum of {result.terms.numel()} terms')",
        f"for query_side, key_side, term in result.top_terms({top}):",
        "    print(f'{query_side:>14} x {key_side:<14} {term:+.3f}')",
        imports="from gptviz.methods import qk_decomposition",
    )
