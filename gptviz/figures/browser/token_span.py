"""The prompt as a line of tokens where a span is picked by dragging across them (or a click, then a shift-click),
each token coloured by the attention from the span (its queries' rows summed) or to it (its keys' columns summed).

Why a component: Streamlit's pills pick one token or a set by clicks, not a span by a drag. The browser only draws
and reports the span picked ([start, end)); the sums are computed here, on the page's capture (`span_sums`, tested
against the pattern's rows and columns). Token text is set with textContent: never parsed as HTML.
"""

from __future__ import annotations

import numpy as np

from ..attention import HIGHLIGHT
from .attention_map import colour_stops

NAME = "gptviz_token_span"
DIRECTIONS = ("from", "to")


def check_span(T: int, start: int, end: int) -> None:
    if not 0 <= start < end <= T:
        raise ValueError(f"a span is [start, end) with 0 <= start < end <= {T}, got [{start}, {end})")


def span_sums(pattern, start: int, end: int, direction: str) -> np.ndarray:
    """pattern [query, key] of one head (or a mean). "from": each key's weight summed over the span's queries
    (rows start..end-1 summed); "to": each query's weight on the span's keys (columns start..end-1 summed). [T]."""
    p = np.asarray(pattern, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"pattern must be [T, T], got shape {p.shape}")
    check_span(p.shape[0], start, end)
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    p = np.nan_to_num(p, nan=0.0)  # a masked cell weighs nothing
    return p[start:end].sum(axis=0) if direction == "from" else p[:, start:end].sum(axis=1)


def reachable(T: int, start: int, end: int, direction: str) -> np.ndarray:
    """[T] bool: the tokens the span can look at ("from": keys up to its last token) or that can look at it ("to":
    queries from its first token on); the others are drawn grey, not as zeros."""
    positions = np.arange(T)
    return positions < end if direction == "from" else positions >= start


def payload(pattern, labels: list[str], *, start: int, end: int, direction: str) -> dict:
    """Plain data for the browser: the tokens, their summed values (None where the span and the token cannot see
    each other), the span and the colour scale (0 to the largest sum)."""
    values = span_sums(pattern, start, end, direction)
    T = len(values)
    if len(labels) != T:
        raise ValueError(f"{len(labels)} labels for {T} tokens")
    seen = reachable(T, start, end, direction)
    top = float(values[seen].max()) if seen.any() else 0.0
    return {
        "tokens": [str(t) for t in labels],
        "values": [round(float(v), 6) if s else None for v, s in zip(values, seen, strict=True)],
        "start": int(start),
        "end": int(end),
        "direction": direction,
        "cmax": top if top > 0 else 1.0,
        "value_name": "summed weight " + ("from the span" if direction == "from" else "on the span"),
        "colors": colour_stops(),
        "highlight": HIGHLIGHT,
    }


def picked_span(value, T: int) -> tuple[int, int] | None:
    """The [start, end) the browser reported, or None when it is not a span of these T tokens."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    start, end = value
    return (start, end) if 0 <= start < end <= T else None


def uniform_span_sums(start: int, end: int) -> np.ndarray:
    """What `span_sums(..., "from")` gives under uniform attention (query i spreads 1/(i+1) over keys 0..i): key j gets
    the sum of 1/(i+1) over the span's queries i >= j. [end] (the keys the span can see)."""
    check_span(end, start, end)
    queries = np.arange(start, end)
    return np.array([float((1.0 / (queries[queries >= j] + 1)).sum()) for j in range(end)])
