"""The Attention page's views, drawn: the map and its file, one head's row, BertViz's lines, the text coloured by
weight, a head's computation step by step, the value-weighted weights, every head of a layer, the model view and the
entropy map. Layout only: what they read comes from the page's capture and gptviz.app.services.attention."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import streamlit as st
import torch

from ...figures import attention as fa
from ...figures import head_views as fhv
from ...figures import span_bars
from ...figures.browser import attention_map as amap
from ...figures.browser import query_bars as qbars
from ...figures.browser import token_span as tspan
from ...model.heads import MEAN_HEAD, heads_mean
from .. import components, live
from .. import keys as K
from .. import settings as S
from ..display import figure_download, head_name, md_text, show_figure
from ..seen import Seen
from ..services import attention as services
from ..sidebar import encode_prompt, keep_valid, prompt_text
from ..unit_nav import follow_from_fragment, go_to_why_attends
from . import query_span

MAX_CHIPS = 256  # longer prompts pick the query with a slider
WEIGHT_BAR = "#9ecae1"  # the bars of the top keys' weights (a light blue of the attention scale)
GRID_CELLS = 600_000  # most heatmap cells one small-multiples figure draws
VIEWS = list(S.ATT_VIEW.rule.options)
state = st.session_state


@dataclass
class Pick:
    """What the pickers chose."""

    layer: int
    head: int
    scale: str
    query: int  # the one query token, or a span's last
    start: int | None = None  # a span's first query (None: the query alone)

    def __post_init__(self):
        self.start = self.query if self.start is None else self.start


def grid_prefix(seen: Seen, panels: int) -> int:
    """Tokens the small multiples draw: all, or the first K so panels * K * K stays under GRID_CELLS.
    A prefix is exact: under the causal mask, later tokens do not change earlier rows."""
    return min(seen.T, max(2, int(math.sqrt(GRID_CELLS / panels))))


def open_head(picked_key: str, seen: Seen, means_too: bool) -> None:
    """A click in the entropy map or the model view (its chart's selection in `picked_key`) opens that head in the
    One head view."""
    picked = fa.selected_head(state.get(picked_key) or {})
    heads = seen.heads if means_too else range(seen.cfg.n_heads)
    if picked is not None and picked[0] in range(seen.cfg.n_layers) and picked[1] in heads:
        state[K.ATT_LAYER], state[K.ATT_HEAD] = picked
        state[K.ATT_VIEW] = VIEWS[0]


def picked_from_map(seen: Seen):
    return live.map_pick(K.ATT_LAYER, K.ATT_HEAD, seen.cfg.n_layers, seen.cfg.n_heads)


def map_height(T: int) -> int:
    return int(min(660, max(440, 380 + 8 * T)))


def head_map(seen: Seen, p: Pick, notes: list[list[str]] | None = None) -> None:
    """The picked head's heatmap, with the map's own layer and head pickers: the page's first view, alone in its
    column (what explains it sits beside it), so on a phone the controls follow it on the first screen. `notes`: a
    line per head under the title (what it does on this prompt, beside chance), so a phone reads it with the map.
    A click on a cell offers "why does this head attend here?" (the Why page's QK decomposition, in this session);
    [ ] and , . step the layer and head."""
    follow_from_fragment()  # that button's callback asked for the Why page: this fragment rerun goes there
    components.attention_map(
        amap.payload(
            seen.patterns.numpy(),
            seen.labels,
            layer=p.layer,
            head=p.head,
            query=p.query,
            query_start=p.start,
            scale=p.scale,
            mean_head=MEAN_HEAD,
            head_names=[head_name(h) for h in seen.heads],
            height=map_height(seen.T),
            head_notes=notes,
        ),
        key=K.ATT_MAP,
        on_pick=picked_from_map(seen),
        on_why=lambda *cell: why_here(seen, *cell),
        keys=True,
    )


def why_here(seen: Seen, layer: int, head: int, query: int, key: int) -> None:
    """Open the Why page's QK panel on a map cell. That page reads the whole prompt (up to the context) where this
    one may keep only its last tokens (keep_last): the same tokens sit `shift` places later there."""
    whole = min(len(encode_prompt(prompt_text(), seen.enc)), seen.cfg.n_ctx)  # in the model's own tokens (GPT-1's BPE)
    shift = max(0, whole - seen.T)
    go_to_why_attends(layer, head, query + shift, key + shift)


def about_the_map(seen: Seen, p: Pick) -> None:
    """How to read the map (on hover), and the map as a file."""
    labels, pat = seen.labels, seen.pattern(p.layer, p.head)
    st.caption(
        "Map: rows are the tokens looking (queries), columns the tokens they look at (keys). Click a cell "
        "to ask why the head attends there.",
        help="Each row sums to 1. Grey cells are the causal mask, not zero weights: a token cannot look at "
        "tokens after it. The outlined row is the chosen query token; hover a cell for its weight. "
        "Picking a layer or head in the map or here redraws it at once, and the views below follow. "
        "Keys: [ and ] step the layer, comma and full stop the head (not while typing in a field). A "
        "clicked cell's button opens the Why page's split of that score into query-side and key-side "
        "sources.",
    )
    figure_download(
        lambda: fa.attention_heatmap(
            pat.numpy(),
            labels,
            scale=p.scale,
            query=p.query,
            title=f"Layer {p.layer}, {head_name(p.head)}",
            height=map_height(seen.T),
        ),
        file_name=f"layer-{p.layer}-{head_name(p.head).replace(' ', '-')}.html",
        key=K.ATT_HEATMAP,
        label="The map as interactive HTML",
    )


def one_head(seen: Seen, p: Pick) -> None:
    """The chosen query's row of the map as bars, or a span's rows summed (or, asked, its columns: how much each
    token looks at it), and the keys it weighs most."""
    if p.query > p.start and S.ATT_SPAN_DIRECTION.segmented_control(st, default=S.ATT_SPAN_DIRECTION.default) == (
        "to the span"
    ):
        query_span.to_the_span(seen.pattern(p.layer, p.head).numpy(), seen.labels, p.start, p.query + 1)
        return
    labels = seen.labels
    row = seen.pattern(p.layer, p.head)[p.start : p.query + 1, : p.query + 1].sum(0)
    n = p.query + 1 - p.start
    left, right = st.columns([3, 2], gap="medium")
    with left:
        if n == 1:
            title = f"Where token {p.query} '{labels[p.query]}' looks"
        else:
            title = f"Where tokens {p.start}-{p.query} ('{labels[p.start]}' … '{labels[p.query]}') look, summed"
        components.query_bars(
            qbars.payload(row.numpy(), labels, p.query, title=title, span_start=p.start), key=K.ATT_QUERY_BARS
        )
        figure_download(
            lambda: span_bars.query_bars(row.numpy(), labels, p.query, title=fa.plotly_text(title)),
            file_name=f"query-{p.start}-{p.query}-layer-{p.layer}-{head_name(p.head).replace(' ', '-')}.html"
            if n > 1
            else f"query-{p.query}-layer-{p.layer}-{head_name(p.head).replace(' ', '-')}.html",
            key=K.ATT_QUERY_BARS_HTML,
        )
        if n > 1:
            st.caption(md_text(query_span.summed_caption(p.start, p.query + 1)))
    with right:
        order = row.argsort(descending=True)[:5].tolist()
        # a static table, its weights as bars: a data grid here was the slowest thing the browser redrew after a pick
        # in the map (most of a head switch's time; issue 60, timed by `python -m benchmarks latency`). The browser
        # reads a styled table's cells as HTML: escape="html" keeps token text text.
        weight = "weight" if n == 1 else "summed weight"
        top = pd.DataFrame(
            {"key token": [labels[k] for k in order], "position": order, weight: [float(row[k]) for k in order]}
        )
        st.table(
            top.style.format({weight: "{:.3f}"}, escape="html").bar(
                subset=[weight], vmin=0.0, vmax=float(n), color=WEIGHT_BAR
            ),
            hide_index=True,
        )
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
    "and mixed by the output projection."
)


def focus_from_click(T: int) -> None:
    """A click on a token of the left column makes it the query (and its lines the only ones drawn)."""
    points = ((state.get(K.ATT_LINES_CHART) or {}).get("selection") or {}).get("points") or []
    for point in points:
        if isinstance(point, dict) and point.get("x") == 0 and isinstance(point.get("y"), (int, float)):
            if 0 <= int(point["y"]) < T and T <= MAX_CHIPS:
                state[K.ATT_QUERY] = int(point["y"])
                state[K.ATT_LINES_FOCUS] = True  # the chips, in the same fragment, follow
            return


def lines_between_tokens(seen: Seen, p: Pick) -> None:
    n_heads = seen.cfg.n_heads
    c1, c2 = st.columns([2, 1])
    if not isinstance(state.get(K.ATT_LINES_HEADS), list) or any(
        h not in range(n_heads) for h in state[K.ATT_LINES_HEADS]
    ):
        state[K.ATT_LINES_HEADS] = list(range(n_heads)) if p.head == MEAN_HEAD else [p.head]
    chosen = S.ATT_LINES_HEADS.multiselect(c1, options=list(range(n_heads)), format_func=lambda h: f"head {h}")
    focus = S.ATT_LINES_FOCUS.toggle(c2)
    if not chosen:
        st.info("Pick at least one head to draw its lines.")
        return
    show_figure(
        fhv.head_lines(
            seen.patterns[p.layer, chosen].numpy(),
            seen.labels,
            chosen,
            focus=p.query if focus else None,
            title=f"Layer {p.layer}: each query (left) to the keys it looks at (right)",
        ),
        key=K.ATT_LINES_CHART,
        on_select=lambda: focus_from_click(seen.T),
        selection_mode="points",
    )
    st.caption(
        "BertViz's head view. A line joins a token on the left (the query) to each token on the right it may "
        "look at; its opacity is the attention weight (lines under 0.02 are left out, and opacities are "
        "rounded to 0.05). Each head has its own colour. The same weights as the heatmap, drawn so the "
        "strongest links stand out."
    )


def on_the_text(seen: Seen, p: Pick) -> None:
    mode = S.ATT_TEXT_MODE.radio(st, horizontal=True)
    if mode.startswith("attention "):
        span_on_the_text(seen, p, "from" if mode == "attention from a span" else "to")
        return
    pat, labels = seen.pattern(p.layer, p.head), seen.labels
    where = f"Layer {p.layer}, {head_name(p.head)}"
    if mode == "where the query looks":
        values, visible = pat[p.query].numpy(), p.query
        title = f"{where}: where token {p.query} '{fa.plotly_text(labels[p.query])}' looks"
    else:
        values, visible = (pat.sum(0) / torch.arange(seen.T, 0, -1)).numpy(), None
        title = f"{where}: mean weight each token receives"
    show_figure(
        fhv.attention_text(
            values,
            labels,
            query=p.query if visible is not None else None,
            visible=visible,
            scale=p.scale,
            title=title,
            value_name="weight" if visible is not None else "mean weight",
        ),
        key=K.ATT_TEXT_CHART,
    )
    st.caption(
        "The prompt set as text, each token coloured by its weight (CircuitsVis's idiom). Grey tokens come "
        "after the query, which cannot look at them. The outlined token is the query."
    )


def keep_span(start: int, end: int) -> None:
    state[K.ATT_SPAN] = (start, end)


def span_on_the_text(seen: Seen, p: Pick, direction: str) -> None:
    """Several tokens at once: drag across the prompt (or click, then shift-click) to pick a span; each token is
    coloured by the weights summed from the span's queries (their rows) or onto its keys (their columns)."""
    T, labels = seen.T, seen.labels
    default = (p.start, p.query + 1) if p.start < p.query else (max(0, p.query - 2), p.query + 1)  # the chips' span
    span = tspan.picked_span(list(state.get(K.ATT_SPAN) or ()), T) or default
    start, end = span
    data = tspan.payload(seen.pattern(p.layer, p.head).numpy(), labels, start=start, end=end, direction=direction)
    components.token_span(data, key=K.ATT_SPAN_VIEW, on_span=keep_span)
    n, words = end - start, ", ".join(f"'{labels[i]}'" for i in range(start, min(end, start + 6)))
    top = sorted((i for i, v in enumerate(data["values"]) if v is not None), key=lambda i: -data["values"][i])[:3]
    st.caption(
        md_text(
            f"Layer {p.layer}, {head_name(p.head)}: tokens {start}-{end - 1} ({words}{', ...' if n > 6 else ''}), "
            + (
                f"their {n} rows summed: where the span looks. "
                if direction == "from"
                else f"their {n} columns summed: how much each token looks at the span. "
            )
            + "Most: "
            + ", ".join(f"{i} '{labels[i]}' {data['values'][i]:.3f}" for i in top)
            + ". "
            + "Drag across the tokens (or click one, then shift-click another) to pick the span; grey tokens "
            + (
                "come after it, so it cannot look at them."
                if direction == "from"
                else "come before it and cannot look at it."
            )
        )
    )


def inside_the_head(seen: Seen, p: Pick) -> None:
    """One head's computation step by step (Transformer Explainer), and BertViz's neuron view."""
    if p.head == MEAN_HEAD:
        st.info("Pick a single head above: the mean of the heads is not one computation.")
        return
    cfg, labels = seen.cfg, seen.labels
    steps = services.steps_of_head(seen.model, seen.prompt, p.layer, p.head, p.query)
    st.markdown(
        f"Head {p.head} of layer {p.layer} computing the output for token {p.query} "
        f"**{md_text(labels[p.query])}**, with the model's real numbers (d_model {cfg.d_model}, "
        f"d_head {cfg.d_head})."
    )
    show_figure(fhv.head_steps_figure(steps, labels), key=K.ATT_STEPS_CHART)
    st.caption(
        "Each panel is one step; its title gives the shape. Blue is negative, red positive, each panel on its "
        "own scale (hover for the value). The softmax row is the same row as the heatmap's; the last panel "
        "is what this head adds to the residual stream (the layer adds its output bias once for all heads)."
    )
    keep_valid(K.ATT_NEURON_KEY, list(range(p.query + 1)), p.query)
    state.setdefault(K.ATT_NEURON_KEY, p.query)
    key_token = S.ATT_NEURON_KEY.select_slider(
        st, options=list(range(p.query + 1)), format_func=lambda j: f"{j} {labels[j]}"
    )
    show_figure(
        fhv.neuron_view(steps, key_token, labels, title=f"Query {p.query} · key {key_token}"), key=K.ATT_NEURON_CHART
    )
    st.caption(
        "BertViz's neuron view: the query and key vectors dimension by dimension and their product. The "
        "products sum to the dot product; scaled by 1/√d_head it is the score the softmax turns into the "
        "weight."
    )


def value_weighted_view(seen: Seen, p: Pick) -> None:
    """Kobayashi et al. (2020): the weights beside weight x the size of what each value writes."""
    cfg, labels, T = seen.cfg, seen.labels, seen.T
    shares = services.value_weighted_shares(
        seen.model, seen.prompt, seen.patterns, p.layer, None if p.head == MEAN_HEAD else p.head
    )
    left, right = st.columns(2, gap="medium")
    size = int(min(560, max(380, 320 + 7 * T)))
    with left:
        show_figure(
            fa.attention_heatmap(
                seen.pattern(p.layer, p.head).numpy(),
                labels,
                scale=p.scale,
                query=p.query,
                title=f"Attention weights, layer {p.layer}, {head_name(p.head)}",
                height=size,
            ),
            key=K.ATT_VW_RAW,
        )
    with right:
        show_figure(
            fa.attention_heatmap(
                shares.numpy(),
                labels,
                scale=p.scale,
                query=p.query,
                value_name="share",
                height=size,
                title="Weight × ‖value · W_O‖, as a share of each row",
            ),
            key=K.ATT_VW_WEIGHTED,
        )
    if T >= 2:
        sink, chance = services.sinks(seen.patterns[p.layer])  # sink: [heads]
        shown = range(cfg.n_heads) if p.head == MEAN_HEAD else [p.head]
        sinks = [f"head {h}: {float(sink[h]):.2f}" for h in shown if float(sink[h]) >= 0.5]
        st.markdown(
            f"**Attention sinks** (mean weight on the first token, uniform attention: {chance:.2f}): "
            + (
                ", ".join(sinks) + " park most of their weight on token 0."
                if sinks
                else f"none of {'these heads' if p.head == MEAN_HEAD else 'this head'} puts half its weight there "
                f"(here: {', '.join(f'{float(sink[h]):.2f}' for h in shown)})."
            )
        )
    st.caption(
        "Kobayashi et al. (2020): what a key contributes is its weight times the size of what its value "
        "writes, ‖αᵢⱼ vⱼ W_O‖. A head that puts heavy weight on a token whose value is tiny (often the first "
        "token, an attention sink) looks important in the weights and small here."
    )


def all_heads_of_the_layer(seen: Seen, p: Pick) -> None:
    H, T = seen.cfg.n_heads, seen.T
    cols = next((c for c in (6, 5, 4) if H % c == 0), min(H, 6)) if H > 4 else H
    rows_n = -(-H // cols)
    K_ = grid_prefix(seen, H)
    grid = seen.patterns.new_full((rows_n * cols, K_, K_), float("nan"))
    grid[:H] = seen.patterns[p.layer, :, :K_, :K_]
    names = [[f"head {r * cols + c}" if r * cols + c < H else "" for c in range(cols)] for r in range(rows_n)]
    show_figure(
        fa.attention_grid(
            grid.reshape(rows_n, cols, K_, K_).numpy(),
            seen.labels[:K_],
            panel_names=names,
            scale=p.scale,
            title=f"Layer {p.layer}: every head",
            selected=divmod(p.head, cols) if p.head != MEAN_HEAD else None,
        ),
        key=K.ATT_LAYER_GRID,
    )
    note = f" Showing the first {K_} of {T} tokens (earlier rows do not depend on later tokens)." if K_ < T else ""
    st.caption(
        "Same layout as the single heatmap, one panel per head, one colour scale for all. Pick a head above, "
        "or click one in the Entropy map." + note
    )


def model_view(seen: Seen, p: Pick) -> None:
    cfg, T = seen.cfg, seen.T
    average = S.ATT_MV_MEAN.toggle(st, persist_state="session")
    shown = heads_mean(seen.patterns, 1, keepdims=True) if average else seen.patterns
    K_ = grid_prefix(seen, shown.shape[0] * shown.shape[1])
    col_names = ["mean of heads"] if average else [f"head {h}" for h in range(cfg.n_heads)]
    show_figure(
        fa.model_view(
            shown[:, :, :K_, :K_].numpy(),
            seen.labels[:K_],
            row_names=[f"layer {layer}" for layer in range(cfg.n_layers)],
            col_names=col_names,
            col_ticks=None if average or cfg.n_heads <= 8 else [f"H{h}" for h in range(cfg.n_heads)],
            scale=p.scale,
            selected=None if average or p.head == MEAN_HEAD else (p.layer, p.head),
            title="Every layer (rows) and head (columns)",
            clickable=not average,
        ),
        key=K.ATT_MODEL_VIEW,
        on_select=lambda: open_head(K.ATT_MODEL_VIEW, seen, means_too=False),
        selection_mode="points",
    )
    note = f" Showing the first {K_} of {T} tokens (earlier rows do not depend on later tokens)." if K_ < T else ""
    st.caption(
        "Early layers often look at the previous token or the first token; later layers mix more widely. "
        "Hover a panel for its weights; the outlined panel is the chosen head; click the orange square in a "
        "panel's corner to open that head." + note
    )


def entropy_map(seen: Seen, p: Pick) -> None:
    entropy, uniform = services.entropy(seen.patterns)  # [layers, heads, query]
    show_figure(
        fa.entropy_map(
            entropy.mean(-1).numpy(),
            query_entropy=entropy[..., p.query].numpy(),
            query_label=seen.labels[p.query],
            uniform_entropy=uniform,
            selected=(p.layer, p.head) if p.head != MEAN_HEAD else None,
            title="Attention entropy per head (mean over query tokens)",
        ),
        key=K.ATT_ENTROPY_CHART,
        on_select=lambda: open_head(K.ATT_ENTROPY_CHART, seen, means_too=True),
        selection_mode="points",
    )
    st.caption(
        "Entropy measures how spread out a row is, in nats: 0 when a query puts all its weight on one key, "
        "ln(n) when it spreads evenly over n keys. Dark cells are focused heads; the colour scale ends at the "
        "value for even spreading. Click a cell to open that head."
    )


VIEW_DRAWERS = dict(
    zip(
        VIEWS,
        (
            one_head,
            lines_between_tokens,
            on_the_text,
            inside_the_head,
            value_weighted_view,
            all_heads_of_the_layer,
            model_view,
            entropy_map,
        ),
        strict=True,
    )
)
