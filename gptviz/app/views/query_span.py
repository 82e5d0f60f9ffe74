"""The Attention page's query span: several query tokens picked on the chips at once (a drag across them, or a click
then a shift-click: gptviz.figures.browser.chip_span), whose rows the map outlines and the One head view sums.

The chips' value stays one token, the span's last: the views that need a single query (inside the head, the entropy
map), the keys and a link without a span work as before. The span is kept as (start, end) beside it, and holds only
while its end is the token after that value: any other pick of the query ends it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from ...figures import attention as fa
from ...figures.browser import chip_span
from ...figures.browser import token_span as tspan
from ...figures.span_bars import span_reach_bars
from .. import components
from .. import keys as K
from ..display import md_text, show_figure

state = st.session_state


def shown_span(T: int, query: int) -> tuple[int, int]:
    """The queries shown, [start, query + 1): the stored span when it ends at the query, else the query alone (a stale
    span, left by another pick of the query or another prompt, is dropped)."""
    stored = state.get(K.ATT_QUERY_SPAN)
    span = tspan.picked_span(list(stored), T) if isinstance(stored, (list, tuple)) else None
    if span is not None and span[1] == query + 1:
        return span
    state.pop(K.ATT_QUERY_SPAN, None)
    return query, query + 1


def keep_span(start: int, end: int) -> None:
    """The gesture's callback: the span's last token becomes the chips' value; one token is a plain pick. The text
    view's span follows, so On the text shows the same tokens."""
    state[K.ATT_QUERY] = end - 1
    if end - start > 1:
        state[K.ATT_QUERY_SPAN] = state[K.ATT_SPAN] = (start, end)
    else:
        state.pop(K.ATT_QUERY_SPAN, None)


def chip_clicked() -> None:
    """A plain click on a chip picks one token, as before spans, and ends the span. A click on the span's last chip
    (the pills' value, which a click clears) picks that token alone rather than the prompt's last."""
    span = state.pop(K.ATT_QUERY_SPAN, None)
    if span is not None and state.get(K.ATT_QUERY) is None:
        state[K.ATT_QUERY] = span[1] - 1


def span_gesture(T: int, query: int) -> tuple[int, int]:
    """Under the pills: the drag and shift-click that pick a span, and the span's outline. Returns the span shown."""
    start, end = shown_span(T, query)
    components.chip_span(
        chip_span.payload(T, start=start, end=end, chips_key=K.ATT_QUERY), key=K.ATT_CHIP_SPAN, on_span=keep_span
    )
    # numbers and a colour only, no token text; drawn even empty, so a rerun replaces the rule (an element a fragment
    # rerun leaves out stays on the page: the old span's outline did)
    st.html(f"<style>{chip_span.span_css(K.ATT_QUERY, K.ATT_CHIP_SPAN, start, end)}</style>")
    return start, end


def span_words(start: int, end: int) -> str:
    """'token 7' or 'tokens 3-7', as captions and titles name the queries."""
    return f"token {start}" if end - start == 1 else f"tokens {start}-{end - 1}"


def summed_caption(start: int, end: int) -> str:
    """What a span's summed bars are, and what uniform attention would give them (its chance level)."""
    uniform = tspan.uniform_span_sums(start, end)
    n = end - start
    return (
        f"Summed over tokens {start}-{end - 1}: each query's row adds up to 1, so the {n} rows' bars add up to {n}. "
        f"Chance (uniform attention, query i spreading 1/(i+1) over keys 0..i) gives key j the sum of 1/(i+1) over "
        f"the span's queries i ≥ j: {uniform[0]:.3f} on key{f's 0-{start}' if start else ' 0'} down to "
        f"{uniform[-1]:.3f} on key {end - 1}."
    )


def uniform_reach(T: int, start: int, end: int) -> np.ndarray:
    """Chance for the "to" bars: under uniform attention query q spreads 1/(q+1) over keys 0..q, so it gives the span
    (its keys up to q) (min(q, end - 1) - start + 1) / (q + 1), for the queries q >= start."""
    q = np.arange(start, T)
    return (np.minimum(q, end - 1) - start + 1) / (q + 1)


def to_the_span(pattern: np.ndarray, labels: list[str], start: int, end: int) -> None:
    """How much each token looks at the span: the span's columns summed, per query from its first token on, beside
    what uniform attention would give, and the queries that look at it most."""
    reach = tspan.span_sums(pattern, start, end, "to")
    title = f"How much each token looks at tokens {start}-{end - 1} ('{labels[start]}' … '{labels[end - 1]}'), summed"
    left, right = st.columns([3, 2], gap="medium")
    with left:
        show_figure(span_reach_bars(reach, labels, start, end, title=fa.plotly_text(title)), key=K.ATT_SPAN_REACH)
        chance = uniform_reach(len(labels), start, end)
        st.caption(
            md_text(
                f"Each query's weights on the span's {end - start} tokens, summed: at most 1 (all of its attention). "
                f"Chance (uniform attention, query q spreading 1/(q+1) over keys 0..q): {chance[0]:.3f} at token "
                f"{start} down to {chance[-1]:.3f} at token {len(labels) - 1}. Tokens before {start} cannot see the "
                "span and are left out."
            )
        )
    with right:
        order = [start + int(i) for i in np.argsort(-reach[start:], kind="stable")[:5]]
        top = pd.DataFrame(
            {
                "query token": [labels[q] for q in order],
                "position": order,
                "on the span": [float(reach[q]) for q in order],
                "chance": [float(chance[q - start]) for q in order],
            }
        )
        st.table(
            top.style.format({"on the span": "{:.3f}", "chance": "{:.3f}"}, escape="html").bar(
                subset=["on the span"], vmin=0.0, vmax=1.0, color="#e8730c"
            ),
            hide_index=True,
        )
