"""The Attention page's query span: several query tokens picked on the chips at once (a drag across them, or a click
then a shift-click: gptviz.figures.browser.chip_span), whose rows the map outlines and the One head view sums.

The chips' value stays one token, the span's last: the views that need a single query (inside the head, the entropy
map), the keys and a link without a span work as before. The span is kept as (start, end) beside it, and holds only
while its end is the token after that value: any other pick of the query ends it."""

from __future__ import annotations

import streamlit as st

from ...figures.browser import chip_span
from ...figures.browser import token_span as tspan
from .. import components
from .. import keys as K

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
