"""Attention: where each token looks, in every layer and head, and live while the model writes.

The prompt runs through the model once (cached by model and prompt). The pickers (layer, head, colour scale)
and the views live in one fragment, so a pick reruns only that part of the page. A generation runs in a
background thread and a second fragment redraws it on a timer, so neither slows the other.
"""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st
import torch

from gptviz import analysis, ui
from gptviz import attention_map as amap
from gptviz.attention_map import attention_map
from gptviz.links import ATTENTION_VIEWS
from gptviz.figures import attention as fa
from gptviz.figures import generation as fg
from gptviz.figures import head_views as fhv
from gptviz.head_steps import (attention_input_name, first_token_chance, first_token_scores, head_steps, row_shares,
                               value_weighted, values_from_input)
from gptviz.tokenizer import decode, token_labels

MEAN = ui.MEAN_HEAD       # head option: the mean of the layer's heads
MAX_CHIPS = 256           # longer prompts pick the query with a slider
GRID_CELLS = 600_000      # most heatmap cells one small-multiples figure draws
CAPTURE_BYTES = 256 * 2**20  # most memory the cached weights of one prompt may take (layers x heads x T x T)
VIEWS = list(ATTENTION_VIEWS)
PAGE = "attention"
GENERATION_ERROR = "_att_generation_error"  # why Generate could not start, shown once under the buttons
QUERY_MOVED = "_att_query_moved"  # set by a click in a view that picks the query: the whole page redraws

state = st.session_state


md_text, head_name, keep_valid = ui.md_text, ui.head_name, ui.keep_valid


st.title("Attention")
st.caption("Every token builds its next representation from a weighted mix of the tokens before it. "
           "The weights are the attention pattern: one row per token, one pattern per head, "
           "several heads per layer.")

spec, model = ui.require_model()
cfg = model.config
prompt = ui.require_prompt(cfg.n_ctx, cfg.vocab_size)
ids = prompt.ids
longest = int(math.sqrt(CAPTURE_BYTES / (4 * cfg.n_layers * cfg.n_heads)))  # the patterns dominate the capture
if len(ids) > longest:
    st.warning(f"This page keeps the last {longest} of the {len(ids)} tokens: the attention weights of every "
               f"layer and head grow with the square of the length, and {cfg.n_layers} x {cfg.n_heads} heads "
               f"over more tokens would take over {CAPTURE_BYTES // 2**20} MiB.")
    ids = ids[-longest:]
T = len(ids)
labels = token_labels(ids)

try:
    with st.spinner("Running the model on the prompt..."):
        _, cache = ui.capture_cache(spec, ids, ui.attention_page_names(cfg.n_layers, cfg.norm))
except (ValueError, RuntimeError, IndexError) as err:
    st.error(f"The model could not run on this prompt: {err}")
    st.stop()
patterns = cache.patterns()      # [layers, heads, query, key]

layers, heads = list(range(cfg.n_layers)), list(range(cfg.n_heads)) + [MEAN]
keep_valid("att_layer", layers, 0)
keep_valid("att_head", heads, 0)


def follow_query_to_the_new_prompt() -> None:
    """When the prompt changes, the chosen query follows its token, not its index: the last token stays the last;
    another goes to the same token id nearest its old place, or to the last token when the new prompt lacks it."""
    before = state.get("att_query_for")
    chosen = state.get("att_query")
    if before is None or tuple(before[0]) == tuple(ids) or chosen is None:
        return
    old_ids, old_query = before
    if old_query is None or old_query >= len(old_ids) or old_query == len(old_ids) - 1:
        state["att_query"] = None
        return
    same = [i for i, t in enumerate(ids) if t == old_ids[old_query]]
    state["att_query"] = min(same, key=lambda i: abs(i - old_query)) if same else None


follow_query_to_the_new_prompt()
keep_valid("att_query", list(range(T)) + [None], None)
keep_valid("att_query_pos", list(range(T)), T - 1)


def open_head_from_entropy_map() -> None:
    """Entropy-map click: open that head in the One head view."""
    picked = fa.selected_head(state.get("att_entropy_chart") or {})
    if picked is not None and picked[0] in layers and picked[1] in heads:
        state["att_layer"], state["att_head"] = picked
        state["att_view"] = VIEWS[0]


def open_head_from_model_view() -> None:
    """Model-view click on a panel's marker: open that head in the One head view."""
    picked = fa.selected_head(state.get("att_model_view") or {})
    if picked is not None and picked[0] in layers and picked[1] in range(cfg.n_heads):
        state["att_layer"], state["att_head"] = picked
        state["att_view"] = VIEWS[0]


def generation_controls() -> None:
    """The generation's settings and buttons. They sit outside the views' fragment: Generate reruns the whole
    page once, which starts the model and the live view's timer in the same run."""
    st.divider()
    st.subheader("Watch it generate")
    st.caption("The model writes one token at a time. Each new token is predicted by the last token's query, "
               "so each step adds one row of attention below; the Generation page has the step-by-step detail. "
               "Changing the layer, head, colour scale or view while it writes does not stop it.")
    g = st.columns(5)
    keep_valid("att_gen_topk", range(cfg.vocab_size + 1), 0)  # a link's value past this model's vocabulary
    n_new = g[0].number_input("New tokens", min_value=1, max_value=200, value=20, step=1, key="att_gen_n")
    temperature = g[1].slider("Temperature", 0.0, 2.0, 1.0, 0.05, key="att_gen_temp",
                              help="Divides the logits before the softmax: below 1 sharpens, above 1 flattens; "
                                   "0 always takes the most probable token.")
    top_k = g[2].number_input("Top-k (0 = off)", min_value=0, max_value=cfg.vocab_size, value=0, step=1,
                              key="att_gen_topk", help="Sample only from the k most probable tokens.")
    top_p = g[3].slider("Top-p (1 = off)", 0.05, 1.0, 0.9, 0.05, key="att_gen_topp",
                        help="Sample only from the most probable tokens whose probabilities add up to p.")
    seed = g[4].number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, step=1, key="att_gen_seed",
                             help="The same seed and settings give the same text.")
    b1, b2, _ = st.columns([1, 1, 4])
    b1.button("Generate", type="primary", key="att_generate", width="stretch", on_click=start_generating)
    b2.button("Stop", key="att_stop", width="stretch", on_click=ui.stop_generation,
              help="Ends the generation and keeps the tokens written so far.")
    if state.get(GENERATION_ERROR):
        st.error(state.pop(GENERATION_ERROR))


def start_generating() -> None:
    """Generate's callback: it runs before the page's script, so the model starts writing before anything is
    drawn (the script that follows shares the interpreter with it, so the sooner the better)."""
    top_p = float(state.get("att_gen_topp", 0.9))
    settings = dict(max_new_tokens=int(state.get("att_gen_n", 20)), temperature=float(state.get("att_gen_temp", 1.0)),
                    top_k=int(state.get("att_gen_topk", 0)) or None, top_p=top_p if top_p < 1 else None,
                    seed=int(state.get("att_gen_seed", 0)))
    try:
        ui.start_generation(spec, model, ids, settings, PAGE)
    except ValueError as err:
        state[GENERATION_ERROR] = f"Cannot generate with these settings: {err}"
    except RuntimeError as err:
        state[GENERATION_ERROR] = f"Generation could not start: {err}"


# The page in display order. Generate is handled first, so the model starts writing before the rest is drawn. The
# views' fragment draws a finished generation into generation_box (so it follows the head picker); a running one
# is live_generation's.
chips_box, detector_box, views_box, controls_box, generation_box = (st.container() for _ in range(5))
with controls_box:
    generation_controls()

# ---- the prompt as token chips (pick the query token) ---------------------------------------------------
with chips_box:
    st.markdown(f"**{T} token{'s' if T != 1 else ''}** (GPT-2 BPE pieces; ␣ is a space, ↵ a newline, `<0xF0>` one byte of a "
                "character split across tokens). Pick one to see where it looks.")
    if T <= MAX_CHIPS:
        query = st.pills("Query token", list(range(T)), format_func=lambda i: md_text(labels[i]), key="att_query",
                         label_visibility="collapsed", persist_state="page",
                         help="The token whose attention the bar chart and the outlined heatmap row show.")
    else:
        query = st.slider("Query position", 0, T - 1, value=T - 1, key="att_query_pos")
        st.text(" | ".join(labels))
state["att_query_for"] = (tuple(ids), query)
query = T - 1 if query is None else int(query)



def jump_to_head() -> None:
    """A row picked in the detector table opens that head."""
    rows = ((state.get("att_detectors") or {}).get("selection") or {}).get("rows") or []
    if rows and 0 <= int(rows[0]) < cfg.n_layers * cfg.n_heads:
        state["att_layer"], state["att_head"] = divmod(int(rows[0]), cfg.n_heads)


with detector_box, st.expander("Heads worth a look: detector scores beside their chance levels (pick a row to open "
                               "a head)"):
    if T < 2:
        st.info("The detectors need a prompt of at least two tokens.")
    else:
        length = min(50, cfg.n_ctx // 2)
        table = {"head": [f"layer {l}, head {h}" for l in layers for h in range(cfg.n_heads)]}
        columns = {}
        for name, scores, chance in (
                ("previous-token", analysis.previous_token_scores(patterns), analysis.previous_token_chance(T)),
                ("duplicate-token", analysis.duplicate_token_scores(patterns, ids),
                 analysis.duplicate_token_chance(ids)),
                ("induction", ui.induction_scores(spec, length) if length >= 2 else None,
                 analysis.induction_chance(length) if length >= 2 else 0.0),
                ("first token (sink)", first_token_scores(patterns), first_token_chance(T))):
            if scores is None:
                continue
            column = f"{name} (chance {chance:.3f})"
            table[column] = scores.flatten().numpy()
            columns[column] = st.column_config.ProgressColumn(column, min_value=0.0, max_value=1.0, format="%.3f")
        st.dataframe(pd.DataFrame(table), hide_index=True, width="stretch", height=min(400, 38 + 35 * len(table["head"])),
                     column_config=columns, on_select=jump_to_head, selection_mode="single-row", key="att_detectors")
        st.caption("Mean attention weights in [0, 1]; the header gives what uniform attention over the same keys "
                   "scores. Previous-token, duplicate-token and first-token scores use this prompt; induction uses "
                   f"its own sequence of {length} random tokens repeated once (a prompt rarely repeats itself). "
                   "The Activations page draws them as heatmaps.")



def pattern_of(layer: int, head: int):
    return patterns[layer].mean(0) if head == MEAN else patterns[layer, head]


def grid_prefix(panels: int) -> int:
    """Tokens the small multiples draw: all, or the first K so panels * K * K stays under GRID_CELLS.
    A prefix is exact: under the causal mask, later tokens do not change earlier rows."""
    return min(T, max(2, int(math.sqrt(GRID_CELLS / panels))))


pick_from_map = ui.map_pick("att_layer", "att_head", cfg.n_layers, cfg.n_heads)  # the map's picks move the pickers


def focus_from_click() -> None:
    """A click on a token of the left column makes it the query (and its lines the only ones drawn)."""
    points = ((state.get("att_lines_chart") or {}).get("selection") or {}).get("points") or []
    for point in points:
        if isinstance(point, dict) and point.get("x") == 0 and isinstance(point.get("y"), (int, float)):
            if 0 <= int(point["y"]) < T and T <= MAX_CHIPS:
                state["att_query"] = int(point["y"])
                state["att_lines_focus"] = True
                state[QUERY_MOVED] = True  # the query chips sit outside the views' fragment
            return


@st.fragment
def views() -> None:
    """The pickers and every view: a pick reruns only this, never the model (the capture above is kept)."""
    if state.pop(QUERY_MOVED, False):
        st.rerun()  # a view picked another query token: the chips above must show it
    c_layer, c_head, c_scale = st.columns([1, 1, 1.4])
    layer = c_layer.selectbox("Layer", layers, key="att_layer", format_func=lambda i: f"layer {i}",
                              persist_state="session")
    head = c_head.selectbox("Head", heads, key="att_head", format_func=head_name, persist_state="session",
                            help="Each head has its own queries and keys, so each learns its own way of looking. "
                                 "The mean shows where the layer as a whole looks.")
    state.setdefault("att_scale", fa.DEFAULT_SCALE)
    scale = c_scale.selectbox("Colour scale", list(fa.SCALES), key="att_scale", format_func=fa.SCALES.get,
                              persist_state="session",
                              help="Shared by every attention figure on this page. The default, the square root, makes "
                                   "small weights visible (a linear scale shows only a head's few largest); hover always "
                                   "shows the weight itself.")

    view_tabs = dict(zip(VIEWS, st.tabs(VIEWS, key="att_view", on_change="rerun")))

    def is_open(view: str) -> bool:
        """Draw a tab's content only while it is the open one (a closed tab costs nothing)."""
        return view_tabs[view].open is not False

    # ---- one head ----------------------------------------------------------------------------------------
    with view_tabs["One head"]:
        if is_open("One head"):
            pat = pattern_of(layer, head)
            left, right = st.columns([3, 2], gap="medium")
            with left:
                height = int(min(660, max(440, 380 + 8 * T)))
                attention_map(amap.payload(patterns.numpy(), labels, layer=layer, head=head, query=query, scale=scale,
                                           mean_head=MEAN, head_names=[head_name(h) for h in heads],
                                           height=height), key="att_map", on_pick=pick_from_map)
                ui.figure_download(lambda: fa.attention_heatmap(pat.numpy(), labels, scale=scale, query=query,
                                                                title=f"Layer {layer}, {head_name(head)}",
                                                                height=height),
                                   file_name=f"layer-{layer}-{head_name(head).replace(' ', '-')}.html", key="att_heatmap")
                st.caption("Pick a layer or a head above the map: it redraws at once, and the views beside and "
                           "below follow. Rows are queries (the token looking), columns are keys (the tokens it "
                           "looks at); each row sums to 1. Grey cells are the causal mask, not zero weights: a token "
                           "cannot look at tokens after it. The outlined row is the chosen query token; hover a "
                           "cell for its weight.")
            with right:
                row = pat[query, : query + 1]
                ui.show_figure(fa.query_bars(row.numpy(), labels, query,
                                             title=f"Where token {query} '{fa.plotly_text(labels[query])}' looks"),
                               key="att_query_bars")
                order = row.argsort(descending=True)[:5].tolist()
                st.dataframe(pd.DataFrame({"key token": [labels[k] for k in order], "position": order,
                                           "weight": [float(row[k]) for k in order]}),
                             hide_index=True, width="stretch",
                             column_config={"weight": st.column_config.ProgressColumn(
                                 "weight", min_value=0.0, max_value=1.0, format="%.3f")})
            with st.expander("How to read attention", expanded=False):
                st.markdown(
                    "- **Scores and softmax.** Each token makes a *query* vector; every earlier token offers a "
                    "*key*. Their dot products, scaled by 1/√d_head, are the scores; softmax turns one "
                    "query's scores into weights that are positive and add up to 1.\n"
                    "- **Causal mask.** Before the softmax the scores of later tokens are set to −∞, so their "
                    "weight is exactly 0: while generating, the model must not see the future. That is the "
                    "grey triangle; the first token can only look at itself.\n"
                    "- **Heads.** A layer runs several heads side by side, each with its own query, key and "
                    "value projections, so one head can track the previous token while another looks back "
                    "at the start. Their outputs are concatenated and mixed by the output projection.")

    # ---- lines between tokens (BertViz's head view) -------------------------------------------------------
    with view_tabs["Lines between tokens"]:
        if is_open("Lines between tokens"):
            c1, c2 = st.columns([2, 1])
            default_heads = list(range(cfg.n_heads)) if head == MEAN else [head]
            if not isinstance(state.get("att_lines_heads"), list) or \
                    any(h not in range(cfg.n_heads) for h in state["att_lines_heads"]):
                state["att_lines_heads"] = default_heads
            chosen = c1.multiselect("Heads to overlay", list(range(cfg.n_heads)), key="att_lines_heads",
                                    format_func=lambda h: f"head {h}", help="One colour per head.")
            focus = c2.toggle("Only the chosen query's lines", key="att_lines_focus",
                              help="Or click a token in the left column.")
            if not chosen:
                st.info("Pick at least one head to draw its lines.")
            else:
                ui.show_figure(fhv.head_lines(patterns[layer, chosen].numpy(), labels, chosen,
                                              focus=query if focus else None,
                                              title=f"Layer {layer}: each query (left) to the keys it looks at (right)"),
                               key="att_lines_chart", on_select=focus_from_click, selection_mode="points")
                st.caption("BertViz's head view. A line joins a token on the left (the query) to each token on the "
                           "right it may look at; its opacity is the attention weight (lines under 0.02 are left out, "
                           "and opacities are rounded to 0.05). Each head has its own colour. The same weights as "
                           "the heatmap, drawn so the strongest links stand out.")

    # ---- attention on the text (CircuitsVis) --------------------------------------------------------------
    with view_tabs["On the text"]:
        if is_open("On the text"):
            mode = st.radio("Colour each token by", ["where the query looks", "how much it is looked at"],
                            key="att_text_mode", horizontal=True,
                            help="The chosen query token's row of weights, or each token's mean weight received "
                                 "from the queries that can see it (itself and every later token).")
            pat = pattern_of(layer, head)
            if mode == "where the query looks":
                values, visible = pat[query].numpy(), query
                text_title = f"Layer {layer}, {head_name(head)}: where token {query} '{fa.plotly_text(labels[query])}' looks"
            else:
                values = (pat.sum(0) / torch.arange(T, 0, -1)).numpy()
                visible = None
                text_title = f"Layer {layer}, {head_name(head)}: mean weight each token receives"
            ui.show_figure(fhv.attention_text(values, labels, query=query if visible is not None else None,
                                              visible=visible, scale=scale, title=text_title,
                                              value_name="weight" if visible is not None else "mean weight"),
                           key="att_text_chart")
            st.caption("The prompt set as text, each token coloured by its weight (CircuitsVis's idiom). Grey tokens "
                       "come after the query, which cannot look at them. The outlined token is the query.")

    # ---- one head's computation, step by step (Transformer Explainer) ---------------------------------------
    with view_tabs["Inside the head"]:
        if is_open("Inside the head"):
            if head == MEAN:
                st.info("Pick a single head above: the mean of the heads is not one computation.")
            else:
                steps = head_steps(model, cache, layer, head, query)
                st.markdown(f"Head {head} of layer {layer} computing the output for token {query} "
                            f"**{md_text(labels[query])}**, with the model's real numbers (d_model {cfg.d_model}, "
                            f"d_head {cfg.d_head}).")
                ui.show_figure(fhv.head_steps_figure(steps, labels), key="att_steps_chart")
                st.caption("Each panel is one step; its title gives the shape. Blue is negative, red positive, each "
                           "panel on its own scale (hover for the value). The softmax row is the same row as the "
                           "heatmap's; the last panel is what this head adds to the residual stream (the layer adds "
                           "its output bias once for all heads).")
                keep_valid("att_neuron_key", list(range(query + 1)), query)
                state.setdefault("att_neuron_key", query)
                key_token = st.select_slider("Key token for the neuron view", list(range(query + 1)), key="att_neuron_key",
                                             format_func=lambda j: f"{j} {labels[j]}")
                ui.show_figure(fhv.neuron_view(steps, key_token, labels, title=f"Query {query} · key {key_token}"),
                               key="att_neuron_chart")
                st.caption("BertViz's neuron view: the query and key vectors dimension by dimension and their "
                           "product. The products sum to the dot product; scaled by 1/√d_head it is the score the "
                           "softmax turns into the weight.")

    # ---- value-weighted attention (Kobayashi et al., 2020) -----------------------------------------------
    with view_tabs["Value-weighted"]:
        if is_open("Value-weighted"):
            v = values_from_input(model, layer, cache[attention_input_name(layer, cfg.norm)])
            vw = value_weighted(model, layer, v, patterns[layer])  # [heads, T, T]
            shares = row_shares(vw.mean(0) if head == MEAN else vw[head])
            left, right = st.columns(2, gap="medium")
            size = int(min(560, max(380, 320 + 7 * T)))
            with left:
                ui.show_figure(fa.attention_heatmap(pattern_of(layer, head).numpy(), labels, scale=scale, query=query,
                                                    title=f"Attention weights, layer {layer}, {head_name(head)}",
                                                    height=size), key="att_vw_raw")
            with right:
                ui.show_figure(fa.attention_heatmap(shares.numpy(), labels, scale=scale, query=query,
                                                    value_name="share", height=size,
                                                    title="Weight × ‖value · W_O‖, as a share of each row"),
                               key="att_vw_weighted")
            if T >= 2:
                sink = first_token_scores(patterns[layer])       # [heads]
                chance = first_token_chance(T)
                shown_heads = range(cfg.n_heads) if head == MEAN else [head]
                sinks = [f"head {h}: {float(sink[h]):.2f}" for h in shown_heads if float(sink[h]) >= 0.5]
                st.markdown(f"**Attention sinks** (mean weight on the first token, uniform attention: {chance:.2f}): "
                            + (", ".join(sinks) + " park most of their weight on token 0." if sinks else
                               f"none of {'these heads' if head == MEAN else 'this head'} puts half its weight there "
                               f"(here: {', '.join(f'{float(sink[h]):.2f}' for h in shown_heads)})."))
            st.caption("Kobayashi et al. (2020): what a key contributes is its weight times the size of what its "
                       "value writes, ‖αᵢⱼ vⱼ W_O‖. A head that puts heavy weight on a token whose value is tiny (often "
                       "the first token, an attention sink) looks important in the weights and small here.")

    # ---- all heads of one layer -------------------------------------------------------------------------
    with view_tabs["All heads of the layer"]:
        if is_open("All heads of the layer"):
            H = cfg.n_heads
            cols = next((c for c in (6, 5, 4) if H % c == 0), min(H, 6)) if H > 4 else H
            rows_n = -(-H // cols)
            K = grid_prefix(H)
            stack = patterns[layer, :, :K, :K]
            grid = stack.new_full((rows_n * cols, K, K), float("nan"))
            grid[:H] = stack
            names = [[f"head {r * cols + c}" if r * cols + c < H else "" for c in range(cols)] for r in range(rows_n)]
            ui.show_figure(fa.attention_grid(grid.reshape(rows_n, cols, K, K).numpy(), labels[:K], panel_names=names,
                                             scale=scale, title=f"Layer {layer}: every head",
                                             selected=divmod(head, cols) if head != MEAN else None),
                           key="att_layer_grid")
            note = f" Showing the first {K} of {T} tokens (earlier rows do not depend on later tokens)." if K < T else ""
            st.caption("Same layout as the single heatmap, one panel per head, one colour scale for all. "
                       "Pick a head above, or click one in the Entropy map." + note)

    # ---- model view -------------------------------------------------------------------------------------
    with view_tabs["Model view: every layer and head"]:
        if is_open("Model view: every layer and head"):
            average = st.toggle("Average over heads", key="att_mv_mean", persist_state="session",
                                help="One panel per layer: the mean of its heads.")
            shown = patterns.mean(1, keepdim=True) if average else patterns
            K = grid_prefix(shown.shape[0] * shown.shape[1])
            col_names = ["mean of heads"] if average else [f"head {h}" for h in range(cfg.n_heads)]
            selected = None if average or head == MEAN else (layer, head)
            ui.show_figure(fa.model_view(shown[:, :, :K, :K].numpy(), labels[:K],
                                         row_names=[f"layer {l}" for l in layers], col_names=col_names,
                                         col_ticks=None if average or cfg.n_heads <= 8 else
                                         [f"H{h}" for h in range(cfg.n_heads)],
                                         scale=scale, selected=selected, title="Every layer (rows) and head (columns)",
                                         clickable=not average),
                           key="att_model_view", on_select=open_head_from_model_view, selection_mode="points")
            note = f" Showing the first {K} of {T} tokens (earlier rows do not depend on later tokens)." if K < T else ""
            st.caption("Early layers often look at the previous token or the first token; later layers mix "
                       "more widely. Hover a panel for its weights; the outlined panel is the chosen head; click "
                       "the orange square in a panel's corner to open that head." + note)

    # ---- entropy map ------------------------------------------------------------------------------------
    with view_tabs["Entropy map"]:
        if is_open("Entropy map"):
            entropy = analysis.attention_entropy(patterns)        # [layers, heads, query]
            ui.show_figure(
                fa.entropy_map(entropy.mean(-1).numpy(), query_entropy=entropy[..., query].numpy(),
                               query_label=labels[query], uniform_entropy=analysis.uniform_attention_entropy(T),
                               selected=(layer, head) if head != MEAN else None,
                               title="Attention entropy per head (mean over query tokens)"),
                key="att_entropy_chart", on_select=open_head_from_entropy_map, selection_mode="points")
            st.caption("Entropy measures how spread out a row is, in nats: 0 when a query puts all its weight on "
                       "one key, ln(n) when it spreads evenly over n keys. Dark cells are focused heads; the "
                       "colour scale ends at the value for even spreading. Click a cell to open that head.")

    job = ui.stored_generation(spec, ids, PAGE)
    if job is not None and not job.running:  # a running one is live_generation's
        with generation_box:
            draw_generation(ui.generation_view(job), False, layer, head, scale)


# ---- live generation --------------------------------------------------------------------------------
def use_generated_text(text: str) -> None:
    state["prompt"] = text[: ui.MAX_PROMPT_CHARS]
    state["att_query"] = None  # the new last token


def draw_generation(run: dict, live: bool, layer: int, head, scale: str) -> None:
    steps = run["steps"]
    total = run["settings"]["max_new_tokens"]
    if live:
        st.progress(len(steps) / total, text=f"Generating: {len(steps)} of {total} tokens")
    elif run.get("stopped"):
        st.info(f"Stopped after {len(steps)} of {total} tokens; the text so far is kept.")
    if run.get("error"):
        st.error(f"Generation failed: {run['error']}")
    if not steps:
        return
    prompt_ids = list(run["prompt"])
    new_ids = [s.token_id for s in steps]
    ui.generated_text(decode(prompt_ids) + decode(new_ids), live)
    st.caption(f"The prompt's {len(prompt_ids)} tokens, then {len(new_ids)} new ones{ui.writing_speed(run, live)}.")
    if not live:
        st.button("Look at the whole text in every view", key="att_gen_use", on_click=use_generated_text,
                  args=(decode(prompt_ids + new_ids),), icon=":material/north:",
                  help="Makes prompt and continuation the sidebar's prompt, so the views above (lines, text, "
                       "the head's computation...) and every other page show the generated tokens too.")
    if any(s.context_shifted for s in steps):
        first = next(i for i, s in enumerate(steps) if s.context_shifted)
        st.caption(f"From step {first} the text was longer than the context ({cfg.n_ctx} tokens): "
                   "the model saw only the most recent tokens.")
    all_labels = token_labels(prompt_ids + new_ids)
    left, right = st.columns([3, 2], gap="medium")
    with left:
        # live: the picked layer only (a few hundred KB less per redraw); finished: every layer that fits
        attention_map(amap.generation_payload(steps, all_labels, len(prompt_ids), layer=layer, head=head,
                                              scale=scale, mean_head=MEAN, head_names=[head_name(h) for h in heads],
                                              every_layer=not live),
                      key="att_gen_map_live" if live else "att_gen_map", on_pick=pick_from_map)
        if not live:
            rows = [(s.attention[layer].mean(0) if head == MEAN else s.attention[layer, head]).numpy() for s in steps]
            ui.figure_download(lambda: fg.generation_heatmap(
                rows, [s.window_start for s in steps], all_labels, len(prompt_ids), scale=scale,
                title=f"Layer {layer}, {head_name(head)}: attention of each generating query"),
                file_name=f"generation-layer-{layer}-{head_name(head).replace(' ', '-')}.html", key="att_gen_heatmap")
    last = steps[-1]
    top_ids = [t[0] for t in last.top]
    with right:
        if live:
            ui.monospace_text(ui.next_token_text(steps), "next")
            return
        ui.show_figure(fg.next_token_bars(
            top_ids, [t[1] for t in last.top], [t[2] for t in last.top], token_labels(top_ids),
            sampled_id=last.token_id, sampled_rank=last.rank, sampled_prob=last.prob, sampled_label=last.piece,
            n_allowed=last.n_allowed, kept_mass=last.kept_mass,
            title=f"Step {len(steps) - 1}: next-token probabilities", cut_by=ui.cut_reason(run["settings"])),
            key="att_gen_live_bars" if live else "att_gen_bars")
        st.caption("Top 20 over the whole vocabulary, after temperature. Orange: the sampled token; grey: "
                   f"cut by {ui.cut_reason(run['settings'])}.")


def live_generation() -> None:
    """Redrawn every LIVE_REDRAW_S while the model writes, with the pickers' current values. The tick that finds
    it over draws the last state, then reruns the page once, which stops the timer."""
    job = ui.stored_generation(spec, ids, PAGE)
    if job is None:
        st.rerun()
    ui.wait_if_nearly_done(job)
    run = ui.generation_view(job)
    draw_generation(run, run["running"], state.get("att_layer", 0), state.get("att_head", 0),
                    state.get("att_scale", fa.DEFAULT_SCALE))
    if not run["running"]:
        st.rerun()


job = ui.stored_generation(spec, ids, PAGE)
with generation_box:
    if job is None:
        st.caption("Press Generate to watch the model continue the prompt.")
    elif job.running:
        st.fragment(live_generation, run_every=ui.LIVE_REDRAW_S)()
with views_box:
    views()
