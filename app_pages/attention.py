"""Attention: where each token looks, in every layer and head, and live while the model writes.

The prompt runs through the model once (cached by model and prompt). The pickers (layer, head, colour scale)
and the views live in one fragment, so a pick reruns only that part of the page; each view is one function, drawn
only while its tab is open. A generation runs in a background thread and a second fragment redraws it on a timer.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from gptviz.app import keys as K
from gptviz.app import live, reproduce
from gptviz.app import settings as S
from gptviz.app.display import (
    PHONE_TITLE_CSS,
    distinct_labels,
    figure_download,
    head_name,
    md_text,
    show_figure,
)
from gptviz.app.links import sync_address
from gptviz.app.model_service import attention_page_names
from gptviz.app.overview import overview_link
from gptviz.app.seen import Seen, read_prompt
from gptviz.app.services import attention as services
from gptviz.app.sidebar import EXAMPLE_PROMPTS, MAX_PROMPT_CHARS, keep_valid, page_prompt_box, prompt_text
from gptviz.app.unit_nav import unit_pills
from gptviz.app.views import query_span
from gptviz.app.views.attention_views import (
    MAX_CHIPS,
    VIEW_DRAWERS,
    VIEWS,
    Pick,
    about_the_map,
    head_map,
    picked_from_map,
)
from gptviz.figures import attention as fa
from gptviz.figures import generation as fg
from gptviz.model import unit_id
from gptviz.model.heads import MEAN_HEAD, head_or_mean
from gptviz.model.tokenizer import decode, token_labels

state = st.session_state


def keep_last(cfg, T: int) -> int:
    """The page's longest prompt (its patterns fit the capture budget), said when the prompt is longer."""
    longest = services.longest_prompt(cfg)
    if T > longest:
        st.warning(
            f"This page keeps the last {longest} of the {T} tokens: the attention weights of every "
            f"layer and head grow with the square of the length, and {cfg.n_layers} x {cfg.n_heads} heads "
            f"over more tokens would take over {services.CAPTURE_BYTES // 2**20} MiB."
        )
    return longest


def follow_query_to_the_new_prompt(ids: tuple[int, ...]) -> None:
    """When the prompt changes, the chosen query follows its token, not its index: the last token stays the last;
    another goes to the same token id nearest its old place, or to the last token when the new prompt lacks it."""
    before, chosen = state.get(K.ATT_QUERY_FOR), state.get(K.ATT_QUERY)
    if before is None or tuple(before[0]) == tuple(ids) or chosen is None:
        return
    old_ids, old_query = before
    state.pop(K.ATT_QUERY_SPAN, None)  # a span of the old prompt's tokens: the query alone follows
    if old_query is None or old_query >= len(old_ids) or old_query == len(old_ids) - 1:
        state[K.ATT_QUERY] = None
        return
    same = [i for i, t in enumerate(ids) if t == old_ids[old_query]]
    state[K.ATT_QUERY] = min(same, key=lambda i: abs(i - old_query)) if same else None


def token_chips(seen: Seen) -> tuple[int, int]:
    """The prompt as token chips; the picked one is the query the views outline, or a span of them dragged across
    (query_span). Returns the queries picked, [start, end)."""
    T = seen.T
    st.markdown(
        f"**{T} token{'s' if T != 1 else ''}** (GPT-2 BPE pieces; ␣ is a space, ↵ a newline, `<0xF0>` one "
        "byte of a character split across tokens). Pick one to see where it looks; drag across several (or "
        "shift-click) to sum where they look."
    )
    if T <= MAX_CHIPS:
        chips = distinct_labels([md_text(label) for label in seen.labels])  # a repeated token: the copy clicked
        query = S.ATT_QUERY.pills(
            st,
            options=list(range(T)),
            format_func=chips.__getitem__,
            label_visibility="collapsed",
            persist_state="page",
            on_change=query_span.chip_clicked,
        )
    else:
        query = S.ATT_QUERY_POS.slider(st, min_value=0, max_value=T - 1, value=T - 1)
        st.text(" | ".join(seen.labels))
    state[K.ATT_QUERY_FOR] = (seen.ids, query)
    query = T - 1 if query is None else int(query)
    return query_span.span_gesture(T, query) if T <= MAX_CHIPS else (query, query + 1)


def open_on_the_best_head(seen: Seen, found: list[services.Detector]) -> None:
    """A first visit (no layer or head chosen, none in the link) or a loaded example opens on the head worth a look."""
    if not (state.pop(K.ATT_OPEN_BEST, False) or (K.ATT_LAYER not in state and K.ATT_HEAD not in state)):
        return
    best = services.head_worth_a_look(found)
    if best is not None:
        state[K.ATT_LAYER], state[K.ATT_HEAD] = best[0], best[1]


def jump_to_head(order: list[tuple[int, int]]) -> None:
    """A row picked in the detector table opens that head."""
    rows = ((state.get(K.ATT_DETECTORS) or {}).get("selection") or {}).get("rows") or []
    if rows and 0 <= int(rows[0]) < len(order):
        state[K.ATT_LAYER], state[K.ATT_HEAD] = order[int(rows[0])]


def detector_table(seen: Seen, found: list[services.Detector]) -> None:
    """Every head's detector scores beside their chance levels, the most telling detector's best heads first;
    picking a row opens the head."""
    if seen.T < 2:
        st.info("The detectors need a prompt of at least two tokens.")
        return
    best = services.head_worth_a_look(found)
    sort_by = best[2] if best is not None else found[1]
    n_heads = seen.cfg.n_heads
    order = sorted(
        ((layer, h) for layer in range(seen.cfg.n_layers) for h in range(n_heads)),
        key=lambda lh: -float(sort_by.scores[lh]),
    )
    table = {"head": [f"layer {layer}, head {h}" for layer, h in order]}
    columns = {}
    for d in sorted(found, key=lambda d: d is not sort_by):
        table[d.column] = [float(d.scores[lh]) for lh in order]
        columns[d.column] = st.column_config.ProgressColumn(d.column, min_value=0.0, max_value=1.0, format="%.3f")
    st.caption(
        f"Sorted by {sort_by.name}; pick a row to open that head.",
        help="Mean attention weights in [0, 1]; each header gives what uniform attention over the same keys "
        "scores (chance). Induction on this prompt: weight on the tokens that followed earlier copies of "
        "the query's token. The random-sequence induction score uses its own sequence repeated once (a "
        "prompt rarely repeats itself). The Activations page draws them as heatmaps.",
    )
    st.dataframe(
        pd.DataFrame(table),
        hide_index=True,
        width="stretch",
        height=38 + 35 * min(5, len(order)),
        column_config=columns,
        selection_mode="single-row",
        key=K.ATT_DETECTORS,
        on_select=lambda: jump_to_head(order),
    )
    unit_pills(
        "What the top heads do over the corpus",
        [unit_id.head_id(layer, h) for layer, h in order[:6]],
        K.per_item(K.UNIT_PILLS, "att_detectors"),
    )


def show_head(layer: int, head: int) -> None:
    state[K.ATT_LAYER], state[K.ATT_HEAD] = layer, head


def suggestion(found: list[services.Detector], p: Pick) -> None:
    """One line on the head worth a look, its score beside chance, measured; and whether the map shows it: when the
    pickers hold another head (a pick, or another model after the sidebar's LayerNorm placement), one click shows it."""
    best = services.head_worth_a_look(found)
    if best is None:
        st.caption(
            "No head of this model clears the bar on this prompt (a score of at least "
            f"{services.WORTH_A_LOOK} and {services.WORTH_OVER_CHANCE:g}x chance); try an example."
        )
        return
    layer, head, d = best
    shown = (p.layer, p.head) == (layer, head)
    st.markdown(
        f"**Worth a look: layer {layer}, head {head}**, this prompt's strongest {services.short_name(d)} head: "
        f"{float(d.scores[layer, head]):.2f} of its weight where that detector looks, against "
        f"{d.chance:.2f} for uniform attention. "
        + ("The map shows it." if shown else f"The map shows layer {p.layer}, {head_name(p.head)}."),
        help="Each detector measures one way of looking (the table below); chance is what attention spread "
        "evenly over the same tokens would score.",
    )
    if not shown:
        st.button(
            f"Show layer {layer}, head {head}",
            key=K.ATT_SHOW_SUGGESTED,
            on_click=show_head,
            args=(layer, head),
            icon=":material/arrow_back:",
            type="primary",
        )


def use_example(text: str) -> None:
    state[K.PROMPT] = text
    state[K.ATT_QUERY] = None
    state[K.ATT_OPEN_BEST] = True


def example_buttons() -> None:
    """The examples one click away, on the page itself (they also sit in the sidebar's menu)."""
    with st.container(horizontal=True, vertical_alignment="center", gap="xsmall"):
        st.markdown("**Examples:**", width="content")
        for i, (name, text) in enumerate(EXAMPLE_PROMPTS.items()):
            st.button(
                name,
                key=K.per_item(K.ATT_EXAMPLE, i),
                on_click=use_example,
                args=(text,),
                type="primary" if prompt_text() == text else "secondary",
            )


def pickers(seen: Seen, queries: tuple[int, int]) -> Pick:
    row = st.container(horizontal=True, gap="xsmall")
    layer = S.ATT_LAYER.selectbox(
        row,
        options=list(range(seen.cfg.n_layers)),
        format_func=lambda i: f"layer {i}",
        persist_state="session",
        width=110,
    )
    head = S.ATT_HEAD.selectbox(row, options=seen.heads, format_func=head_name, persist_state="session", width=165)
    S.ATT_SCALE.setdefault(state)
    scale = S.ATT_SCALE.selectbox(row, format_func=fa.SCALES.get, persist_state="session")
    return Pick(layer, head, scale, queries[1] - 1, queries[0])


@dataclass
class Boxes:
    """Where the views' fragment draws, in page order: created by the page, filled by the fragment."""

    generation: object  # a finished generation (a running one is the live fragment's)
    map: object  # the map's column
    controls: object  # beside the map: Generate, the pickers and the suggestion (the detector table under them is
    # the full run's: a pick leaves it be, and the browser does not draw its grid again)
    chips: object  # the prompt's tokens, to pick the query
    tabs: object  # the other views
    live: bool  # the full run gave `generation` to the live fragment (a generation was running)


def views(seen: Seen, found: list[services.Detector], boxes: Boxes) -> None:
    """The chips, the pickers and every view: a pick reruns only this fragment, never the model (the capture is
    kept), and redraws only what follows it (issue 60: the browser's redraw of the page's two tables cost several
    times the rerun itself; `python -m benchmarks latency` times a head switch)."""
    job = live.stored_generation(seen.spec, seen.ids, live.ATTENTION.page)
    finished = job is not None and not job.running  # read once: the thread may end while this draws
    started = state.pop(K.ATT_GEN_STARTED, False)
    if started or (finished and boxes.live):
        # Generate started the live view, or the live generation ended (Stop, or its last token): the generation's
        # box was the live fragment's, and a fragment rerun may write only where this fragment wrote in the last full
        # run, so the page reruns whole
        st.rerun()
    with boxes.chips:
        queries = token_chips(seen)
    with boxes.controls:  # drawn first: the map's picks come from these widgets
        live.compact_controls(
            live.ATTENTION, seen.spec, seen.model, seen.ids, on_start=lambda: state.__setitem__(K.ATT_GEN_STARTED, True)
        )
        pick = pickers(seen, queries)
        about_the_map(seen, pick)
        if found:
            suggestion(found, pick)
    with boxes.map:
        head_map(seen, pick, services.head_notes(found, seen.cfg.n_layers, seen.cfg.n_heads) if found else None)
    with boxes.tabs:
        for view, tab in zip(VIEWS, st.tabs(VIEWS, key=K.ATT_VIEW, on_change="rerun"), strict=True):
            if tab.open is not False:  # a closed tab costs nothing
                with tab:
                    VIEW_DRAWERS[view](seen, pick)
    reproduce.show(
        reproduce.attention(
            seen.spec,
            seen.ids,
            pick.layer,
            None if pick.head == MEAN_HEAD else pick.head,
            reproduce.prompt_text(),
            pick.query,
        )
    )
    if finished:  # a running one is the live fragment's
        with boxes.generation:
            finished_generation(live.generation_view(job), seen, pick)
    sync_address()  # a pick here reruns only this fragment, not the router that writes the address


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
        step = live.replay_step(run, S.ATT_GEN_STEP)
    b2.button(
        "Look at the whole text in every view",
        key=K.ATT_GEN_USE,
        on_click=use_generated_text,
        args=(decode(prompt_ids + new_ids, run["enc"]),),
        icon=":material/north:",
        help="Makes prompt and continuation the sidebar's prompt, so the views above (lines, text, the head's "
        "computation...) and every other page show the generated tokens too.",
    )
    if any(s.context_shifted for s in steps):
        first = next(i for i, s in enumerate(steps) if s.context_shifted)
        st.caption(
            f"From step {first} the text was longer than the context ({seen.cfg.n_ctx} tokens): "
            "the model saw only the most recent tokens."
        )
    shown = live.up_to(run, step)
    left, right = st.columns([3, 2], gap="medium")
    with left:
        live.generation_map(
            shown,
            layer=p.layer,
            head=p.head,
            scale=p.scale,
            key=K.ATT_GEN_MAP,
            every_layer=True,
            on_pick=picked_from_map(seen),
        )
        figure_download(
            lambda: fg.generation_heatmap(
                [seen_row(s, p) for s in shown["steps"]],
                [s.window_start for s in shown["steps"]],
                token_labels(prompt_ids + new_ids[: step + 1], run["enc"]),
                len(prompt_ids),
                scale=p.scale,
                title=f"Layer {p.layer}, {head_name(p.head)}: attention of each generating query",
            ),
            file_name=f"generation-layer-{p.layer}-{head_name(p.head).replace(' ', '-')}.html",
            key=K.ATT_GEN_HEATMAP,
        )
    with right:
        live.text_so_far(run, live=False, upto=step)
        chosen = steps[step]
        top_ids = [t[0] for t in chosen.top]
        show_figure(
            fg.next_token_bars(
                top_ids,
                [t[1] for t in chosen.top],
                [t[2] for t in chosen.top],
                token_labels(top_ids, run["enc"]),
                sampled_id=chosen.token_id,
                sampled_rank=chosen.rank,
                sampled_prob=chosen.prob,
                sampled_label=chosen.piece,
                n_allowed=chosen.n_allowed,
                kept_mass=chosen.kept_mass,
                title=f"Step {step}: next-token probabilities",
                cut_by=live.cut_reason(run["settings"]),
            ),
            key=K.ATT_GEN_BARS,
        )
        st.caption(
            "Top 20 over the whole vocabulary, after temperature. Orange: the sampled token; grey: "
            f"cut by {live.cut_reason(run['settings'])}."
        )


def seen_row(step, p: Pick):
    """One generation step's attention row for the picked layer and head."""
    return head_or_mean(step.attention[p.layer], p.head).numpy()


def draw_running(run: dict, seen: Seen) -> None:
    """The live fragment's redraw, with the pickers' current values."""
    live.draw_live(
        run,
        layer=state.get(K.ATT_LAYER, 0),
        head=state.get(K.ATT_HEAD, 0),
        scale=state.get(K.ATT_SCALE, S.ATT_SCALE.default),
        map_key=K.ATT_GEN_MAP_LIVE,
        on_pick=picked_from_map(seen),
        text_height=LIVE_TEXT_PX,
    )


# The page's own layout rules (style only; no user or model text): less room above the title, so the map fits the
# first screen; on a phone a smaller title, and the map's column close above the controls it stacks on (the map's
# line on its head takes that room, and Generate with its temperature stays on the first screen).
PAGE_CSS = (
    "<style>[data-testid='stMainBlockContainer'] {padding-top: 4rem;} "
    + PHONE_TITLE_CSS
    + f"@media (max-width: 640px) {{[data-testid='stHorizontalBlock']:has(.st-key-{K.ATT_MAP}) "
    "{row-gap: 0.5rem;}}</style>"
)
LIVE_TEXT_PX = 180  # the live text's box: a long run scrolls inside it, so the next-token list stays in view


def main() -> None:
    st.html(PAGE_CSS)
    st.title(
        "Attention",
        help="Each token builds its next representation from a weighted mix of the tokens before "
        "it. A head is one such mix, with its own weights: one map per head, several heads per "
        "layer. Generate lets the model write and shows where each new token looked.",
    )
    page_prompt_box(height=68)  # a phone's first screen: its sidebar, with the prompt, starts closed
    seen = read_prompt(lambda cfg, T: attention_page_names(cfg.n_layers, cfg.norm), keep_last)
    found = services.detectors(seen.spec, seen.cfg, seen.ids, seen.patterns) if seen.T >= 2 else []
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
    with map_box:
        map_column, right = st.columns([3, 2], gap="medium")
        controls_box, table_box = right.container(), right.container()
    # the live view before the rest of the page: right after Generate, its first token goes out to the browser ahead
    # of the table and the examples, which the browser redraws unchanged (issue 60: Generate to the first token drawn)
    job = live.stored_generation(seen.spec, seen.ids, live.ATTENTION.page)
    running = job is not None and job.running
    if running:
        with generation_box:
            live.live_fragment(seen.spec, seen.ids, live.ATTENTION.page, lambda run: draw_running(run, seen))
    if found:
        with table_box, st.expander("Heads worth a look: each detector's score beside chance", expanded=True):
            detector_table(seen, found)
    with examples_box:
        example_buttons()
        overview_link()  # the whole forward pass at a glance
    st.fragment(views)(seen, found, Boxes(generation_box, map_column, controls_box, chips_box, tabs_box, live=running))


main()
