"""The Attention page's main heatmap as a small browser component: every head of the layers it was sent, drawn on
a canvas, with its own layer and head pickers, so a switch redraws in the browser without a round trip.

Why not a Plotly figure: a Plotly heatmap takes a visible moment to draw in Chromium even at 64 x 64, and a switch
through a Streamlit picker adds a script run and a new figure; here a switch is a canvas redraw, and the choice goes
back to Python afterwards (so the other views follow) without holding up the heatmap.

`payload` is pure (tested); `attention_map` mounts it (Streamlit's components v2, no iframe). Token text only ever
reaches the page as textContent or canvas text, never as HTML.
"""

from __future__ import annotations

import base64
from functools import lru_cache

import numpy as np
import plotly.colors as pcolors

from ...model.heads import heads_mean, heads_then_mean
from ..attention import HIGHLIGHT, OUT_OF_WINDOW_COLOR, SCALES
from ..common import ATTENTION_SCALE, MASKED_COLOR
from ..palette import sequential

LEVELS = 65535  # weights travel as uint16: w * LEVELS, rounded (a step of 1.5e-5)
SEND_ALL_CELLS = 1_000_000  # send every layer when layers x (heads + mean) x T x T stays under this, else one layer;
# when even one layer is over it (a long prompt on a wide model: 13 x 1024 x 1024 cells is 36 MB of base64 at every
# rerun), the picked head alone in full and every head of the layer as a max-pooled thumbnail
THUMB_SIZE = 64  # a pooled thumbnail's longer side, in blocks
NAME = "gptviz_attention_map"


def quantize(weights: np.ndarray) -> np.ndarray:
    """Weights in [0, 1] as little-endian uint16 levels; NaN (a masked cell) becomes 0 (the mask is drawn from T)."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float32), nan=0.0)
    return np.rint(np.clip(w, 0.0, 1.0) * LEVELS).astype("<u2")


def layers_to_send(n_layers: int, n_heads: int, cells: int, layer: int) -> list[int]:
    """Every layer when layers x (heads + mean) x `cells` (one pattern's cells) fits SEND_ALL_CELLS (then a layer
    switch is a redraw too), else only `layer`."""
    if n_layers * (n_heads + 1) * cells <= SEND_ALL_CELLS:
        return list(range(n_layers))
    return [layer]


def max_pooled(weights: np.ndarray, size: int = THUMB_SIZE) -> tuple[np.ndarray, int]:
    """[..., Q, K] max-pooled over b x b blocks, b the smallest block that brings the longer side to `size` or less:
    ([..., ceil(Q / b), ceil(K / b)], b). The maximum, not the mean, so one strong weight still shows."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float32), nan=0.0)
    Q, K = w.shape[-2:]
    b = max(1, -(-max(Q, K) // size))
    tq, tk = -(-Q // b), -(-K // b)
    padded = np.zeros(w.shape[:-2] + (tq * b, tk * b), dtype=np.float32)
    padded[..., :Q, :K] = w
    blocks = padded.reshape(w.shape[:-2] + (tq, b, tk, b))
    return blocks.max(axis=(-3, -1)), b


def colour_stops(scale: str = ATTENTION_SCALE) -> list[list]:
    """A Plotly colour scale (the attention one by default, as the figures use it) as [position, [r, g, b]] stops
    (a fresh copy of the cached ones: Plotly's lookup was a large part of a live frame's server time)."""
    return [[s, list(c)] for s, c in _colour_stops(scale)]


@lru_cache(maxsize=8)
def _colour_stops(scale: str) -> tuple:
    stops = pcolors.get_colorscale(scale)
    rgb = (pcolors.unlabel_rgb(c) if c.startswith("rgb") else pcolors.hex_to_rgb(c) for _, c in stops)
    return tuple((float(s), tuple(int(round(v)) for v in c)) for (s, _), c in zip(stops, rgb, strict=True))


def _check(n_layers: int, n_heads: int, layer: int, head, mean_head, scale: str, head_names) -> tuple[int, list]:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer {layer} is not in 0..{n_layers - 1}")
    head_index = n_heads if head == mean_head else int(head)
    if not 0 <= head_index <= n_heads:
        raise ValueError(f"head {head} is not in 0..{n_heads - 1} or the mean")
    names = head_names or [f"head {h}" for h in range(n_heads)] + ["mean of all heads"]
    if len(names) != n_heads + 1:
        raise ValueError(f"{len(names)} head names for {n_heads} heads and their mean")
    return head_index, [str(n) for n in names]


def _encode(
    weights: np.ndarray,
    sent: list[int],
    n_layers: int,
    head_index: int,
    names: list,
    *,
    layer: int,
    scale: str,
    row_labels,
    col_labels,
    row_start,
    row_end,
    row_positions,
    row_names,
    query: int,
    title_prefix: str,
    title_suffix: str,
    x_title: str,
    y_title: str,
    divider: int,
    height: int,
) -> dict:
    """weights [sent layers, heads + 1, Q, K] and what the browser needs to draw and label them. When that is more
    than SEND_ALL_CELLS, only the picked head goes in full ("heads"), with pooled thumbnails of all ("thumbs")."""
    _, H1, Q, K = weights.shape
    heads, thumbs = list(range(H1)), None
    if weights.size > SEND_ALL_CELLS:
        pooled, block = max_pooled(weights)
        thumbs = {
            "weights": base64.b64encode(quantize(pooled).tobytes()).decode("ascii"),
            "block": block,
            "Q": pooled.shape[-2],
            "K": pooled.shape[-1],
        }
        heads, weights = [head_index], weights[:, [head_index]]
    return {
        "Q": Q,
        "K": K,
        "n_layers": n_layers,
        "n_heads": H1 - 1,
        "layers": sent,
        "heads": heads,
        "thumbs": thumbs,
        "weights": base64.b64encode(quantize(weights).tobytes()).decode("ascii"),
        "levels": LEVELS,
        "row_labels": [str(t) for t in row_labels],
        "col_labels": [str(t) for t in col_labels],
        "row_start": [int(v) for v in row_start],
        "row_end": [int(v) for v in row_end],
        "row_positions": [int(v) for v in row_positions],
        "row_names": list(row_names),
        "layer": int(layer),
        "head": head_index,
        "query": int(query),
        "scale": scale,
        "head_names": names,
        "colors": colour_stops(sequential(ATTENTION_SCALE)),
        "masked": MASKED_COLOR,
        "out_of_window": OUT_OF_WINDOW_COLOR,
        "highlight": HIGHLIGHT,
        "title_prefix": title_prefix,
        "title_suffix": title_suffix,
        "x_title": x_title,
        "y_title": y_title,
        "divider": int(divider),
        "height": int(height),
    }


def payload(
    patterns,
    labels: list[str],
    *,
    layer: int,
    head: int,
    query: int,
    scale: str,
    mean_head: int | str = "mean",
    head_names: list[str] | None = None,
    title_prefix: str = "Layer",
    height: int = 560,
    head_notes: list[list[str]] | None = None,
    query_start: int | None = None,
) -> dict:
    """A prompt's patterns [layers, heads, T, T] for the browser: uint16 levels (base64) for the layers sent, each
    with its heads and their mean last; `head` may be `mean_head` (the mean). Plain data only: labels are drawn as
    text by the browser. `head_notes[layer][head]` (heads, then the mean) is a line drawn under the title while that
    head is shown (what it does on this prompt), for every layer, sent or not. `query_start`: the first of a span of
    queries ending at `query` (their rows are outlined together); None: the query alone."""
    p = np.asarray(patterns, dtype=np.float32)
    if p.ndim != 4 or p.shape[-1] != p.shape[-2]:
        raise ValueError(f"patterns must be [layers, heads, T, T], got shape {p.shape}")
    L, H, T, _ = p.shape
    if len(labels) != T:
        raise ValueError(f"{len(labels)} labels for {T} tokens")
    head_index, names = _check(L, H, layer, head, mean_head, scale, head_names)
    if head_notes is not None and (len(head_notes) != L or any(len(row) != H + 1 for row in head_notes)):
        raise ValueError(f"head_notes must be {L} layers x {H + 1} entries (heads, then the mean)")
    sent = layers_to_send(L, H, T * T, layer)
    with_mean = heads_then_mean(p[sent], head_axis=1)  # [sent, H + 1, T, T]
    data = _encode(
        with_mean,
        sent,
        L,
        head_index,
        names,
        layer=layer,
        scale=scale,
        row_labels=labels,
        col_labels=labels,
        row_start=[0] * T,
        row_end=range(1, T + 1),
        row_positions=range(T),
        row_names=[""] * T,
        query=query if 0 <= query < T else T - 1,
        title_prefix=title_prefix,
        title_suffix="",
        x_title="key (looked at)",
        y_title="query (looking)",
        divider=0,
        height=height,
    )
    data["head_notes"] = None if head_notes is None else [[str(n) for n in row] for row in head_notes]
    start = data["query"] if query_start is None else int(query_start)
    if not 0 <= start <= data["query"]:
        raise ValueError(f"query_start {start} is not in 0..{data['query']}")
    data["query_start"] = start
    return data


def generation_payload(
    steps,
    labels: list[str],
    n_prompt: int,
    *,
    layer: int,
    head,
    scale: str,
    mean_head: int | str = "mean",
    head_names: list[str] | None = None,
    height: int = 480,
    every_layer: bool = True,
) -> dict:
    """A generation's attention for the browser: one row per step (the query that predicted that step's token),
    over every key position any step could see (prompt, then generated). Step s's query sits at position
    n_prompt - 1 + s and saw keys from its window start on; `labels` cover prompt and generated tokens. Sends
    every layer when it fits SEND_ALL_CELLS (and `every_layer`), else the picked one."""
    S = len(steps)
    if S == 0:
        raise ValueError("a generation payload needs at least one step")
    L, H = steps[0].attention.shape[:2]
    head_index, names = _check(L, H, layer, head, mean_head, scale, head_names)
    K = n_prompt + S - 1
    if len(labels) < K + 1:
        raise ValueError(f"{len(labels)} labels for {K + 1} positions")
    sent = layers_to_send(L, H, S * K, layer) if every_layer else [layer]
    w = np.zeros((len(sent), H + 1, S, K), dtype=np.float32)
    starts, ends = [], []
    for i, step in enumerate(steps):
        q, w0 = n_prompt - 1 + i, int(step.window_start)
        att = np.asarray(step.attention[sent], dtype=np.float32)  # [sent, H, window]
        width = q + 1 - w0
        w[:, :H, i, w0 : q + 1] = att[..., :width]
        starts.append(w0)
        ends.append(q + 1)
    # the heads' mean in one pass, not a step at a time (it was most of a live frame's own time): the same sums in
    # the same order, and zero outside each step's window as before
    w[:, H] = heads_mean(w[:, :H], head_axis=1)
    return _encode(
        w,
        sent,
        L,
        head_index,
        names,
        layer=layer,
        scale=scale,
        row_labels=[labels[n_prompt + i] for i in range(S)],
        col_labels=labels[:K],
        row_start=starts,
        row_end=ends,
        row_positions=[n_prompt - 1 + i for i in range(S)],
        row_names=[f"step {i} (predicted '{labels[n_prompt + i]}'): " for i in range(S)],
        query=-1,
        title_prefix="Layer",
        title_suffix=": attention of each generating query",
        x_title="key position (prompt, then generated)",
        y_title="generated token",
        divider=n_prompt,
        height=height,
    )


def decode_weights(data: dict) -> np.ndarray:
    """The inverse of the encoding: [layers sent, heads sent, Q, K] float weights (for tests); heads sent are
    data["heads"], every head and the mean unless the layer was too large (then the picked one)."""
    raw = np.frombuffer(base64.b64decode(data["weights"]), dtype="<u2").astype(np.float32) / data["levels"]
    return raw.reshape(len(data["layers"]), len(data["heads"]), data["Q"], data["K"])


def decode_thumbs(data: dict) -> np.ndarray | None:
    """The pooled thumbnails, [layers sent, heads + 1, Q / block, K / block], or None when every head went in full."""
    t = data.get("thumbs")
    if not t:
        return None
    raw = np.frombuffer(base64.b64decode(t["weights"]), dtype="<u2").astype(np.float32) / data["levels"]
    return raw.reshape(len(data["layers"]), data["n_heads"] + 1, t["Q"], t["K"])


def cell_asked(value, n_layers: int, n_heads: int) -> tuple[int, int, int, int] | None:
    """The (layer, head, query, key) of a "why does this head attend here?" click, or None when it is not one the
    QK decomposition takes (a single head of the model; a key the query can see)."""
    if not isinstance(value, dict):
        return None
    cell = [value.get(k) for k in ("layer", "head", "query", "key")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in cell):
        return None
    layer, head, query, key = cell
    if 0 <= layer < n_layers and 0 <= head < n_heads and 0 <= key <= query:
        return layer, head, query, key
    return None
