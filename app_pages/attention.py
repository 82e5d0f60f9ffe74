"""Attention: where each token looks, in every layer and head, and live while the model writes.

The prompt runs through the model once (cached by model and prompt). The pickers (layer, head, colour scale)
and the views live in one fragment, so a pick reruns only that part of the page; each view is one function, drawn
only while its tab is open. A generation runs in a background thread and a second fragment redraws it on a timer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import streamlit as st
import torch

from gptviz import analysis, unit_id
from gptviz.app import keys as K, settings as S
from gptviz.app import live
from gptviz.app.component import attention_map as amap
from gptviz.app.component import query_bars as qbars
from gptviz.app.links import sync_address
from gptviz.app.unit_nav import unit_pills
from gptviz.app.display import MEAN_HEAD, figure_download, head_name, md_text, show_figure
from gptviz.app.models import ModelSpec, attention_page_names, induction_length, induction_scores, require_capture
from gptviz.app.sidebar import (EXAMPLE_PROMPTS, MAX_PROMPT_CHARS, keep_valid, page_prompt_box, require_model,
                                require_prompt)
from gptviz.figures import attention as fa
from gptviz.figures import generation as fg
from gptviz.figures import head_views as fhv
from gptviz.head_steps import (attention_input_name, first_token_chance, first_token_scores, head_steps, row_shares,
                               value_weighted, values_from_input)
from gptviz.hooks import ActivationCache
from gptviz.model import GPT
from gptviz.tokenizer import decode, token_labels

MAX_CHIPS = 256           # longer prompts pick the query with a slider
GRID_CELLS = 600_000      # most heatmap cells one small-multiples figure draws
CAPTURE_BYTES = 256 * 2**20  # most memory the cached weights of one prompt may take (layers x heads x T x T)
VIEWS = list(S.ATT_VIEW.rule.options)
state = st.session_state


@dataclass
class Seen:
    """The prompt as this page sees it: the model's capture and what every view reads from it."""
    spec: ModelSpec
    model: GPT
    ids: tuple[int, ...]
    labels: list[str]
    cache: ActivationCache
    patterns: torch.Tensor    # [layers, heads, query, key]

    @property
    def cfg(self):
        return self.model.config

    @property
    def T(self) -> int:
        return len(self.ids)

    @property
    def heads(self) -> list[int]:
        return list(range(self.cfg.n_heads)) + [MEAN_HEAD]

    def pattern(self, layer: int, head: int) -> torch.Tensor:
        return self.patterns[layer].mean(0) if head == MEAN_HEAD else self.patterns[layer, head]

    def grid_prefix(self, panels: int) -> int:
        """Tokens the small multiples draw: all, or the first K so panels * K * K stays under GRID_CELLS.
        A prefix is exact: under the causal mask, later tokens do not change earlier rows."""
        return min(self.T, max(2, int(math.sqrt(GRID_CELLS / panels))))


@dataclass
class Pick:
    """What the pickers chose."""
    layer: int
    head: int
    scale: str
    query: int


def read_prompt() -> Seen:
    spec, model = require_model()
    cfg = model.config
    ids = require_prompt(cfg.n_ctx, cfg.vocab_size).ids
    longest = int(math.sqrt(CAPTURE_BYTES / (4 * cfg.n_layers * cfg.n_heads)))  # the patterns dominate the capture
    if len(ids) > longest:
        st.warning(f"This page keeps the last {longest} of the {len(ids)} tokens: the attention weights of every "
                   f"layer and head grow with the square of the length, and {cfg.n_layers} x {cfg.n_heads} heads "
                   f"over more tokens would take over {CAPTURE_BYTES // 2**20} MiB.")
        ids = ids[-longest:]
    cache = require_capture(spec, ids, attention_page_names(cfg.n_layers, cfg.norm))
    return Seen(spec, model, tuple(ids), token_labels(ids), cache, cache.patterns())


def follow_query_to_the_new_prompt(ids: tuple[int, ...]) -> None:
    """When the prompt changes, the chosen query follows its token, not its index: the last token stays the last;
    another goes to the same token id nearest its old place, or to the last token when the new prompt lacks it."""
    before, chosen = state.get(K.ATT_QUERY_FOR), state.get(K.ATT_QUERY)
    if before is None or tuple(before[0]) == tuple(ids) or chosen is None:
        return
    old_ids, old_query = before
    if old_query is None or old_query >= len(old_ids) or old_query == len(old_ids) - 1:
        state[K.ATT_QUERY] = None
        return
    same = [i for i, t in enumerate(ids) if t == old_ids[old_query]]
    state[K.ATT_QUERY] = min(same, key=lambda i: abs(i - old_query)) if same else None


def open_head(picked_key: str, seen: Seen, means_too: bool) -> None:
    """A click in the entropy map or the model view (its chart's selection in `picked_key`) opens that head in the
    One head view."""
    picked = fa.selected_head(state.get(picked_key) or {})
    heads = seen.heads if means_too else range(seen.cfg.n_heads)
    if picked is not None and picked[0] in range(seen.cfg.n_layers) and picked[1] in heads:
        state[K.ATT_LAYER], state[K.ATT_HEAD] = picked
        state[K.ATT_VIEW] = VIEWS[0]


def token_chips(seen: Seen) -> int:
    """The prompt as token chips; the picked one is the query the views outline. Returns the query."""
    T = seen.T
    st.markdown(f"**{T} token{'s' if T != 1 else ''}** (GPT-2 BPE pieces; ␣ is a space, ↵ a newline, `<0xF0>` one "
                "byte of a character split across tokens). Pick one to see where it looks.")
    if T <= MAX_CHIPS:
        query = S.ATT_QUERY.pills(st, options=list(range(T)), format_func=lambda i: md_text(seen.labels[i]),
                                  label_visibility="collapsed", persist_state="page")
    else:
        query = S.ATT_QUERY_POS.slider(st, min_value=0, max_value=T - 1, value=T - 1)
        st.text(" | ".join(seen.labels))
    state[K.ATT_QUERY_FOR] = (seen.ids, query)
    return T - 1 if query is None else int(query)


@dataclass
class Detector:
    """One head detector on this page's prompt: its name, every head's score and uniform attention's score."""
    name: str
    scores: torch.Tensor   # [layers, heads]
    chance: float

    @property
    def column(self) -> str:
        return f"{self.name} (chance {self.chance:.3f})"

    def best(self) -> tuple[int, int, float]:
        return analysis.head_ranking(self.scores, 1)[0]


# The detectors the page may open on, most telling first: a head is worth opening on when its score is at least
# WORTH_A_LOOK and WORTH_OVER_CHANCE times uniform attention's. Previous-token heads come last: every prompt has them.
OPENING_ORDER = ("induction, on this prompt", "duplicate-token", "previous-token")
WORTH_A_LOOK, WORTH_OVER_CHANCE = 0.3, 3.0


def detectors(seen: Seen) -> list[Detector]:
    cfg, T, patterns, ids = seen.cfg, seen.T, seen.patterns, seen.ids
    found = [Detector("induction, on this prompt", analysis.prompt_induction_scores(patterns, ids),
                      analysis.prompt_induction_chance(ids)),
             Detector("previous-token", analysis.previous_token_scores(patterns), analysis.previous_token_chance(T)),
             Detector("duplicate-token", analysis.duplicate_token_scores(patterns, ids),
                      analysis.duplicate_token_chance(ids)),
             Detector("first token (sink)", first_token_scores(patterns), first_token_chance(T))]
    length = induction_length(cfg.n_ctx)
    if length >= 2:
        found.append(Detector(f"induction, {length} random tokens repeated", induction_scores(seen.spec, length),
                              analysis.induction_chance(length)))
    return found


def head_worth_a_look(found: list[Detector]) -> tuple[int, int, Detector] | None:
    """The first detector in OPENING_ORDER whose best head clears the bar, and that head; None when none does."""
    by_name = {d.name: d for d in found}
    for name in OPENING_ORDER:
        layer, head, score = by_name[name].best()
        if score >= WORTH_A_LOOK and score >= WORTH_OVER_CHANCE * by_name[name].chance:
            return layer, head, by_name[name]
    return None


def open_on_the_best_head(seen: Seen, found: list[Detector]) -> None:
    """A first visit (no layer or head chosen, none in the link) or a loaded example opens on the head worth a look."""
    if not (state.pop(K.ATT_OPEN_BEST, False) or (K.ATT_LAYER not in state and K.ATT_HEAD not in state)):
        return
    best = head_worth_a_look(found)
    if best is not None:
        state[K.ATT_LAYER], state[K.ATT_HEAD] = best[0], best[1]


def jump_to_head(order: list[tuple[int, int]]) -> None:
    """A row picked in the detector table opens that head."""
    rows = ((state.get(K.ATT_DETECTORS) or {}).get("selection") or {}).get("rows") or []
    if rows and 0 <= int(rows[0]) < len(order):
        state[K.ATT_LAYER], state[K.ATT_HEAD] = order[int(rows[0])]


def detector_table(seen: Seen, found: list[Detector]) -> None:
    """Every head's detector scores beside their chance levels, the most telling detector's best heads first;
    picking a row opens the head."""
    if seen.T < 2:
        st.info("The detectors need a prompt of at least two tokens.")
        return
    best = head_worth_a_look(found)
    sort_by = best[2] if best is not None else found[1]
    n_heads = seen.cfg.n_heads
    order = sorted(((l, h) for l in range(seen.cfg.n_layers) for h in range(n_heads)),
                   key=lambda lh: -float(sort_by.scores[lh]))
    table = {"head": [f"layer {l}, head {h}" for l, h in order]}
    columns = {}
    for d in sorted(found, key=lambda d: d is not sort_by):
        table[d.column] = [float(d.scores[lh]) for lh in order]
        columns[d.column] = st.column_config.ProgressColumn(d.column, min_value=0.0, max_value=1.0, format="%.3f")
    st.caption(f"Sorted by {sort_by.name}; pick a row to open that head.",
               help="Mean attention weights in [0, 1]; each header gives what uniform attention over the same keys "
                    "scores (chance). Induction on this prompt: weight on the tokens that followed earlier copies of "
                    "the query's token. The random-sequence induction score uses its own sequence repeated once (a "
                    "prompt rarely repeats itself). The Activations page draws them as heatmaps.")
    st.dataframe(pd.DataFrame(table), hide_index=True, width="stretch", height=38 + 35 * min(5, len(order)),
                 column_config=columns, selection_mode="single-row", key=K.ATT_DETECTORS,
                 on_select=lambda: jump_to_head(order))
    unit_pills("What the top heads do over the corpus", [unit_id.head_id(l, h) for l, h in order[:6]],
               K.per_item(K.UNIT_PILLS, "att_detectors"))


def show_head(layer: int, head: int) -> None:
    state[K.ATT_LAYER], state[K.ATT_HEAD] = layer, head


def suggestion(found: list[Detector], p: Pick) -> None:
    """One line on the head worth a look, its score beside chance, measured; and whether the map shows it: when the
    pickers hold another head (a pick, or another model after the sidebar's LayerNorm placement), one click shows it."""
    best = head_worth_a_look(found)
    if best is None:
        st.caption("No head of this model clears the bar on this prompt (a score of at least "
                   f"{WORTH_A_LOOK} and {WORTH_OVER_CHANCE:g}x chance); try an example.")
        return
    layer, head, d = best
    shown = (p.layer, p.head) == (layer, head)
    st.markdown(f"**Worth a look: layer {layer}, head {head}**, this prompt's strongest {d.name.split(',')[0]} head: "
                f"{float(d.scores[layer, head]):.2f} of its weight where that detector looks, against "
                f"{d.chance:.2f} for uniform attention. "
                + ("The map shows it." if shown else f"The map shows layer {p.layer}, {head_name(p.head)}."),
                help="Each detector measures one way of looking (the table below); chance is what attention spread "
                     "evenly over the same tokens would score.")
    if not shown:
        st.button(f"Show layer {layer}, head {head}", key=K.ATT_SHOW_SUGGESTED, on_click=show_head, args=(layer, head),
                  icon=":material/arrow_back:", type="primary")


def use_example(text: str) -> None:
    state[K.PROMPT] = text
    state[K.ATT_QUERY] = None
    state[K.ATT_OPEN_BEST] = True


def example_buttons() -> None:
    """The examples one click away, on the page itself (they also sit in the sidebar's menu)."""
    with st.container(horizontal=True, vertical_alignment="center", gap="xsmall"):
        st.markdown("**Examples:**", width="content")
        for i, (name, text) in enumerate(EXAMPLE_PROMPTS.items()):
            st.button(name, key=K.per_item(K.ATT_EXAMPLE, i), on_click=use_example, args=(text,),
                      type="primary" if state.get(K.PROMPT) == text else "secondary")


def pickers(seen: Seen, query: int) -> Pick:
    row = st.container(horizontal=True, gap="xsmall")
    layer = S.ATT_LAYER.selectbox(row, options=list(range(seen.cfg.n_layers)), format_func=lambda i: f"layer {i}",
                                  persist_state="session", width=110)
    head = S.ATT_HEAD.selectbox(row, options=seen.heads, format_func=head_name, persist_state="session", width=165)
    S.ATT_SCALE.setdefault(state)
    scale = S.ATT_SCALE.selectbox(row, format_func=fa.SCALES.get, persist_state="session")
    return Pick(layer, head, scale, query)


@dataclass
class Boxes:
    """Where the views' fragment draws, in page order: created by the page, filled by the fragment."""
    generation: object   # a finished generation (a running one is the live fragment's)
    map_block: object    # the map beside the controls, the suggestion and the detector table
    tabs: object         # the other views


def views(seen: Seen, query: int, found: list[Detector], boxes: Boxes) -> None:
    """The pickers and every view: a pick reruns only this fragment, never the model (the capture is kept)."""
    if state.pop(K.QUERY_MOVED, False) or state.pop(K.ATT_GEN_STARTED, False):
        st.rerun()  # a view picked another query token (the chips sit outside), or Generate started the live view
    with boxes.map_block:
        left, right = st.columns([3, 2], gap="medium")
        with right:  # drawn first: the map's picks come from these widgets
            live.compact_controls(live.ATTENTION, seen.spec, seen.model, seen.ids,
                                  on_start=lambda: state.__setitem__(K.ATT_GEN_STARTED, True))
            pick = pickers(seen, query)
            about_the_map(seen, pick)
            if found:
                suggestion(found, pick)
                with st.expander("Heads worth a look: each detector's score beside chance", expanded=True):
                    detector_table(seen, found)
        with left:
            head_map(seen, pick)
    with boxes.tabs:
        for view, tab in zip(VIEWS, st.tabs(VIEWS, key=K.ATT_VIEW, on_change="rerun")):
            if tab.open is not False:  # a closed tab costs nothing
                with tab:
                    VIEW_DRAWERS[view](seen, pick)
    job = live.stored_generation(seen.spec, seen.ids, live.ATTENTION.page)
    if job is not None and not job.running:  # a running one is the live fragment's
        with boxes.generation:
            finished_generation(live.generation_view(job), seen, pick)
    sync_address()  # a pick here reruns only this fragment, not the router that writes the address


def picked_from_map(seen: Seen):
    return live.map_pick(K.ATT_LAYER, K.ATT_HEAD, seen.cfg.n_layers, seen.cfg.n_heads)


def map_height(T: int) -> int:
    return int(min(660, max(440, 380 + 8 * T)))


def head_map(seen: Seen, p: Pick) -> None:
    """The picked head's heatmap, with the map's own layer and head pickers: the page's first view, alone in its
    column (what explains it sits beside it), so on a phone the controls follow it on the first screen."""
    amap.attention_map(amap.payload(seen.patterns.numpy(), seen.labels, layer=p.layer, head=p.head, query=p.query,
                                    scale=p.scale, mean_head=MEAN_HEAD, head_names=[head_name(h) for h in seen.heads],
                                    height=map_height(seen.T)),
                       key=K.ATT_MAP, on_pick=picked_from_map(seen))


def about_the_map(seen: Seen, p: Pick) -> None:
    """How to read the map (on hover), and the map as a file."""
    labels, pat = seen.labels, seen.pattern(p.layer, p.head)
    st.caption("Map: rows are the tokens looking (queries), columns the tokens they look at (keys).",
               help="Each row sums to 1. Grey cells are the causal mask, not zero weights: a token cannot look at "
                    "tokens after it. The outlined row is the chosen query token; hover a cell for its weight. "
                    "Picking a layer or head in the map or here redraws it at once, and the views below follow.")
    figure_download(lambda: fa.attention_heatmap(pat.numpy(), labels, scale=p.scale, query=p.query,
                                                 title=f"Layer {p.layer}, {head_name(p.head)}",
                                                 height=map_height(seen.T)),
                    file_name=f"layer-{p.layer}-{head_name(p.head).replace(' ', '-')}.html", key=K.ATT_HEATMAP,
                    label="The map as interactive HTML")


def one_head(seen: Seen, p: Pick) -> None:
    """The chosen query's row of the map as bars, and the keys it weighs most."""
    labels = seen.labels
    pat = seen.pattern(p.layer, p.head)
    left, right = st.columns([3, 2], gap="medium")
    with left:
        row = pat[p.query, : p.query + 1]
        title = f"Where token {p.query} '{labels[p.query]}' looks"
        qbars.query_bars(qbars.payload(row.numpy(), labels, p.query, title=title), key=K.ATT_QUERY_BARS)
        figure_download(lambda: fa.query_bars(row.numpy(), labels, p.query, title=fa.plotly_text(title)),
                        file_name=f"query-{p.query}-layer-{p.layer}-{head_name(p.head).replace(' ', '-')}.html",
                        key=K.ATT_QUERY_BARS_HTML)
    with right:
        order = row.argsort(descending=True)[:5].tolist()
        st.dataframe(pd.DataFrame({"key token": [labels[k] for k in order], "position": order,
                                   "weight": [float(row[k]) for k in order]}),
                     hide_index=True, width="stretch",
                     column_config={"weight": st.column_config.ProgressColumn(
                         "weight", min_value=0.0, max_value=1.0, format="%.3f")})
    with st.expander("How to read attention", expanded=False):
        st.markdown(READING_ATTENTION)


READING_ATTENTION = (
    "- **Scores and softmax.** Each token makes a *query* vector; every earlier token offers a *key*. Their dot "
    "products, scaled by 1/√d_head, are the scores; softmax turns one query's scores into weights that are positive "
    "and add up to 1.\n"
    "- **Causal mask.** Before the softmax the scores of later tokens are set to −∞, so their weight is exactly 0: "
    "while generating, the model must not see the future. That is the grey triangle; the first token can only look "
    "at itself.\n"
    "- **Heads.** A layer runs several heads side by side, each with its own query, key and value projections, so "
    "one head can track the previous token while another looks back at the start. Their outputs are concatenated "
    "and mixed by the output projection.")


def focus_from_click(T: int) -> None:
    """A click on a token of the left column makes it the query (and its lines the only ones drawn)."""
    points = ((state.get(K.ATT_LINES_CHART) or {}).get("selection") or {}).get("points") or []
    for point in points:
        if isinstance(point, dict) and point.get("x") == 0 and isinstance(point.get("y"), (int, float)):
            if 0 <= int(point["y"]) < T and T <= MAX_CHIPS:
                state[K.ATT_QUERY] = int(point["y"])
                state[K.ATT_LINES_FOCUS] = True
                state[K.QUERY_MOVED] = True  # the query chips sit outside the views' fragment
            return


def lines_between_tokens(seen: Seen, p: Pick) -> None:
    n_heads = seen.cfg.n_heads
    c1, c2 = st.columns([2, 1])
    if not isinstance(state.get(K.ATT_LINES_HEADS), list) or \
            any(h not in range(n_heads) for h in state[K.ATT_LINES_HEADS]):
        state[K.ATT_LINES_HEADS] = list(range(n_heads)) if p.head == MEAN_HEAD else [p.head]
    chosen = S.ATT_LINES_HEADS.multiselect(c1, options=list(range(n_heads)), format_func=lambda h: f"head {h}")
    focus = S.ATT_LINES_FOCUS.toggle(c2)
    if not chosen:
        st.info("Pick at least one head to draw its lines.")
        return
    show_figure(fhv.head_lines(seen.patterns[p.layer, chosen].numpy(), seen.labels, chosen,
                               focus=p.query if focus else None,
                               title=f"Layer {p.layer}: each query (left) to the keys it looks at (right)"),
                key=K.ATT_LINES_CHART, on_select=lambda: focus_from_click(seen.T), selection_mode="points")
    st.caption("BertViz's head view. A line joins a token on the left (the query) to each token on the right it may "
               "look at; its opacity is the attention weight (lines under 0.02 are left out, and opacities are "
               "rounded to 0.05). Each head has its own colour. The same weights as the heatmap, drawn so the "
               "strongest links stand out.")


def on_the_text(seen: Seen, p: Pick) -> None:
    mode = S.ATT_TEXT_MODE.radio(st, horizontal=True)
    pat, labels = seen.pattern(p.layer, p.head), seen.labels
    where = f"Layer {p.layer}, {head_name(p.head)}"
    if mode == "where the query looks":
        values, visible = pat[p.query].numpy(), p.query
        title = f"{where}: where token {p.query} '{fa.plotly_text(labels[p.query])}' looks"
    else:
        values, visible = (pat.sum(0) / torch.arange(seen.T, 0, -1)).numpy(), None
        title = f"{where}: mean weight each token receives"
    show_figure(fhv.attention_text(values, labels, query=p.query if visible is not None else None, visible=visible,
                                   scale=p.scale, title=title,
                                   value_name="weight" if visible is not None else "mean weight"),
                key=K.ATT_TEXT_CHART)
    st.caption("The prompt set as text, each token coloured by its weight (CircuitsVis's idiom). Grey tokens come "
               "after the query, which cannot look at them. The outlined token is the query.")


def inside_the_head(seen: Seen, p: Pick) -> None:
    """One head's computation step by step (Transformer Explainer), and BertViz's neuron view."""
    if p.head == MEAN_HEAD:
        st.info("Pick a single head above: the mean of the heads is not one computation.")
        return
    cfg, labels = seen.cfg, seen.labels
    steps = head_steps(seen.model, seen.cache, p.layer, p.head, p.query)
    st.markdown(f"Head {p.head} of layer {p.layer} computing the output for token {p.query} "
                f"**{md_text(labels[p.query])}**, with the model's real numbers (d_model {cfg.d_model}, "
                f"d_head {cfg.d_head}).")
    show_figure(fhv.head_steps_figure(steps, labels), key=K.ATT_STEPS_CHART)
    st.caption("Each panel is one step; its title gives the shape. Blue is negative, red positive, each panel on its "
               "own scale (hover for the value). The softmax row is the same row as the heatmap's; the last panel "
               "is what this head adds to the residual stream (the layer adds its output bias once for all heads).")
    keep_valid(K.ATT_NEURON_KEY, list(range(p.query + 1)), p.query)
    state.setdefault(K.ATT_NEURON_KEY, p.query)
    key_token = S.ATT_NEURON_KEY.select_slider(st, options=list(range(p.query + 1)),
                                               format_func=lambda j: f"{j} {labels[j]}")
    show_figure(fhv.neuron_view(steps, key_token, labels, title=f"Query {p.query} · key {key_token}"),
                key=K.ATT_NEURON_CHART)
    st.caption("BertViz's neuron view: the query and key vectors dimension by dimension and their product. The "
               "products sum to the dot product; scaled by 1/√d_head it is the score the softmax turns into the "
               "weight.")


def value_weighted_view(seen: Seen, p: Pick) -> None:
    """Kobayashi et al. (2020): the weights beside weight x the size of what each value writes."""
    cfg, labels, T = seen.cfg, seen.labels, seen.T
    v = values_from_input(seen.model, p.layer, seen.cache[attention_input_name(p.layer, cfg.norm)])
    vw = value_weighted(seen.model, p.layer, v, seen.patterns[p.layer])  # [heads, T, T]
    shares = row_shares(vw.mean(0) if p.head == MEAN_HEAD else vw[p.head])
    left, right = st.columns(2, gap="medium")
    size = int(min(560, max(380, 320 + 7 * T)))
    with left:
        show_figure(fa.attention_heatmap(seen.pattern(p.layer, p.head).numpy(), labels, scale=p.scale, query=p.query,
                                         title=f"Attention weights, layer {p.layer}, {head_name(p.head)}",
                                         height=size), key=K.ATT_VW_RAW)
    with right:
        show_figure(fa.attention_heatmap(shares.numpy(), labels, scale=p.scale, query=p.query, value_name="share",
                                         height=size, title="Weight × ‖value · W_O‖, as a share of each row"),
                    key=K.ATT_VW_WEIGHTED)
    if T >= 2:
        sink, chance = first_token_scores(seen.patterns[p.layer]), first_token_chance(T)  # sink: [heads]
        shown = range(cfg.n_heads) if p.head == MEAN_HEAD else [p.head]
        sinks = [f"head {h}: {float(sink[h]):.2f}" for h in shown if float(sink[h]) >= 0.5]
        st.markdown(f"**Attention sinks** (mean weight on the first token, uniform attention: {chance:.2f}): "
                    + (", ".join(sinks) + " park most of their weight on token 0." if sinks else
                       f"none of {'these heads' if p.head == MEAN_HEAD else 'this head'} puts half its weight there "
                       f"(here: {', '.join(f'{float(sink[h]):.2f}' for h in shown)})."))
    st.caption("Kobayashi et al. (2020): what a key contributes is its weight times the size of what its value "
               "writes, ‖αᵢⱼ vⱼ W_O‖. A head that puts heavy weight on a token whose value is tiny (often the first "
               "token, an attention sink) looks important in the weights and small here.")


def all_heads_of_the_layer(seen: Seen, p: Pick) -> None:
    H, T = seen.cfg.n_heads, seen.T
    cols = next((c for c in (6, 5, 4) if H % c == 0), min(H, 6)) if H > 4 else H
    rows_n = -(-H // cols)
    K_ = seen.grid_prefix(H)
    grid = seen.patterns.new_full((rows_n * cols, K_, K_), float("nan"))
    grid[:H] = seen.patterns[p.layer, :, :K_, :K_]
    names = [[f"head {r * cols + c}" if r * cols + c < H else "" for c in range(cols)] for r in range(rows_n)]
    show_figure(fa.attention_grid(grid.reshape(rows_n, cols, K_, K_).numpy(), seen.labels[:K_], panel_names=names,
                                  scale=p.scale, title=f"Layer {p.layer}: every head",
                                  selected=divmod(p.head, cols) if p.head != MEAN_HEAD else None),
                key=K.ATT_LAYER_GRID)
    note = f" Showing the first {K_} of {T} tokens (earlier rows do not depend on later tokens)." if K_ < T else ""
    st.caption("Same layout as the single heatmap, one panel per head, one colour scale for all. Pick a head above, "
               "or click one in the Entropy map." + note)


def model_view(seen: Seen, p: Pick) -> None:
    cfg, T = seen.cfg, seen.T
    average = S.ATT_MV_MEAN.toggle(st, persist_state="session")
    shown = seen.patterns.mean(1, keepdim=True) if average else seen.patterns
    K_ = seen.grid_prefix(shown.shape[0] * shown.shape[1])
    col_names = ["mean of heads"] if average else [f"head {h}" for h in range(cfg.n_heads)]
    show_figure(fa.model_view(shown[:, :, :K_, :K_].numpy(), seen.labels[:K_],
                              row_names=[f"layer {l}" for l in range(cfg.n_layers)], col_names=col_names,
                              col_ticks=None if average or cfg.n_heads <= 8 else [f"H{h}" for h in range(cfg.n_heads)],
                              scale=p.scale, selected=None if average or p.head == MEAN_HEAD else (p.layer, p.head),
                              title="Every layer (rows) and head (columns)", clickable=not average),
                key=K.ATT_MODEL_VIEW, on_select=lambda: open_head(K.ATT_MODEL_VIEW, seen, means_too=False),
                selection_mode="points")
    note = f" Showing the first {K_} of {T} tokens (earlier rows do not depend on later tokens)." if K_ < T else ""
    st.caption("Early layers often look at the previous token or the first token; later layers mix more widely. "
               "Hover a panel for its weights; the outlined panel is the chosen head; click the orange square in a "
               "panel's corner to open that head." + note)


def entropy_map(seen: Seen, p: Pick) -> None:
    entropy = analysis.attention_entropy(seen.patterns)        # [layers, heads, query]
    show_figure(fa.entropy_map(entropy.mean(-1).numpy(), query_entropy=entropy[..., p.query].numpy(),
                               query_label=seen.labels[p.query],
                               uniform_entropy=analysis.uniform_attention_entropy(seen.T),
                               selected=(p.layer, p.head) if p.head != MEAN_HEAD else None,
                               title="Attention entropy per head (mean over query tokens)"),
                key=K.ATT_ENTROPY_CHART, on_select=lambda: open_head(K.ATT_ENTROPY_CHART, seen, means_too=True),
                selection_mode="points")
    st.caption("Entropy measures how spread out a row is, in nats: 0 when a query puts all its weight on one key, "
               "ln(n) when it spreads evenly over n keys. Dark cells are focused heads; the colour scale ends at the "
               "value for even spreading. Click a cell to open that head.")


VIEW_DRAWERS = dict(zip(VIEWS, (one_head, lines_between_tokens, on_the_text, inside_the_head, value_weighted_view,
                                all_heads_of_the_layer, model_view, entropy_map)))


# ---- generation -----------------------------------------------------------------------------------------------

def use_generated_text(text: str) -> None:
    state[K.PROMPT] = text[:MAX_PROMPT_CHARS]
    state[K.ATT_QUERY] = None  # the new last token


def finished_generation(run: dict, seen: Seen, p: Pick) -> None:
    """A finished run, replayed at any step: the map of every layer that fits beside the text so far and that step's
    next-token bars."""
    live.status_line(run, live=False)
    steps = run["steps"]
    if not steps:
        return
    prompt_ids, new_ids = list(run["prompt"]), [s.token_id for s in steps]
    b1, b2 = st.columns([3, 2], vertical_alignment="bottom")
    with b1:
        step = live.replay_step(run, K.ATT_GEN_STEP)
    b2.button("Look at the whole text in every view", key=K.ATT_GEN_USE, on_click=use_generated_text,
              args=(decode(prompt_ids + new_ids),), icon=":material/north:",
              help="Makes prompt and continuation the sidebar's prompt, so the views above (lines, text, the head's "
                   "computation...) and every other page show the generated tokens too.")
    if any(s.context_shifted for s in steps):
        first = next(i for i, s in enumerate(steps) if s.context_shifted)
        st.caption(f"From step {first} the text was longer than the context ({seen.cfg.n_ctx} tokens): "
                   "the model saw only the most recent tokens.")
    shown = live.up_to(run, step)
    left, right = st.columns([3, 2], gap="medium")
    with left:
        live.generation_map(shown, layer=p.layer, head=p.head, scale=p.scale, key=K.ATT_GEN_MAP, every_layer=True,
                            on_pick=picked_from_map(seen))
        figure_download(lambda: fg.generation_heatmap(
            [seen_row(s, p) for s in shown["steps"]], [s.window_start for s in shown["steps"]],
            token_labels(prompt_ids + new_ids[:step + 1]), len(prompt_ids), scale=p.scale,
            title=f"Layer {p.layer}, {head_name(p.head)}: attention of each generating query"),
            file_name=f"generation-layer-{p.layer}-{head_name(p.head).replace(' ', '-')}.html", key=K.ATT_GEN_HEATMAP)
    with right:
        live.text_so_far(run, live=False, upto=step)
        chosen = steps[step]
        top_ids = [t[0] for t in chosen.top]
        show_figure(fg.next_token_bars(
            top_ids, [t[1] for t in chosen.top], [t[2] for t in chosen.top], token_labels(top_ids),
            sampled_id=chosen.token_id, sampled_rank=chosen.rank, sampled_prob=chosen.prob, sampled_label=chosen.piece,
            n_allowed=chosen.n_allowed, kept_mass=chosen.kept_mass,
            title=f"Step {step}: next-token probabilities", cut_by=live.cut_reason(run["settings"])),
            key=K.ATT_GEN_BARS)
        st.caption("Top 20 over the whole vocabulary, after temperature. Orange: the sampled token; grey: "
                   f"cut by {live.cut_reason(run['settings'])}.")


def seen_row(step, p: Pick):
    """One generation step's attention row for the picked layer and head."""
    return (step.attention[p.layer].mean(0) if p.head == MEAN_HEAD else step.attention[p.layer, p.head]).numpy()


def draw_running(run: dict, seen: Seen) -> None:
    """The live fragment's redraw, with the pickers' current values."""
    live.draw_live(run, layer=state.get(K.ATT_LAYER, 0), head=state.get(K.ATT_HEAD, 0),
                   scale=state.get(K.ATT_SCALE, S.ATT_SCALE.default), map_key=K.ATT_GEN_MAP_LIVE,
                   on_pick=picked_from_map(seen), text_height=LIVE_TEXT_PX)


# The page's own layout rules (style only; no user or model text): less room above the title, so the map fits the
# first screen; on a phone a smaller title.
PAGE_CSS = ("<style>[data-testid='stMainBlockContainer'] {padding-top: 4rem;} "
            "@media (max-width: 640px) {[data-testid='stMainBlockContainer'] {padding-top: 3.5rem;} "
            "[data-testid='stMainBlockContainer'] h1 {font-size: 1.4rem; padding: 0;}}</style>")
LIVE_TEXT_PX = 180  # the live text's box: a long run scrolls inside it, so the next-token list stays in view


def main() -> None:
    st.html(PAGE_CSS)
    st.title("Attention", help="Each token builds its next representation from a weighted mix of the tokens before "
                               "it. A head is one such mix, with its own weights: one map per head, several heads per "
                               "layer. Generate lets the model write and shows where each new token looked.")
    page_prompt_box(height=68)  # a phone's first screen: its sidebar, with the prompt, starts closed
    seen = read_prompt()
    found = detectors(seen) if seen.T >= 2 else []
    if found:
        open_on_the_best_head(seen, found)
    keep_valid(K.ATT_LAYER, list(range(seen.cfg.n_layers)), 0)
    keep_valid(K.ATT_HEAD, seen.heads, 0)
    follow_query_to_the_new_prompt(seen.ids)
    keep_valid(K.ATT_QUERY, list(range(seen.T)) + [None], None)
    keep_valid(K.ATT_QUERY_POS, list(range(seen.T)), seen.T - 1)
    # display order: a generation (live or finished) above the map, so what it draws is on the first screen;
    # Generate's callback has already started the model before any of this is drawn
    generation_box, map_box, chips_box, examples_box, tabs_box = (st.container() for _ in range(5))
    with chips_box:
        query = token_chips(seen)
    with examples_box:
        example_buttons()
        from gptviz.app.overview import overview_link; overview_link()  # the whole forward pass at a glance
    job = live.stored_generation(seen.spec, seen.ids, live.ATTENTION.page)
    if job is not None and job.running:
        with generation_box:
            live.live_fragment(seen.spec, seen.ids, live.ATTENTION.page, lambda run: draw_running(run, seen))
    st.fragment(views)(seen, query, found, Boxes(generation_box, map_box, tabs_box))


main()
