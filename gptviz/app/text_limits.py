"""Text boxes whose length the server checks (issue 43): a box's `max_chars` binds only the browser's box. A crafted
websocket message can carry any length (Streamlit cuts a widget's value to its max_chars when it reads one, so the
page sees at most max_chars), and a value put in session state (a link, a test) skips max_chars altogether. So each
box is drawn with max_chars one past its limit and its value checked here before the page uses it: a value past the
limit was crafted or cut, and is refused with a message, never echoed back or tokenised.

Every box a visitor types into and its limit: docs/deploying.md, "What a visitor can type" (a test finds each box
in the page files and fails on one that table does not name)."""

from __future__ import annotations

from collections.abc import Callable

from .links import MAX_LINK_MODEL

PAIR_CHARS = 2000  # each prompt of the Why page's patching pair (the sweep's time and memory are reserved apart)
MODEL_NAME_CHARS = MAX_LINK_MODEL  # a folder path or Hub id: the same bound as a link's `model`


def too_long(value, limit: int) -> bool:
    """Whether a box's value is past its limit (or not text at all, which only session state could put there)."""
    return value is not None and (not isinstance(value, str) or len(value) > limit)


def checked_text(box: Callable[..., str], label: str, key: str, limit: int, **kwargs) -> str:
    """`box` (st.text_input, st.text_area, or a column's) drawn with max_chars limit + 1 (one past, so a value Streamlit
    cut is told from one at the limit). A value in session state past `limit` is removed before the box is drawn (the
    box shows its default, and the long text is never sent back), with a warning; returns what the box then holds."""
    import streamlit as st

    refused = too_long(st.session_state.get(key), limit)
    if refused:
        del st.session_state[key]
    typed = box(label, key=key, max_chars=limit + 1, **kwargs)
    if refused:
        st.warning(f"That text is too long: the {label} box takes at most {limit:,} characters. It was not used.")
    return typed
