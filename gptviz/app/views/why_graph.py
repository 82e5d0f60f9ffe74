"""The Why this token? page's attribution graph and "why a head attends" tabs, drawn (issue 58). Layout only: the
numbers come from gptviz.app.services.why_graph.

`qk_panel(layer, head, query, key)` draws the QK decomposition of one attention score with the sidebar's model and
prompt, so any page can show it for a cell in one call (the Attention map's click, later)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from ...figures import graph as figs
from ...figures.common import plotly_text
from ...methods.graph_export import graph_json
from ...model.tokenizer import decode, tokenizer_for
from .. import display, reproduce, sidebar
from .. import keys as K
from .. import settings as S
from ..model_service import ModelSpec, load_model
from ..services import why as why_services
from ..services import why_graph as services
from ..services.why import Ask, first_difference, piece_at, pieces
from ..unit_nav import go_to_unit, unit_pills

state = st.session_state
AUTO_RUN_S = 5.0  # a graph estimated longer than this waits for a click
TABLE_ROWS = 12  # the nodes' table: the most influential
REGEN_TOKENS = 20  # the counterfactual text: greedy, this many new tokens
KEY_LINE = (
    "■ embeddings · ● heads · ◆ MLP neurons · ▲ biases · ★ the metric; red pushes the metric up, blue down; "
    "size: |influence|; line width: |edge weight|."
)

GRAPH_NOTE = (
    "The attribution graph: the model on this prompt with every attention pattern, norm scale and neuron's "
    "act/pre ratio frozen is linear, so each node's influence on the metric is its output times the "
    "metric's gradient there (exact sums: docs/attribution-graph.md). Nodes: each position's embeddings, "
    "each head and MLP neuron at each position, the constant biases. The most influential are kept, then "
    "the strongest edges between them (an edge: the part of a node's influence that another's output "
    "carries through its input). The frozen model is not the real one: check a node to remove it from the "
    "real model and compare."
)
GRAPH_LINE = "Through which tokens, heads and neurons the model reached this token; check any node by removing it."
QK_NOTE = (
    "With the norm scales frozen, the query at one position and the key at another are sums of what each "
    "earlier source wrote there (the embeddings, each head, each MLP, the biases), so the attention score "
    "q·k/√d_head splits exactly into one term per (query source, key source) pair."
)
QK_LINE = "Which sources on the query side meet which on the key side to make one attention score."


# ---- the attribution graph ---------------------------------------------------------------------------------------


def graph_tab(ask: Ask) -> None:
    chart = st.container()  # the graph first, its settings under it: on a phone it starts inside the first screen
    head, more = st.columns([5, 1], vertical_alignment="center")
    with more.popover("Thresholds", icon=":material/tune:", width="stretch"):
        settings = (
            float(S.WHY_NODE_THRESHOLD.slider(st)),
            float(S.WHY_EDGE_THRESHOLD.slider(st)),
            int(S.WHY_MAX_NODES.number_input(st)),
        )
    with chart:
        graph = built_graph(ask, settings)
        if graph is None:
            return
        key = K.per_item(K.WHY_GRAPH_FIG, state.get(K.WHY_GRAPH_CLICKS, 0))
        fig = figs.graph_figure(
            graph,
            ask.labels,
            n_layers=ask.cfg.n_layers,
            title=f"Why '{plotly_text(pieces([ask.target], ask.enc)[0])}' after '{plotly_text(ask.labels[-1])}'",
        )
        display.show_figure(fig, key=key, on_select=lambda: open_clicked(key), selection_mode="points")
    p = graph.pruning
    head.caption(
        f"Metric {display.md_text(metric_name(ask))} = {graph.real_metric:+.3f}, the baseline of every "
        f"change below · kept {p.nodes_kept} of {p.nodes_total:,} nodes, {p.edges_kept:,} of "
        f"{p.edges_total:,} edges · click a head or neuron for what it does",
        help=f"The kept nodes cover {p.node_share:.0%} of the total |influence|. {KEY_LINE} Hover a node for "
        "its numbers; a click on an embedding or a bias checks it below.",
    )
    check_node(ask, graph)
    nodes_table(ask, graph)
    reproduce.show(
        reproduce.attribution_graph(
            ask.spec, ask.ids, ask.target, ask.other, *settings, TABLE_ROWS, reproduce.prompt_text()
        )
    )


def metric_name(ask: Ask) -> str:
    t, o = pieces([ask.target, ask.other], ask.enc)
    return f"logit('{t}') - logit('{o}')"


def built_graph(ask: Ask, settings: tuple[float, float, int]):
    """The graph, or None after saying why not (over the time limit, waiting for a click, memory or time refused)."""
    work = services.graph_work(ask.cfg, len(ask.ids), settings[2])
    plan = why_services.sweep_plan("The attribution graph", work, len(ask.ids), ask.spec)
    if plan.refusal:
        st.warning(plan.refusal)
        return None
    asked = (ask.spec, ask.ids, ask.target, ask.other, settings)
    if plan.estimate_s > AUTO_RUN_S and state.get(K.WHY_GRAPH_CONFIRMED) != asked:
        st.caption(f"About {plan.estimate_s:,.0f} s on this server now (stopped past {plan.limit_s:,} s).")
        if not st.button(f"Build the graph (about {plan.estimate_s:,.0f} s)", key=K.WHY_GRAPH_RUN, type="primary"):
            return None
        state[K.WHY_GRAPH_CONFIRMED] = asked
    clock = why_services.sweep_clock("The attribution graph", plan.limit_s)
    try:
        with st.spinner("Freezing the model on the prompt, one backward pass, the edges, the ablation check..."):
            return services.graph(ask.spec, ask.ids, ask.target, ask.other, *settings, clock)
    except ValueError as err:  # LimitError: no memory or time for it now; or past the server's memory
        st.warning(str(err))
        return None


def open_clicked(key: str) -> None:
    """A clicked head or neuron opens its unit page; an embedding or a bias node is checked below. The figure gets a
    fresh key, so a second click on the same node counts again."""
    picked = figs.clicked_node(state.get(key) or {})
    state[K.WHY_GRAPH_CLICKS] = state.get(K.WHY_GRAPH_CLICKS, 0) + 1
    if picked is None:
        return
    node_id, unit = picked
    if unit:
        go_to_unit(unit)
    else:
        state[K.WHY_NODE] = node_id


def check_node(ask: Ask, graph) -> None:
    """Remove one node from the real model: the frozen model's prediction beside the measured change, both beside the
    unedited metric; and, on request, the text the model writes without it."""
    nodes = sorted((n for n in graph.nodes if n.kind != "metric"), key=lambda n: -abs(n.influence))
    names = [n.id for n in nodes]
    sidebar.keep_valid(K.WHY_NODE, names, names[0])
    influence = {n.id: n.influence for n in nodes}
    picked, regen = st.columns([3, 2], vertical_alignment="bottom")
    node_id = S.WHY_NODE.selectbox(picked, options=names, format_func=lambda i: f"{i}  (influence {influence[i]:+.3f})")
    node = graph.node(node_id)
    if node.ablation is not None:
        baseline, actual = graph.real_metric, node.ablation.actual
    else:
        try:
            baseline, actual = services.node_check(ask.spec, ask.ids, node_id, ask.target, ask.other)
        except ValueError as err:  # LimitError: no memory for the edited pass now
            st.warning(str(err))
            return
    predicted = -node.influence
    m1, m2, m3 = st.columns(3)
    m1.metric("Metric, unedited", f"{baseline:+.3f}", help=f"{display.md_text(metric_name(ask))} in the real model.")
    m2.metric(
        "Predicted change",
        f"{predicted:+.3f}",
        help="Minus its influence: the frozen model's answer (patterns, "
        "norms and neuron ratios held at this prompt's).",
    )
    m3.metric(
        "Actual change, removed",
        f"{actual:+.3f}",
        help=f"The real model without it ({baseline + actual:+.3f}), "
        "patterns and norms recomputed, minus the unedited metric.",
    )
    ratio = f" The actual change is {actual / predicted:.0%} of the predicted." if predicted else ""
    st.caption(
        f"Without {node_id} the metric would be {baseline + predicted:+.3f} by the frozen model and is "
        f"{baseline + actual:+.3f} in the real one.{ratio}"
    )
    if regen.toggle(
        f"Regenerate without {node_id}",
        key=K.WHY_GRAPH_REGEN,
        help=f"{REGEN_TOKENS} greedy new tokens with this node removed at its position, beside the same "
        "without the edit.",
    ):
        regenerated(ask, node_id)


def regenerated(ask: Ask, node_id: str) -> None:
    try:
        plain = services.continuation_without(ask.spec, ask.ids, None, REGEN_TOKENS)
        edited = services.continuation_without(ask.spec, ask.ids, node_id, REGEN_TOKENS)
    except ValueError as err:  # LimitError
        st.warning(str(err))
        return
    if not plain:
        st.info("The prompt fills the model's context: there is no room for new tokens.")
        return
    t1, t2 = st.columns(2)
    t1.markdown("**As the model writes it**")
    t1.text(decode(plain, ask.enc))
    t2.markdown(f"**Without {node_id}**")
    t2.text(decode(edited, ask.enc))
    split = first_difference(plain, edited)
    if split is None:
        st.success(f"The same {len(plain)} tokens without {node_id}.")
    else:
        st.warning(
            f"The texts part at new token {split + 1}: "
            f"“{display.md_text(piece_at(plain, split, ask.enc))}” as written, "
            f"“{display.md_text(piece_at(edited, split, ask.enc))}” without {node_id}."
        )


def nodes_table(ask: Ask, graph) -> None:
    """The most influential nodes with every number the hover shows, the units among them as pills, downloads."""
    nodes = sorted((n for n in graph.nodes if n.kind != "metric"), key=lambda n: -abs(n.influence))[:TABLE_ROWS]
    labels = ask.labels
    table = pd.DataFrame(
        {
            "node": [n.id for n in nodes],
            "token": [labels[n.position] for n in nodes],
            "influence": [n.influence for n in nodes],
            "share of the metric": [100 * n.influence / graph.metric for n in nodes],
            "direct": [n.direct for n in nodes],
            "predicted change": [n.ablation.predicted if n.ablation else None for n in nodes],
            "actual change": [n.ablation.actual if n.ablation else None for n in nodes],
        }
    )
    st.dataframe(
        table,
        hide_index=True,
        key=K.WHY_GRAPH_TABLE,
        column_config={
            "share of the metric": st.column_config.NumberColumn(format="%+.0f%%"),
            **{
                c: st.column_config.NumberColumn(format="%+.3f")
                for c in ("influence", "direct", "predicted change", "actual change")
            },
        },
    )
    st.caption(
        f"Changes are against the unedited metric, {graph.real_metric:+.3f}; the graph checks its "
        f"{sum(1 for n in graph.nodes if n.ablation)} most influential nodes itself (any other: pick it above)."
    )
    units = list(dict.fromkeys(figs.node_unit(n) for n in nodes if figs.node_unit(n)))
    if units:
        unit_pills("What these units do over the corpus", units, K.per_item(K.UNIT_PILLS, "why_graph"))
    c1, c2 = st.columns(2)
    with c1:
        display.download_csv(
            lambda: pd.DataFrame([e.__dict__ for e in graph.edges]),
            "attribution_graph_edges.csv",
            key=K.WHY_GRAPH_CSV,
            label="Edges as CSV",
        )
    c2.download_button(
        "Graph as JSON (gptviz-graph/1)",
        key=K.WHY_GRAPH_JSON,
        mime="application/json",
        file_name="attribution_graph.json",
        on_click="ignore",
        icon=":material/download:",
        data=lambda: json.dumps(graph_json(graph, ask.spec.name, labels), indent=1),
    )


# ---- why a head attends ------------------------------------------------------------------------------------------


def qk_tab(ask: Ask) -> None:
    """Layer, head, query and key pickers (the key defaults to where the head looks most), then the panel."""
    cfg, T, labels = ask.cfg, len(ask.ids), ask.labels
    sidebar.keep_valid(K.WHY_QK_LAYER, range(cfg.n_layers), 0)
    sidebar.keep_valid(K.WHY_QK_HEAD, range(cfg.n_heads), 0)
    sidebar.keep_valid(K.WHY_QK_QUERY, range(T), T - 1)
    state.setdefault(K.WHY_QK_QUERY, T - 1)
    c1, c2, c3, c4 = st.columns([1, 1, 2, 2])
    layer = S.WHY_QK_LAYER.selectbox(c1, options=range(cfg.n_layers))
    head = S.WHY_QK_HEAD.selectbox(c2, options=range(cfg.n_heads))
    query = S.WHY_QK_QUERY.selectbox(c3, options=range(T), format_func=lambda p: f"{p}: {labels[p]}")
    try:
        row = services.pattern_row(ask.spec, ask.ids, layer, head, query)
    except ValueError as err:  # LimitError
        st.warning(str(err))
        return
    sidebar.keep_valid(K.WHY_QK_KEY, range(query + 1), int(row.argmax()))
    state.setdefault(K.WHY_QK_KEY, int(row.argmax()))
    key = S.WHY_QK_KEY.selectbox(
        c4, options=range(query + 1), format_func=lambda p: f"{p}: {labels[p]}  (weight {float(row[p]):.2f})"
    )
    qk_panel(layer, head, query, key, spec=ask.spec, ids=ask.ids)


def qk_panel(
    layer: int, head: int, query: int, key: int, *, spec: ModelSpec | None = None, ids=None, place: str = "why"
) -> None:
    """Why does this head attend here: the score of (layer, head, query, key) split into query-source x key-source
    terms, as one sentence from the numbers and a heatmap of the top terms. `spec`, `ids`: the sidebar's model and
    prompt unless given; `place` keeps its figure's key apart where several pages draw it."""
    if spec is None or ids is None:
        spec, model = sidebar.require_model()
        ids = sidebar.require_prompt(model.config.n_ctx, model.config.vocab_size, tokenizer_for(model)).ids
    ids, enc = tuple(ids), tokenizer_for(load_model(spec))
    try:
        qk = services.qk(spec, ids, layer, head, query, key)
        weight = float(services.pattern_row(spec, ids, layer, head, query)[key])
    except ValueError as err:  # a cell the model or prompt lacks, above the diagonal; LimitError
        st.warning(str(err))
        return
    labels = pieces(ids, enc)
    st.markdown(f"**{display.md_text(figs.qk_sentence(qk, labels[query], labels[key]))}**")
    st.caption(
        f"L{layer}H{head} puts {weight:.0%} of its attention from position {query} on position {key}. The "
        f"score before the softmax, {qk.score:+.3f}, is the sum of {qk.terms.numel()} terms "
        f"({len(qk.query_sources)} query sources x {len(qk.key_sources)} key sources); the largest are drawn.",
        help=QK_NOTE,
    )
    q, k = plotly_text(labels[query]), plotly_text(labels[key])
    display.show_figure(
        figs.qk_figure(
            qk, labels[query], labels[key], title=f"L{layer}H{head}: query {query} '{q}' meets key {key} '{k}'"
        ),
        key=K.per_item(K.WHY_QK_FIG, place),
    )
    reproduce.show(reproduce.qk(spec, ids, layer, head, query, key, 8, reproduce.prompt_text()))
