"""Why this token? Direct logit attribution, head ablation, activation patching and saliency on the sidebar's
model and prompt. Every number comes from gptviz.methods.attribution / gptviz.methods.interventions through the
page's service (gptviz.app.services.why); nothing is drawn that was not measured on this model. The patching and
saliency tabs are drawn by gptviz/app/views/why_sweeps.py."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st
import torch

from gptviz.app import display, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.seen import read_prompt
from gptviz.app.services import LimitError
from gptviz.app.services import why as services
from gptviz.app.services.why import Ask, first_difference, piece_at, pieces
from gptviz.app.unit_nav import unit_pills
from gptviz.app.views.why_graph import GRAPH_LINE, GRAPH_NOTE, QK_LINE, QK_NOTE, graph_tab, qk_tab
from gptviz.app.views.why_sweeps import PATCH_NOTE, SALIENCY_NOTE, patching_tab, saliency_tab
from gptviz.figures import attention as fa
from gptviz.figures import flow as figs_flow
from gptviz.figures import why as figs
from gptviz.model import unit_id
from gptviz.model.config import GPTConfig
from gptviz.model.tokenizer import decode

state = st.session_state
TOP = 10  # tokens offered as target / rival


# ---- the question: model, prompt, target and rival -----------------------------------------------------------


def pick_tokens(probs: torch.Tensor, last_label: str, enc) -> tuple[list[int], int, int]:
    """The target and rival pickers (both among the top tokens, never the same), and the metric they make."""
    choices = [int(i) for i in probs.topk(min(TOP, probs.numel())).indices]
    wanted = state.get(K.WHY_TARGET)
    if type(wanted) is int and 0 <= wanted < probs.numel() and wanted not in choices:
        choices.append(wanted)  # a written token below the top ten (a "why?" from a generated text, a link)
    names = dict(zip(choices, pieces(choices, enc), strict=True))

    def option(i: int) -> str:
        return f"{names[i]}  ({float(probs[i]):.1%})"

    sidebar.keep_valid(K.WHY_TARGET, choices, choices[0])
    sidebar.keep_valid(K.WHY_OTHER, choices, choices[1])
    c1, c2 = st.columns(2)
    target = S.WHY_TARGET.selectbox(c1, options=choices, format_func=option)
    others = [c for c in choices if c != target]
    if state.get(K.WHY_OTHER) not in others:
        state[K.WHY_OTHER] = others[0]
    other = S.WHY_OTHER.selectbox(c2, options=others, format_func=option)
    st.caption(
        f"Next token after the prompt's last token, {display.md_text(last_label)}. Metric: logit("
        f"{display.md_text(names[target])}) - logit({display.md_text(names[other])})."
    )
    return choices, target, other


def read_question() -> Ask:
    seen = read_prompt()
    spec, cfg, enc, ids = seen.spec, seen.cfg, seen.enc, list(seen.ids)  # enc: GPT-1's own BPE for a GPT-1 folder
    labels = pieces(ids, enc)
    probs = services.next_token(spec, ids)
    choices, target, other = pick_tokens(probs, labels[-1], enc)
    return Ask(spec, cfg, ids, labels, probs, choices, target, other, enc)


# ---- Direct attribution ------------------------------------------------------------------------------------------

DLA_NOTE = (
    "What each head and MLP writes into the final residual stream, read straight through the "
    "unembedding (the final norm's scale frozen at this run). It measures direct effects only: a head "
    "whose output other layers read and transform gets no credit here for what they do with it."
)
DLA_POST_NORM = (
    "Direct attribution needs the pre-norm wiring. In post-norm every block's LayerNorm rescales the "
    "whole residual stream after each addition, so the final stream is not a sum of the heads' and "
    "MLPs' outputs and no exact split exists. Ablation, patching and saliency below work for both."
)


def ablated() -> tuple[tuple[int, int], ...]:
    return tuple(sorted(tuple(h) for h in state.get(K.WHY_ABLATED) or []))


def toggle_clicked_head(grid_key: str, cfg: GPTConfig) -> None:
    """A head clicked in the grid is ablated, or brought back when it already was; the grid gets a fresh key so the
    next click on the same head counts again."""
    picked = fa.selected_head(state.get(grid_key) or {})
    state[K.WHY_GRID_CLICKS] = state.get(K.WHY_GRID_CLICKS, 0) + 1
    if picked is None or picked[0] not in range(cfg.n_layers) or picked[1] not in range(cfg.n_heads):
        return
    heads = set(ablated())
    heads ^= {tuple(picked)}
    state[K.WHY_ABLATED] = sorted(heads)


def clickable_grid(fig, cfg: GPTConfig):
    """Invisible markers over the grid's cells: Plotly heatmaps do not report clicks, markers do."""
    import plotly.graph_objects as go

    layers, heads = zip(*[(layer, h) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)], strict=True)
    fig.add_trace(
        go.Scatter(
            x=heads,
            y=layers,
            mode="markers",
            marker=dict(size=18, symbol="square", opacity=0),
            selected=dict(marker=dict(opacity=0)),
            unselected=dict(marker=dict(opacity=0)),
            hovertemplate="layer %{y}, head %{x}: click to ablate or bring back<extra></extra>",
            showlegend=False,
        )
    )
    fig.update_layout(clickmode="event+select")
    return fig


def heads_grid(ask: Ask, values, title: str, colorbar: str) -> None:
    """The heads as a grid to click: a click ablates a head (outlined), a second brings it back."""
    key = K.per_item(K.WHY_DLA_GRID, state.get(K.WHY_GRID_CLICKS, 0))
    fig = figs.layer_head_grid(values, title=title, colorbar=colorbar, selected=list(ablated()))
    display.show_figure(
        clickable_grid(fig, ask.cfg),
        key=key,
        on_select=lambda: toggle_clicked_head(key, ask.cfg),
        selection_mode="points",
    )


def post_norm_says_why_not(cfg: GPTConfig, why_not: str) -> bool:
    """For the views that split a residual sum into its parts: on a post-norm model say why they cannot."""
    if cfg.norm != "pre":
        st.info(why_not)
    return cfg.norm != "pre"


def direct_attribution_tab(ask: Ask) -> None:
    if post_norm_says_why_not(ask.cfg, DLA_POST_NORM):
        return
    dla = services.direct_attribution(ask.spec, ask.ids, ask.target, ask.other)
    total = float(dla.values.sum())
    m1, m2, m3 = st.columns(3)
    m1.metric("Logit difference (model)", f"{dla.logit_diff:+.3f}")
    m2.metric(
        "Sum of the parts",
        f"{total:+.3f}",
        help="Equal to the model's own logit difference up to float rounding: the parts are an exact decomposition.",
    )
    m3.metric("Largest part", dla.labels[int(dla.values.abs().argmax())])
    display.show_figure(
        figs.attribution_bars(
            dla.labels, dla.values, title="Direct attribution: every part of the final residual stream"
        ),
        key=K.WHY_DLA_BARS,
    )
    heads_grid(ask, dla.head_values, "Heads' direct attribution (click a head to ablate it)", "logit diff")
    ablation_effect(ask)
    display.download_csv(
        lambda: pd.DataFrame({"part": dla.labels, "direct_attribution": dla.values.numpy()}),
        "direct_attribution.csv",
        key=K.WHY_DLA_CSV,
    )  # built on a click, not at every run
    reproduce.show(reproduce.direct_attribution(ask.spec, ask.ids, ask.target, ask.other, reproduce.prompt_text()))


# ---- Ablate heads ------------------------------------------------------------------------------------------------

ABLATE_NOTE = (
    "Remove heads and run again: the next-token probabilities and the continuation with and without "
    "them, from the same seed. Zero ablation sets a head's output (z) to 0; mean ablation to its mean "
    "over this prompt's positions. It shows what the model does without the head, which is not only "
    "what the head did: other parts may compensate."
)


@dataclass
class Ablation:
    heads: tuple[tuple[int, int], ...]  # sorted (layer, head) pairs removed
    mode: str
    n_new: int
    temperature: float
    seed: int


def ablation_effect(ask: Ask) -> None:
    """Under a grid: what the clicked heads' ablation does to the probabilities and the continuation."""
    heads = tuple(h for h in ablated() if h[0] < ask.cfg.n_layers and h[1] < ask.cfg.n_heads)
    if not heads:
        st.caption(
            "Click a head above to ablate it (zero its output) and see what changes; click it again to bring it back."
        )
        return
    ab = Ablation(
        heads,
        state.get(K.WHY_MODE, "zero"),
        int(state.get(K.WHY_N, 20)),
        float(state.get(K.WHY_TEMP, 0.0)),
        int(state.get(K.WHY_SEED, 0)),
    )
    st.markdown(f"**Ablated ({ab.mode}):** " + ", ".join(unit_id.head_id(layer, h) for layer, h in heads))
    probability_table(ask, ab)
    direct_and_total(ask, ab)
    continuations(ask, ab)


def ablation_controls(cfg: GPTConfig) -> Ablation:
    options = [(layer, h) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)]
    state[K.WHY_HEADS] = [h for h in ablated() if h in options]  # the grid's clicks and a link set WHY_ABLATED
    chosen = S.WHY_HEADS.multiselect(
        st,
        options=options,
        format_func=lambda lh: unit_id.head_id(*lh),
        placeholder="Choose heads, or click them in the grid above",
        on_change=lambda: state.__setitem__(K.WHY_ABLATED, sorted(state[K.WHY_HEADS])),
    )
    a1, a2, a3, a4 = st.columns(4)
    mode = S.WHY_MODE.radio(a1, horizontal=True)
    n_new = S.WHY_N.number_input(a2)
    temperature = S.WHY_TEMP.slider(a3)
    seed = S.WHY_SEED.number_input(a4)
    return Ablation(tuple(sorted(chosen)), mode, int(n_new), float(temperature), int(seed))


def probability_table(ask: Ask, ab: Ablation) -> None:
    after = services.next_token(ask.spec, ask.ids, ab.heads, ab.mode) if ab.heads else ask.probs
    probs = ask.probs
    shown = sorted(set(ask.choices[:5]) | set(after.topk(5).indices.tolist()), key=lambda i: -float(probs[i]))
    table = pd.DataFrame(
        {
            "token": pieces(shown, ask.enc),
            "before": [float(probs[i]) for i in shown],
            "after": [float(after[i]) for i in shown],
        }
    )
    table["change"] = table["after"] - table["before"]
    st.dataframe(
        table,
        hide_index=True,
        column_config={c: st.column_config.NumberColumn(format="percent") for c in ("before", "after", "change")},
    )


EFFECTS_LINE = (
    "They can differ, even in sign: the direct effect is only the heads' path straight to the output; "
    "ablating them also changes what every later layer reads from them, and the final norm's scale."
)


def direct_and_total(ask: Ask, ab: Ablation) -> None:
    """The ablated heads' direct effect on the metric (minus their direct attributions) beside the total effect the
    ablation measured (the change in logit(target) - logit(rival), read from the probabilities: the softmax keeps
    differences of logits)."""
    if ask.cfg.norm != "pre" or not ab.heads:
        return
    if ab.mode != "zero":
        st.caption(
            "Direct and total effects are compared for zero ablation (the direct effect of replacing a head's "
            "output by its mean is not the negative of its attribution)."
        )
        return
    dla = services.direct_attribution(ask.spec, ask.ids, ask.target, ask.other)
    direct = -sum(float(dla.head_values[layer, head]) for layer, head in ab.heads)
    after, before = services.next_token(ask.spec, ask.ids, ab.heads, ab.mode), ask.probs
    metric = lambda p: float(torch.log(p[ask.target]) - torch.log(p[ask.other]))  # noqa: E731
    total = metric(after) - metric(before)
    c1, c2 = st.columns(2)
    c1.metric(
        "Direct effect on the metric",
        f"{direct:+.3f}",
        help="Minus the ablated heads' direct attributions: what taking their outputs out of the final residual "
        "stream alone would change, with the final norm's scale held at this run's.",
    )
    c2.metric(
        "Total effect (ablation, measured)",
        f"{total:+.3f}",
        help=f"The model's logit difference with the heads ablated ({metric(after):+.3f}) minus without "
        f"({metric(before):+.3f}).",
    )
    st.caption(EFFECTS_LINE)


def continuations(ask: Ask, ab: Ablation) -> None:
    settings = (ab.mode, ab.n_new, ab.temperature, ab.seed)
    plain = services.continuation(ask.spec, ask.ids, (), *settings)
    edited = services.continuation(ask.spec, ask.ids, ab.heads, *settings) if ab.heads else plain
    split = first_difference(plain, edited)
    t1, t2 = st.columns(2)
    t1.markdown("**Without ablation**")
    t1.text(decode(plain, ask.enc))
    t2.markdown(f"**With {len(ab.heads)} head(s) removed**")
    t2.text(decode(edited, ask.enc))
    if not ab.heads:
        st.caption("Choose heads to compare.")
    elif split is None:
        st.success("The continuation is the same with these heads removed.")
    else:
        # quoted: a bare punctuation token read as the sentence's own (", , with it")
        st.warning(
            f"The texts diverge at new token {split + 1}: “{display.md_text(piece_at(plain, split, ask.enc))}” "
            f"without the ablation, “{display.md_text(piece_at(edited, split, ask.enc))}” with it."
        )


def attention_with_and_without(ask: Ask, ab: Ablation) -> None:
    """One head's attention as trained and with the ablation (by default a layer after the last one edited)."""
    cfg = ask.cfg
    v1, v2 = st.columns(2)
    show_layer = S.WHY_ATT_LAYER.selectbox(
        v1, options=range(cfg.n_layers), index=min(max(layer for layer, _ in ab.heads) + 1, cfg.n_layers - 1)
    )
    show_head = S.WHY_ATT_HEAD.selectbox(v2, options=range(cfg.n_heads))
    name = unit_id.head_id(show_layer, show_head)
    m1, m2 = st.columns(2)
    for column, heads, title, key in (
        (m1, (), f"{name} as trained", K.WHY_ATT_BEFORE),
        (m2, ab.heads, f"{name} with the ablation", K.WHY_ATT_AFTER),
    ):
        weights = services.edited_pattern(ask.spec, ask.ids, heads, ab.mode, show_layer)[show_head]
        with column:
            display.show_figure(fa.attention_heatmap(weights.numpy(), ask.labels, title=title, height=420), key=key)


def ablate_tab(ask: Ask) -> None:
    pre = ask.cfg.norm == "pre"
    values = (
        services.direct_attribution(ask.spec, ask.ids, ask.target, ask.other).head_values
        if pre
        else torch.zeros(ask.cfg.n_layers, ask.cfg.n_heads)
    )
    heads_grid(
        ask,
        values,
        "Click a head to ablate it, again to bring it back"
        + (" (colour: its direct attribution)" if ask.cfg.norm == "pre" else ""),
        "logit diff",
    )
    ab = ablation_controls(ask.cfg)
    if ab.heads:
        unit_pills(
            "What each ablated head does over the corpus",
            [unit_id.head_id(layer, h) for layer, h in ab.heads],
            K.per_item(K.UNIT_PILLS, "why_ablated"),
        )
    probability_table(ask, ab)
    direct_and_total(ask, ab)
    continuations(ask, ab)
    if ab.heads:
        attention_with_and_without(ask, ab)
    effects = ask.cfg.norm == "pre" and ab.mode == "zero" and bool(ab.heads)  # as direct_and_total shows them
    reproduce.show(
        reproduce.ablation(
            ask.spec, ask.ids, ab.heads, ab.mode, reproduce.prompt_text(), ask.target, ask.other, effects
        )
    )


# ---- Information flow --------------------------------------------------------------------------------------------

FLOW_NOTE = (
    "Which earlier tokens and sub-layers the last token's output is built from (Ferrando & Voita, "
    '2024): the LLM Transparency Tool\'s graph, with its "Renormalize after threshold" off. Each residual '
    "update is a sum: the stream so far (the skip), what each head brings from each earlier token, and "
    "the MLP's output. Each part's share of its sum is how much closer it is to the sum than nothing is "
    "(L1 distance, floored at 1e-5), normalised; an edge adds its heads' shares, and a token's attention "
    "to itself is drawn with the skip as one edge. The output bias (with the heads' value biases folded "
    "in) is part of the sum but no part of its own. Parts whose share exceeds the threshold are drawn, "
    "from the output down. It does not depend on the target and rival above."
)
FLOW_POST_NORM = (
    "The information-flow graph needs the pre-norm wiring, like direct attribution: in post-norm each "
    "block's LayerNorm rescales the stream after the addition, so it is not a sum of its parts."
)


def attention_edges_table(edges: list, labels: list[str], n_heads: int) -> pd.DataFrame:
    """The attention edges, largest share first, with the head whose share of each is largest."""
    rows = sorted(edges, key=lambda e: -e.importance)
    return pd.DataFrame(
        {
            "layer": [e.layer for e in rows],
            "from token": [labels[e.source] for e in rows],
            "from position": [e.source for e in rows],
            "to token": [labels[e.target] for e in rows],
            "to position": [e.target for e in rows],
            "share": [e.importance for e in rows],
            "largest head share": [
                f"{unit_id.head_id(e.layer, e.head)}: {e.head_share:.0%} (even: {1 / n_heads:.0%})" for e in rows
            ],
        }
    )


def flow_tab(ask: Ask) -> None:
    if post_norm_says_why_not(ask.cfg, FLOW_POST_NORM):
        return
    threshold = S.WHY_FLOW_THRESHOLD.slider(st)
    try:
        with st.spinner("Splitting every residual sum into its parts..."):
            graph = services.flow_graph(ask.spec, ask.ids, float(threshold))
    except ValueError as err:  # LimitError: the capture would pass the server's budget
        st.warning(str(err))
        return
    labels = ask.labels
    kinds = {k: [e for e in graph.edges if e.kind == k] for k in ("attention", "mlp", "residual")}
    sources = {e.source for e in kinds["attention"] if e.source != graph.position}
    st.caption(
        f"{len(graph.edges)} edges at share > {threshold:.2f}: {len(kinds['attention'])} through "
        f"attention, {len(kinds['mlp'])} MLP outputs, {len(kinds['residual'])} skips (with self-attention "
        "where a token reads itself). Earlier tokens "
        f"the output reads: {len(sources)} of {graph.n_tokens - 1}."
    )
    display.show_figure(
        figs_flow.flow_figure(
            graph,
            labels,
            n_heads=ask.cfg.n_heads,
            title=f"Information flow into the prediction after '{fa.plotly_text(labels[graph.position])}'",
        ),
        key=K.WHY_FLOW_FIG,
    )
    st.dataframe(
        attention_edges_table(kinds["attention"], labels, ask.cfg.n_heads),
        hide_index=True,
        column_config={"share": st.column_config.ProgressColumn(format="percent", min_value=0.0, max_value=1.0)},
    )
    display.download_csv(pd.DataFrame([e._asdict() for e in graph.edges]), "information_flow.csv", key=K.WHY_FLOW_CSV)
    reproduce.show(reproduce.flow(ask.spec, ask.ids, float(threshold), reproduce.prompt_text()))


# ---- the page ----------------------------------------------------------------------------------------------------

TABS = dict(
    zip(
        K.WHY_VIEWS,
        (  # tab label: (its note, what draws it)
            (DLA_NOTE, direct_attribution_tab),
            (GRAPH_NOTE, graph_tab),
            (ABLATE_NOTE, ablate_tab),
            (PATCH_NOTE, patching_tab),
            (SALIENCY_NOTE, saliency_tab),
            (FLOW_NOTE, flow_tab),
            (QK_NOTE, qk_tab),
        ),
        strict=True,
    )
)

TAB_LINES = (
    "What each head and MLP writes toward the target, read straight through the unembedding.",
    GRAPH_LINE,
    "Remove heads and run again: the probabilities and the continuation with and without them.",
    "Copy one piece of a clean run into a corrupted one: how much of the clean prediction comes back.",
    "How much each prompt token's embedding contributes to the metric.",
    "Which earlier tokens and sub-layers the last token's output is built from.",
    QK_LINE,
)


PAGE_CSS = f"<style>{display.PHONE_TITLE_CSS}</style>"  # a phone's first screen reaches the tab's figure


def main() -> None:
    st.html(PAGE_CSS)
    st.title("Why this token?")
    st.caption(
        "Ask the model why it predicts its next token: which parts push it, and what changes without them.",
        help="Which heads and MLPs push the prediction, what happens when heads are removed, which parts of a "
        "clean run restore a corrupted one, and which prompt tokens the prediction depends on.",
    )
    try:
        ask = read_question()
    except LimitError as err:  # the server's memory has no room for the next-token probabilities now
        st.warning(str(err))
        return
    for (note, draw), line, tab in zip(
        TABS.values(), TAB_LINES, st.tabs(list(TABS), key=K.WHY_VIEW, on_change="rerun"), strict=True
    ):
        if tab.open is not False:  # only the open tab computes
            with tab:
                st.caption(line, help=note)
                try:
                    draw(ask)
                except LimitError as err:  # a measurement the server's memory has no room for now
                    st.warning(str(err))


main()
