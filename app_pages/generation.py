"""Generation: the model writes one token at a time; every step's distribution, cut-off and attention.

The model writes in a background thread while a fragment redraws what it has so far (gptviz.app.live), so drawing
never slows the model and a widget change does not stop it. Inspecting the steps afterwards (step slider, layer,
head, table) runs no model but the replayed step's top contributors (one frozen backward pass, cached).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st
import torch

from gptviz.app import keys as K
from gptviz.app import live, live_why, reproduce
from gptviz.app import settings as S
from gptviz.app.display import head_name, md_text, show_figure
from gptviz.app.seen import read_prompt
from gptviz.app.services import LimitError
from gptviz.app.services import generation as services
from gptviz.app.sidebar import keep_valid
from gptviz.figures import attention as fa
from gptviz.figures import generation as fg
from gptviz.model.config import GPTConfig
from gptviz.model.heads import MEAN_HEAD, head_or_mean
from gptviz.model.tokenizer import token_labels, tokenizer_for

state = st.session_state

HOW_IT_CHOOSES = (
    "- **Logits to probabilities.** The last position's output is one score (logit) per token; the softmax turns "
    "them into probabilities. **Temperature** divides the logits first: below 1 the likely tokens get likelier, "
    "above 1 the distribution flattens; 0 means always take the top token (greedy).\n"
    "- **Top-k** keeps only the k most probable tokens; **top-p** (nucleus) keeps the smallest set of most probable "
    "tokens whose probabilities add up to p. The kept probabilities are rescaled to sum to 1 and one token is drawn "
    "with the **seed**'s random generator.\n"
    "- **One forward pass per token.** Keys and values of earlier tokens are cached, so each step runs the model on "
    "the newest token only. When the text outgrows the context window ({n_ctx} tokens) the oldest tokens drop out "
    "and the cache is rebuilt from the rest."
)


@dataclass
class Pick:
    layer: int
    head: int
    scale: str


def pickers(cfg: GPTConfig) -> Pick:
    """Which layer's and head's attention the figures show, and on what colour scale."""
    layers, heads = list(range(cfg.n_layers)), list(range(cfg.n_heads)) + [MEAN_HEAD]
    keep_valid(K.GEN_LAYER, layers, 0)
    keep_valid(K.GEN_HEAD, heads, MEAN_HEAD)
    a1, a2, a3 = st.columns([1, 1, 1.4])
    layer = S.GEN_LAYER.selectbox(a1, options=layers, format_func=lambda i: f"layer {i}", persist_state="session")
    head = S.GEN_HEAD.selectbox(
        a2, options=heads, index=heads.index(S.GEN_HEAD.default), format_func=head_name, persist_state="session"
    )
    S.GEN_SCALE.setdefault(state)
    scale = S.GEN_SCALE.selectbox(a3, format_func=fa.SCALES.get, persist_state="session")
    return Pick(layer, head, scale)


def bars_figure(step, title: str, cut_by: str, enc):
    top_ids = [t[0] for t in step.top]
    return fg.next_token_bars(
        top_ids,
        [t[1] for t in step.top],
        [t[2] for t in step.top],
        token_labels(top_ids, enc),
        sampled_id=step.token_id,
        sampled_rank=step.rank,
        sampled_prob=step.prob,
        sampled_label=step.piece,
        n_allowed=step.n_allowed,
        kept_mass=step.kept_mass,
        title=title,
        cut_by=cut_by,
    )


def heat_figure(run: dict, p: Pick, highlight: int):
    steps = run["steps"]
    rows = [head_or_mean(s.attention[p.layer], p.head).numpy() for s in steps]
    all_labels = token_labels(list(run["prompt"]) + [s.token_id for s in steps], run["enc"])
    return fg.generation_heatmap(
        rows,
        [s.window_start for s in steps],
        all_labels,
        len(run["prompt"]),
        highlight=highlight,
        scale=p.scale,
        hover_tokens=True,
        title=f"Layer {p.layer}, {head_name(p.head)}: attention of each generating query",
    )


def draw_running(run: dict, cfg: GPTConfig) -> None:
    """The live fragment's redraw, with the pickers' current values."""
    live.draw_live(
        run,
        layer=state.get(K.GEN_LAYER, 0),
        head=state.get(K.GEN_HEAD, MEAN_HEAD),
        scale=state.get(K.GEN_SCALE, fa.DEFAULT_SCALE),
        map_key=K.GEN_LIVE_MAP,
        on_pick=live.map_pick(K.GEN_LAYER, K.GEN_HEAD, cfg.n_layers, cfg.n_heads),
    )


def inspected_step(run: dict, cfg: GPTConfig, p: Pick) -> int:
    """The finished run, replayed at any step: the heatmap's rows so far beside the text so far and that step's
    distribution."""
    steps = run["steps"]
    live.status_line(run, live=False)
    step_i = live.replay_step(run, S.GEN_STEP)  # the table's row pick sets it too
    step = steps[step_i]
    left, right = st.columns([3, 2], gap="medium")
    with right:
        live.text_so_far(run, live=False, upto=step_i)
        show_figure(
            bars_figure(
                step, f"Step {step_i}: the next-token distribution", live.cut_reason(run["settings"]), run["enc"]
            ),
            key=K.GEN_BARS,
        )
        st.caption(
            f"'{md_text(step.piece)}' was sampled with p = {step.prob:.3g} (rank {step.rank:,}); the "
            f"distribution's entropy was {step.entropy:.2f} nats. Top 20 over all {cfg.vocab_size:,} tokens "
            f"after temperature; grey bars were cut by {live.cut_reason(run['settings'])}."
        )
        live_why.step_contributors(run, step_i, state[K.GENERATION]["spec"])
    with left:
        show_figure(heat_figure(live.up_to(run, step_i), p, step_i), key=K.GEN_HEATMAP)
        with st.expander("How to read this map"):
            st.markdown(
                "One row per generated token: where the query that predicted it looked (the row label is the "
                "token it predicted). Grey: later positions; light grey: tokens that slid out of the context "
                "window. The dotted line ends the prompt; the outlined row is the step replayed."
            )
    shifted = [i for i, s in enumerate(steps) if s.context_shifted]
    if shifted:
        st.info(
            f"From step {shifted[0]} the text was longer than the context window ({cfg.n_ctx} tokens): at each "
            f"of those {len(shifted)} steps the model saw only the last {cfg.n_ctx} tokens, so the oldest ones "
            "stopped influencing it."
        )
    return step_i


def step_across_heads(run: dict, step_i: int, cfg: GPTConfig, p: Pick) -> None:
    steps = run["steps"]
    step = steps[step_i]
    st.subheader(f"Step {step_i} across the heads of layer {p.layer}")
    all_labels = token_labels(list(run["prompt"]) + [s.token_id for s in steps], run["enc"])
    query_pos = step.position - 1
    att = step.attention[p.layer]  # [heads, keys]
    titles = [f"head {h}" for h in range(cfg.n_heads)]
    if cfg.n_heads > 1:
        att = torch.cat([att, att.mean(0, keepdim=True)])
        titles.append("mean")
    show_figure(
        fg.step_attention(
            att.numpy(),
            all_labels[step.window_start : step.position],
            window_start=step.window_start,
            query_label=all_labels[query_pos],
            predicted_label=step.piece,
            row_titles=titles,
            scale=p.scale,
            title=f"Query '{fa.plotly_text(all_labels[query_pos])}' (position {query_pos}) "
            f"predicting '{fa.plotly_text(step.piece)}'",
        ),
        key=K.GEN_STEP_ATTENTION,
    )
    st.caption(
        "Each row is one head's attention for this step: how the query of the last token mixed the tokens it "
        "could see before predicting the next one."
    )


def pick_step(S: int) -> None:
    rows = state[K.GEN_TABLE].selection.rows
    if rows and S > 1:
        state[K.GEN_STEP] = int(rows[0])


def all_steps(run: dict) -> None:
    steps, S = run["steps"], len(run["steps"])
    st.subheader("All steps")
    show_figure(
        fg.step_curves(
            [s.prob for s in steps],
            [s.entropy for s in steps],
            [s.piece for s in steps],
            title="Sampled-token probability and entropy",
        ),
        key=K.GEN_CURVES,
    )
    st.caption(
        "Low entropy: the model was sure; a sampled token with a low probability is a gamble that "
        "temperature and top-k/top-p allow."
    )
    table = pd.DataFrame(
        {
            "step": range(S),
            "token": [s.piece for s in steps],
            "id": [s.token_id for s in steps],
            "probability": [s.prob for s in steps],
            "rank": [s.rank for s in steps],
            "entropy (nats)": [s.entropy for s in steps],
            "kept by top-k/top-p": [s.n_allowed for s in steps],
            "context shifted": ["yes" if s.context_shifted else "" for s in steps],  # text: not checkboxes to tick
            "top contributors (direct, found live)": live_why.labels_by_step(run),
            "why?": live_why.why_links(run),
        }
    )
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        height=min(420, 35 * S + 40),
        key=K.GEN_TABLE,
        on_select=lambda: pick_step(S),
        selection_mode="single-row",
        column_config={
            "why?": st.column_config.LinkColumn(display_text="graph ↗", help=live_why.LINK_HELP),
            "probability": st.column_config.NumberColumn(format="%.4g"),
            "entropy (nats)": st.column_config.NumberColumn(format="%.3f"),
        },
    )
    st.caption("Select a row to inspect that step above.")


def before_generating(spec, model, ids: tuple[int, ...], cfg: GPTConfig, p: Pick) -> None:
    """What the page opens on: the first step the model would take after the sidebar's prompt."""
    settings = live.settings_from(live.GENERATION)
    try:
        step = services.first_step(model, spec, tuple(ids), tuple(sorted(settings.items())))
    except LimitError as err:  # the server's memory has no room for the forward pass now
        st.warning(str(err))
        return
    st.caption(
        "Before generating: the distribution the first new token would be drawn from, and where the last "
        "prompt token looks to predict it. Press Generate to watch the model write."
    )
    run = {"prompt": tuple(ids), "steps": [step], "settings": settings, "enc": tokenizer_for(model)}
    left, right = st.columns([3, 2], gap="medium")
    with right:
        show_figure(
            bars_figure(step, "After the prompt: the next-token distribution", live.cut_reason(settings), run["enc"]),
            key=K.GEN_BARS,
        )
    with left:
        step_across_heads(run, 0, cfg, p)
    reproduce.show(reproduce.next_token(spec, ids, settings, reproduce.prompt_text()))


def main() -> None:
    st.title("Generation")
    st.caption(
        "A GPT writes one token at a time: it turns the text so far into a probability for every token in "
        "its vocabulary, a sampling rule picks one, the token is appended, and it goes again."
    )
    seen = read_prompt()
    spec, model, cfg, ids = seen.spec, seen.model, seen.cfg, list(seen.ids)
    with st.expander("How the next token is chosen"):
        st.markdown(HOW_IT_CHOOSES.format(n_ctx=cfg.n_ctx))
    live.controls(live.GENERATION, spec, model, ids)
    pick = pickers(cfg)
    job = live.stored_generation(spec, ids, live.GENERATION.page)
    if job is not None and job.running:
        live.live_fragment(spec, ids, live.GENERATION.page, lambda run: draw_running(run, cfg))
        return
    run = live.generation_view(job) if job is not None else None
    if run is None or not run["steps"]:
        if run is not None:
            live.status_line(run, live=False)
        before_generating(spec, model, ids, cfg, pick)
        return
    step_i = inspected_step(run, cfg, pick)
    step_across_heads(run, step_i, cfg, pick)
    all_steps(run)


main()
