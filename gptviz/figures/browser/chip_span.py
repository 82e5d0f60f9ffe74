"""A span of query tokens picked on Streamlit's token chips (the Attention page's pills): a drag across them, or a
click then a shift-click, reports [start, end); a plain click is left to the pills, which pick one token.

Why a component beside the pills and not chips of its own: the pills stay the one-token picker the page, its links,
its keyboard and its tests know; this adds only the gesture they lack. It draws nothing of its own: it listens on the
pills named by `chips_key` and outlines the span being dragged. The span committed is outlined by the page's CSS
(`span_css`), which holds numbers only. Token text is never touched.
"""

from __future__ import annotations

from ..attention import HIGHLIGHT
from . import token_span

NAME = "gptviz_chip_span"


def payload(T: int, *, start: int, end: int, chips_key: str) -> dict:
    """The chips' count, the span shown now ([start, end); a single token is [query, query + 1)) and the pills' key."""
    token_span.check_span(T, start, end)
    return {"T": int(T), "start": int(start), "end": int(end), "chips": str(chips_key), "highlight": HIGHLIGHT}


def span_css(chips_key: str, gesture_key: str, start: int, end: int) -> str:
    """The page's style rules for the gesture: its own element hidden (it draws nothing, and an empty element would
    still take a row's gap), the chips left to a finger's sideways drag (a vertical one still scrolls), and chips
    start..end-1 outlined (the last, the pills' own value, is also filled; a single token has no outline)."""
    chips = f".st-key-{chips_key} [role='radiogroup'] > button"
    css = f".st-key-{gesture_key} {{display: none;}} {chips} {{touch-action: pan-y;}}"
    if end - start > 1:
        css += (
            f" {chips}:nth-child(n+{start + 1}):nth-child(-n+{end}) "
            f"{{outline: 2px solid {HIGHLIGHT}; outline-offset: -2px; background: {HIGHLIGHT}22;}}"
        )
    return css


def picked_span(value, T: int) -> tuple[int, int] | None:
    """The [start, end) the browser reported ({"start", "end", "at"}: stamped, so picking the same span again is a
    change), or None when it is not a span of these T tokens."""
    if not isinstance(value, dict):
        return None
    return token_span.picked_span([value.get("start"), value.get("end")], T)
