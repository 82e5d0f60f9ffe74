"""Generation: the model writes one token at a time; every step's distribution, cut-off and attention.

The model writes in a background thread (gptviz.live_generation) while a fragment redraws what it has so far a
few times a second, so drawing never slows the model and a widget change does not stop it. Inspecting the steps
afterwards (step slider, layer, head, table) runs no model.
"""
from __future__ import annotations


import pandas as pd
import streamlit as st
import torch

from gptviz import attention_map as amap
from gptviz import ui
from gptviz.attention_map import attention_map
from gptviz.figures import attention as fa
from gptviz.figures import generation as fg
from gptviz.tokenizer import EOT, decode, token_labels

MEAN = ui.MEAN_HEAD
PAGE = "generation"
state = st.session_state


md_text, head_name, keep_valid = ui.md_text, ui.head_name, ui.keep_valid


st.title("Generation")
st.caption("A GPT writes one token at a time: it turns the text so far into a probability for every token "
           "in its vocabulary, a sampling rule picks one, the token is appended, and it goes again.")

spec, model = ui.require_model()
cfg = model.config
prompt = ui.require_prompt(cfg.n_ctx, cfg.vocab_size)
ids = prompt.ids

with st.expander("How the next token is chosen"):
    st.markdown(
        "- **Logits to probabilities.** The last position's output is one score (logit) per token; the "
        "softmax turns them into probabilities. **Temperature** divides the logits first: below 1 the "
        "likely tokens get likelier, above 1 the distribution flattens; 0 means always take the top token "
        "(greedy).\n"
        "- **Top-k** keeps only the k most probable tokens; **top-p** (nucleus) keeps the smallest set of "
        "most probable tokens whose probabilities add up to p. The kept probabilities are rescaled to sum "
        "to 1 and one token is drawn with the **seed**'s random generator.\n"
        "- **One forward pass per token.** Keys and values of earlier tokens are cached, so each step runs "
        "the model on the newest token only. When the text outgrows the context window "
        f"({cfg.n_ctx} tokens) the oldest tokens drop out and the cache is rebuilt from the rest.")

g = st.columns(5)
keep_valid("gen_topk", range(cfg.vocab_size + 1), 0)  # a link's value past this model's vocabulary
n_new = g[0].number_input("New tokens", min_value=1, max_value=200, value=30, step=1, key="gen_n")
temperature = g[1].slider("Temperature", 0.0, 2.0, 1.0, 0.05, key="gen_temp",
                          help="0 = greedy: always the most probable token.")
top_k = g[2].number_input("Top-k (0 = off)", min_value=0, max_value=cfg.vocab_size, value=0, step=1,
                          key="gen_topk")
top_p = g[3].slider("Top-p (1 = off)", 0.05, 1.0, 0.9, 0.05, key="gen_topp")
seed = g[4].number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, step=1, key="gen_seed")
b1, b2, b3 = st.columns([1, 1, 4], vertical_alignment="center")
start = b1.button("Generate", type="primary", key="gen_generate", width="stretch")
b2.button("Stop", key="gen_stop", width="stretch", help="Ends the generation and keeps what was written.",
          on_click=ui.stop_generation)
stop_at_eos = b3.checkbox(f"Stop at {EOT}", value=False, key="gen_eos",
                          help="GPT-2's end-of-text token; a trained model writes it where a document ends.")

layers, heads = list(range(cfg.n_layers)), list(range(cfg.n_heads)) + [MEAN]
keep_valid("gen_layer", layers, 0)
keep_valid("gen_head", heads, MEAN)
a1, a2, a3 = st.columns([1, 1, 1.4])
layer = a1.selectbox("Attention of layer", layers, key="gen_layer", format_func=lambda i: f"layer {i}",
                     persist_state="session")
head = a2.selectbox("Head", heads, index=len(heads) - 1, key="gen_head", format_func=head_name,
                    persist_state="session")
state.setdefault("gen_scale", fa.DEFAULT_SCALE)
scale = a3.selectbox("Colour scale", list(fa.SCALES), key="gen_scale", format_func=fa.SCALES.get,
                     persist_state="session", help="For the attention figures; the default, the square root, makes "
                                                   "small weights visible. Hover always shows the weight itself.")

page_text_box = st.empty()
live_left, live_right = st.columns([3, 2], gap="medium")
page_heat_box, page_bars_box = live_left.empty(), live_right.empty()


def bars_figure(step, title: str, cut_by: str):
    top_ids = [t[0] for t in step.top]
    return fg.next_token_bars(top_ids, [t[1] for t in step.top], [t[2] for t in step.top], token_labels(top_ids),
                              sampled_id=step.token_id, sampled_rank=step.rank, sampled_prob=step.prob,
                              sampled_label=step.piece, n_allowed=step.n_allowed, kept_mass=step.kept_mass,
                              title=title, cut_by=cut_by)


def heat_figure(run: dict, highlight: int | None = None, live: bool = False):
    steps = run["steps"]
    rows = [(s.attention[layer].mean(0) if head == MEAN else s.attention[layer, head]).numpy() for s in steps]
    all_labels = token_labels(list(run["prompt"]) + [s.token_id for s in steps])
    return fg.generation_heatmap(rows, [s.window_start for s in steps], all_labels, len(run["prompt"]),
                                 highlight=highlight, scale=scale, hover_tokens=not live,
                                 title=f"Layer {layer}, {head_name(head)}: attention of each generating query")


def draw(run: dict, live: bool, highlight: int | None = None, boxes=None) -> None:
    """The text, the attention heatmap and (live) the last step's bars, into `boxes` (text, heatmap, bars;
    default: the page's placeholders)."""
    text_box, heat_box, bars_box = boxes or (page_text_box, page_heat_box, page_bars_box)
    steps = run["steps"]
    total = run["settings"]["max_new_tokens"]
    if not steps:
        if live:
            text_box.progress(0.0, text=f"Generating: 0 of {total} tokens")
        return
    with text_box.container():
        if live:
            st.progress(len(steps) / total, text=f"Generating: {len(steps)} of {total} tokens")
        elif run.get("stopped"):
            st.info(f"Stopped after {len(steps)} of {total} tokens; the text so far is kept.")
        elif len(steps) < total:
            st.info(f"The model wrote {EOT} after {len(steps)} tokens, which ends the text.")
        ui.generated_text(decode(run["prompt"]) + decode([s.token_id for s in steps]), live)
        st.caption(f"The prompt's {len(run['prompt'])} tokens, then {len(steps)} new ones{ui.writing_speed(run, live)}.")
    with heat_box.container():
        if live:  # the canvas component while it writes: a Plotly heatmap per redraw slowed the model
            labels = token_labels(list(run["prompt"]) + [s.token_id for s in steps])
            attention_map(amap.generation_payload(steps, labels, len(run["prompt"]), layer=layer, head=head,
                                                  scale=scale, mean_head=MEAN,
                                                  head_names=[head_name(h) for h in heads], every_layer=False),
                          key="gen_live_map", on_pick=pick_from_map)
        else:
            ui.show_figure(heat_figure(run, highlight, live), key="gen_heatmap")
        if not live:
            st.caption("One row per generated token: where the query that predicted it looked (the row label "
                       "is the token it predicted). Grey: later positions; light grey: tokens that slid out "
                       "of the context window. The dotted line ends the prompt; the outlined row is the step "
                       "inspected on the right.")
    if live:  # the bar chart comes with the finished run's step inspector
        with bars_box.container():
            ui.monospace_text(ui.next_token_text(steps), "next")


pick_from_map = ui.map_pick("gen_layer", "gen_head", cfg.n_layers, cfg.n_heads)  # the live map moves the pickers


if start:
    settings = dict(max_new_tokens=int(n_new), temperature=float(temperature), top_k=int(top_k) or None,
                    top_p=float(top_p) if top_p < 1 else None, seed=int(seed), stop_at_eos=bool(stop_at_eos))
    state.pop("gen_step", None)  # a new run: inspect its last step
    try:
        ui.start_generation(spec, model, ids, settings, PAGE)
    except ValueError as err:
        st.error(f"Cannot generate with these settings: {err}")
        st.stop()
    except RuntimeError as err:
        st.error(f"Generation could not start: {err}")
        st.stop()

job = ui.stored_generation(spec, ids, PAGE)


def live_generation() -> None:
    """Redrawn every LIVE_REDRAW_S while the model writes; once it is done, the whole page draws the result."""
    ui.wait_if_nearly_done(job)
    run = ui.generation_view(job)
    if not run["running"]:
        st.rerun()
    text = st.container()
    left, right = st.columns([3, 2], gap="medium")
    draw(run, live=True, boxes=(text, left, right))


if job is not None and job.running:
    st.fragment(live_generation, run_every=ui.LIVE_REDRAW_S)()
    st.stop()

run = ui.generation_view(job) if job is not None else None
if run is not None and run["error"]:
    st.error(f"Generation failed: {run['error']}")
if run is None or not run["steps"]:
    page_text_box.info("Press Generate to let the model continue the prompt in the sidebar.")
    st.stop()

steps = run["steps"]
S = len(steps)
keep_valid("gen_step", list(range(S)), S - 1)
state.setdefault("gen_step", S - 1)  # the default lives in session state only: the table's row pick sets it too
with live_right:
    step_i = st.slider("Inspect step", 0, S - 1, key="gen_step") if S > 1 else 0
    step = steps[step_i]
draw(run, live=False, highlight=step_i)          # fills the placeholders above the slider's column
with live_right:
    ui.show_figure(bars_figure(step, f"Step {step_i}: the next-token distribution",
                                ui.cut_reason(run["settings"])), key="gen_bars")
    st.caption(f"'{md_text(step.piece)}' was sampled with p = {step.prob:.3g} (rank {step.rank:,}); the "
               f"distribution's entropy was {step.entropy:.2f} nats. Top 20 over all {cfg.vocab_size:,} tokens "
               f"after temperature; grey bars were cut by {ui.cut_reason(run['settings'])}.")

shifted = [i for i, s in enumerate(steps) if s.context_shifted]
if shifted:
    st.info(f"From step {shifted[0]} the text was longer than the context window ({cfg.n_ctx} tokens): at "
            f"each of those {len(shifted)} steps the model saw only the last {cfg.n_ctx} tokens, so the "
            "oldest ones stopped influencing it.")

st.subheader(f"Step {step_i} across the heads of layer {layer}")
all_labels = token_labels(list(run["prompt"]) + [s.token_id for s in steps])
query_pos = step.position - 1
att = step.attention[layer]                     # [heads, keys]
titles = [f"head {h}" for h in range(cfg.n_heads)]
if cfg.n_heads > 1:
    att = torch.cat([att, att.mean(0, keepdim=True)])
    titles.append("mean")
ui.show_figure(fg.step_attention(att.numpy(), all_labels[step.window_start: step.position],
                                 window_start=step.window_start, query_label=all_labels[query_pos],
                                 predicted_label=step.piece, row_titles=titles, scale=scale,
                                 title=f"Query '{fa.plotly_text(all_labels[query_pos])}' (position {query_pos}) "
                                       f"predicting '{fa.plotly_text(step.piece)}'"), key="gen_step_attention")
st.caption("Each row is one head's attention for this step: how the query of the last token mixed the "
           "tokens it could see before predicting the next one.")

st.subheader("All steps")
ui.show_figure(fg.step_curves([s.prob for s in steps], [s.entropy for s in steps], [s.piece for s in steps],
                              title="Sampled-token probability and entropy"), key="gen_curves")
st.caption("Low entropy: the model was sure; a sampled token with a low probability is a gamble that "
           "temperature and top-k/top-p allow.")
table = pd.DataFrame({
    "step": range(S), "token": [s.piece for s in steps], "id": [s.token_id for s in steps],
    "probability": [s.prob for s in steps], "rank": [s.rank for s in steps],
    "entropy (nats)": [s.entropy for s in steps], "kept by top-k/top-p": [s.n_allowed for s in steps],
    "context shifted": ["yes" if s.context_shifted else "" for s in steps]})  # text: not checkboxes to tick


def pick_step() -> None:
    rows = state["gen_table"].selection.rows
    if rows and S > 1:
        state["gen_step"] = int(rows[0])


st.dataframe(table, hide_index=True, width="stretch", height=min(420, 35 * S + 40), key="gen_table",
             on_select=pick_step, selection_mode="single-row",
             column_config={"probability": st.column_config.NumberColumn(format="%.4g"),
                            "entropy (nats)": st.column_config.NumberColumn(format="%.3f")})
st.caption("Select a row to inspect that step above.")
