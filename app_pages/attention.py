"""Attention: where each token looks, in every layer and head, and live while the model writes.

The prompt runs through the model once (cached by model and prompt); every display widget here (layer,
head, colour scale, query token, view) only redraws.
"""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from gptviz import analysis, ui
from gptviz.links import ATTENTION_VIEWS
from gptviz.figures import attention as fa
from gptviz.figures import generation as fg
from gptviz.tokenizer import decode, token_labels

MEAN = ui.MEAN_HEAD       # head option: the mean of the layer's heads
MAX_CHIPS = 256           # longer prompts pick the query with a slider
GRID_CELLS = 600_000      # most heatmap cells one small-multiples figure draws
CAPTURE_BYTES = 256 * 2**20  # most memory the cached weights of one prompt may take (layers x heads x T x T)
VIEWS = list(ATTENTION_VIEWS)

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
longest = int(math.sqrt(CAPTURE_BYTES / (4 * cfg.n_layers * cfg.n_heads)))
if len(ids) > longest:
    st.warning(f"This page keeps the last {longest} of the {len(ids)} tokens: the attention weights of every "
               f"layer and head grow with the square of the length, and {cfg.n_layers} x {cfg.n_heads} heads "
               f"over more tokens would take over {CAPTURE_BYTES // 2**20} MiB.")
    ids = ids[-longest:]
T = len(ids)
labels = token_labels(ids)

try:
    with st.spinner("Running the model on the prompt..."):
        _, cache = ui.capture_cache(spec, ids, ui.pattern_names(cfg.n_layers))
except (ValueError, RuntimeError, IndexError) as err:
    st.error(f"The model could not run on this prompt: {err}")
    st.stop()
patterns = cache.patterns()      # [layers, heads, query, key]

layers, heads = list(range(cfg.n_layers)), list(range(cfg.n_heads)) + [MEAN]
keep_valid("att_layer", layers, 0)
keep_valid("att_head", heads, 0)
keep_valid("att_query", list(range(T)) + [None], None)
keep_valid("att_query_pos", list(range(T)), T - 1)


def open_head_from_entropy_map() -> None:
    """Entropy-map click: open that head in the One head view."""
    picked = fa.selected_head(state.get("att_entropy_chart") or {})
    if picked is not None and picked[0] in layers and picked[1] in heads:
        state["att_layer"], state["att_head"] = picked
        state["att_view"] = VIEWS[0]


# ---- the prompt as token chips (pick the query token) ---------------------------------------------------
st.markdown(f"**{T} tokens** (GPT-2 BPE pieces; ␣ is a space, ↵ a newline, `<0xF0>` one byte of a "
            "character split across tokens). Pick one to see where it looks.")
if T <= MAX_CHIPS:
    query = st.pills("Query token", list(range(T)), format_func=lambda i: md_text(labels[i]), key="att_query",
                     label_visibility="collapsed", persist_state="page",
                     help="The token whose attention the bar chart and the outlined heatmap row show.")
else:
    query = st.slider("Query position", 0, T - 1, value=T - 1, key="att_query_pos")
    st.text(" | ".join(labels))
query = T - 1 if query is None else int(query)

c_layer, c_head, c_scale = st.columns([1, 1, 1.4])
layer = c_layer.selectbox("Layer", layers, key="att_layer", format_func=lambda i: f"layer {i}",
                          persist_state="session")
head = c_head.selectbox("Head", heads, key="att_head", format_func=head_name, persist_state="session",
                        help="Each head has its own queries and keys, so each learns its own way of looking. "
                             "The mean shows where the layer as a whole looks.")
scale = c_scale.selectbox("Colour scale", list(fa.SCALES), key="att_scale", format_func=fa.SCALES.get,
                          persist_state="session",
                          help="Shared by every attention figure on this page. Hover always shows the weight.")


def pattern_of(layer: int, head: int):
    return patterns[layer].mean(0) if head == MEAN else patterns[layer, head]


def grid_prefix(panels: int) -> int:
    """Tokens the small multiples draw: all, or the first K so panels * K * K stays under GRID_CELLS.
    A prefix is exact: under the causal mask, later tokens do not change earlier rows."""
    return min(T, max(2, int(math.sqrt(GRID_CELLS / panels))))


view_tabs = st.tabs(VIEWS, key="att_view", on_change="rerun")

# ---- one head ----------------------------------------------------------------------------------------
with view_tabs[0]:
    if view_tabs[0].open is not False:
        pat = pattern_of(layer, head)
        left, right = st.columns([3, 2], gap="medium")
        with left:
            ui.show_figure(fa.attention_heatmap(pat.numpy(), labels, scale=scale, query=query,
                                                title=f"Layer {layer}, {head_name(head)}",
                                                height=int(min(660, max(440, 380 + 8 * T)))), key="att_heatmap")
            st.caption("Rows are queries (the token looking), columns are keys (the tokens it looks at); "
                       "each row sums to 1. Grey cells are the causal mask, not zero weights: a token "
                       "cannot look at tokens after it. The outlined row is the chosen query token.")
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

# ---- all heads of one layer -------------------------------------------------------------------------
with view_tabs[1]:
    if view_tabs[1].open is not False:
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
with view_tabs[2]:
    if view_tabs[2].open is not False:
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
                                     scale=scale, selected=selected, title="Every layer (rows) and head (columns)"),
                       key="att_model_view")
        note = f" Showing the first {K} of {T} tokens (earlier rows do not depend on later tokens)." if K < T else ""
        st.caption("Early layers often look at the previous token or the first token; later layers mix "
                   "more widely. Hover a panel for its weights; the outlined panel is the chosen head." + note)

# ---- entropy map ------------------------------------------------------------------------------------
with view_tabs[3]:
    if view_tabs[3].open is not False:
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

# ---- live generation --------------------------------------------------------------------------------
st.divider()
st.subheader("Watch it generate")
st.caption("The model writes one token at a time. Each new token is predicted by the last token's query, "
           "so each step adds one row of attention below; the Generation page has the step-by-step detail.")

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
start = b1.button("Generate", type="primary", key="att_generate", width="stretch")
b2.button("Stop", key="att_stop", width="stretch",
          help="Ends the generation and keeps the tokens written so far.")

text_box = st.empty()
live_left, live_right = st.columns([3, 2], gap="medium")
heat_box, bars_box = live_left.empty(), live_right.empty()


def draw_generation(run: dict, live: bool) -> None:
    steps = run["steps"]
    if not steps:
        return
    prompt_ids = list(run["prompt"])
    new_ids = [s.token_id for s in steps]
    total = run["settings"]["max_new_tokens"]
    with text_box.container():
        if live:
            st.progress(len(steps) / total, text=f"Generating: {len(steps)} of {total} tokens")
        elif run.get("stopped"):
            st.info(f"Stopped after {len(steps)} of {total} tokens; the text so far is kept.")
        st.code(decode(prompt_ids) + decode(new_ids), language=None, wrap_lines=True)
        st.caption(f"The prompt's {len(prompt_ids)} tokens, then {len(new_ids)} new ones.")
        if any(s.context_shifted for s in steps):
            first = next(i for i, s in enumerate(steps) if s.context_shifted)
            st.caption(f"From step {first} the text was longer than the context ({cfg.n_ctx} tokens): "
                       "the model saw only the most recent tokens.")
    rows = [(s.attention[layer].mean(0) if head == MEAN else s.attention[layer, head]).numpy() for s in steps]
    all_labels = token_labels(prompt_ids + new_ids)
    with heat_box.container():
        ui.show_figure(fg.generation_heatmap(rows, [s.window_start for s in steps], all_labels, len(prompt_ids),
                                             scale=scale, title=f"Layer {layer}, {head_name(head)}: "
                                                                f"attention of each generating query"),
                       key=None if live else "att_gen_heatmap")
    last = steps[-1]
    top_ids = [t[0] for t in last.top]
    with bars_box.container():
        ui.show_figure(fg.next_token_bars(
            top_ids, [t[1] for t in last.top], [t[2] for t in last.top], token_labels(top_ids),
            sampled_id=last.token_id, sampled_rank=last.rank, sampled_prob=last.prob, sampled_label=last.piece,
            n_allowed=last.n_allowed, kept_mass=last.kept_mass,
            title=f"Step {len(steps) - 1}: next-token probabilities", cut_by=ui.cut_reason(run["settings"])),
            key=None if live else "att_gen_bars")
        st.caption("Top 20 over the whole vocabulary, after temperature. Orange: the sampled token; grey: "
                   f"cut by {ui.cut_reason(run['settings'])}.")


if start:
    settings = dict(max_new_tokens=int(n_new), temperature=float(temperature),
                    top_k=int(top_k) or None, top_p=float(top_p) if top_p < 1 else None, seed=int(seed))
    try:
        ui.run_generation(spec, model, ids, settings, on_step=lambda run: draw_generation(run, live=True))
    except ValueError as err:
        st.error(f"Cannot generate with these settings: {err}")
    except RuntimeError as err:
        st.error(f"Generation failed: {err}")
    else:
        st.rerun()
else:
    done = ui.stored_generation(spec, ids)
    if done is not None:
        draw_generation(done, live=False)
    else:
        text_box.caption("Press Generate to watch the model continue the prompt.")
