"""The Attention page's main heatmap as a small browser component: every head of the layers it was sent, drawn on
a canvas, with its own layer and head pickers, so a switch redraws in the browser without a round trip.

Why not a Plotly figure: a 64 x 64 Plotly heatmap takes 150-200 ms to draw in Chromium, and a switch through a
Streamlit picker adds a script run and a new figure; here a switch is a canvas redraw of a few milliseconds, and
the choice goes back to Python afterwards (so the other views follow) without holding up the heatmap.

`payload` is pure (tested); `attention_map` mounts it (Streamlit's components v2, no iframe). Token text only ever
reaches the page as textContent or canvas text, never as HTML.
"""
from __future__ import annotations

import base64
from importlib import resources

import numpy as np
import plotly.colors as pcolors

from .figures.attention import HIGHLIGHT, SCALES
from .figures.common import ATTENTION_SCALE, MASKED_COLOR

LEVELS = 65535          # weights travel as uint16: w * LEVELS, rounded (a step of 1.5e-5)
SEND_ALL_CELLS = 1_000_000  # send every layer when layers x (heads + mean) x T x T stays under this, else one layer
NAME = "gptviz_attention_map"


def quantize(weights: np.ndarray) -> np.ndarray:
    """Weights in [0, 1] as little-endian uint16 levels; NaN (a masked cell) becomes 0 (the mask is drawn from T)."""
    w = np.nan_to_num(np.asarray(weights, dtype=np.float32), nan=0.0)
    return np.rint(np.clip(w, 0.0, 1.0) * LEVELS).astype("<u2")


def layers_to_send(n_layers: int, n_heads: int, T: int, layer: int) -> list[int]:
    """Every layer when it fits SEND_ALL_CELLS (then a layer switch is a redraw too), else only `layer`."""
    if n_layers * (n_heads + 1) * T * T <= SEND_ALL_CELLS:
        return list(range(n_layers))
    return [layer]


def colour_stops() -> list[list]:
    """The attention colour scale as [position, 'rgb(r,g,b)'] stops, the one the Plotly figures use."""
    scale = pcolors.get_colorscale(ATTENTION_SCALE)
    rgb = (pcolors.unlabel_rgb(c) if c.startswith("rgb") else pcolors.hex_to_rgb(c) for _, c in scale)
    return [[float(s), [int(round(v)) for v in c]] for (s, _), c in zip(scale, rgb)]


def payload(patterns, labels: list[str], *, layer: int, head: int, query: int, scale: str,
            mean_head: int | str = "mean", head_names: list[str] | None = None, title_prefix: str = "Layer",
            height: int = 560) -> dict:
    """What the browser draws: patterns [layers, heads, T, T] as uint16 levels (base64) for the layers sent, each
    with its heads and their mean last; `head` may be `mean_head` (the mean). Plain data only: labels are drawn as
    text by the browser."""
    p = np.asarray(patterns, dtype=np.float32)
    if p.ndim != 4 or p.shape[-1] != p.shape[-2]:
        raise ValueError(f"patterns must be [layers, heads, T, T], got shape {p.shape}")
    L, H, T, _ = p.shape
    if len(labels) != T:
        raise ValueError(f"{len(labels)} labels for {T} tokens")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if not 0 <= layer < L:
        raise ValueError(f"layer {layer} is not in 0..{L - 1}")
    head_index = H if head == mean_head else int(head)
    if not 0 <= head_index <= H:
        raise ValueError(f"head {head} is not in 0..{H - 1} or the mean")
    names = head_names or [f"head {h}" for h in range(H)] + ["mean of all heads"]
    if len(names) != H + 1:
        raise ValueError(f"{len(names)} head names for {H} heads and their mean")
    sent = layers_to_send(L, H, T, layer)
    with_mean = np.concatenate([p[sent], p[sent].mean(axis=1, keepdims=True)], axis=1)  # [sent, H + 1, T, T]
    return {
        "T": T, "labels": [str(s) for s in labels], "n_layers": L, "n_heads": H, "layers": sent,
        "weights": base64.b64encode(quantize(with_mean).tobytes()).decode("ascii"), "levels": LEVELS,
        "layer": int(layer), "head": head_index, "query": int(query) if 0 <= query < T else T - 1,
        "scale": scale, "colors": colour_stops(), "masked": MASKED_COLOR, "highlight": HIGHLIGHT,
        "head_names": [str(n) for n in names], "title_prefix": title_prefix, "height": int(height),
    }


def decode_weights(data: dict) -> np.ndarray:
    """The inverse of payload's encoding: [layers sent, heads + 1, T, T] float weights (tests, and the export)."""
    raw = np.frombuffer(base64.b64decode(data["weights"]), dtype="<u2").astype(np.float32) / data["levels"]
    T = data["T"]
    return raw.reshape(len(data["layers"]), data["n_heads"] + 1, T, T)


def _asset(name: str) -> str:
    return resources.files("gptviz.assets").joinpath(name).read_text(encoding="utf-8")


_component = None


def attention_map(data: dict, *, key: str, on_pick):
    """Mount the component. `on_pick(layer, head_index)` runs (as a Streamlit callback, before the rerun) when the
    visitor picks another layer or head in it; head_index == n_heads is the mean."""
    import streamlit as st
    global _component
    if _component is None:  # register once per process: a second registration replaces the first with a warning
        _component = st.components.v2.component(NAME, html='<div class="gv-map"></div>',
                                                css=_asset("attention_map.css"), js=_asset("attention_map.js"))

    def picked():
        value = (st.session_state.get(key) or {}).get("pick")
        if isinstance(value, dict) and isinstance(value.get("layer"), int) and isinstance(value.get("head"), int):
            on_pick(value["layer"], value["head"])

    return _component(data=data, key=key, default={"pick": None}, on_pick_change=picked)
