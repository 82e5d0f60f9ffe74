"""The browser views of gptviz.figures.browser mounted as Streamlit components (components v2, no iframe): each
registered once per process from its .js and .css, its callbacks read from the session's state. The payloads are
built by the library (pure, and the notebook's widgets draw the same ones)."""

from __future__ import annotations

from functools import cache

import streamlit as st

from ..figures.browser import asset
from ..figures.browser import attention_map as map_view
from ..figures.browser import chip_span as chips_view
from ..figures.browser import query_bars as bars_view
from ..figures.browser import token_rows as rows_view
from ..figures.browser import token_span as span_view


@cache
def registered(name: str, root_class: str, stem: str):
    """Component `name`, registered once per process (a second registration replaces the first with a warning): its
    HTML a <div class=root_class>, its CSS and JS read from gptviz/figures/browser/<stem>.css and .js."""
    return st.components.v2.component(
        name, html=f'<div class="{root_class}"></div>', css=asset(stem, "css"), js=asset(stem, "js")
    )


def attention_map(data: dict, *, key: str, on_pick, on_why=None, keys: bool = False):
    """Mount the component. `on_pick(layer, head_index)` runs (as a Streamlit callback, before the rerun) when the
    visitor picks another layer or head in it; head_index == n_heads is the mean. With `on_why`, a click on a cell
    shows its details and a button that calls `on_why(layer, head, query, key)` (the prompt's map, not a
    generation's); `keys`: [ ] and , . step the layer and head from the keyboard."""

    def picked():
        value = (st.session_state.get(key) or {}).get("pick")
        if isinstance(value, dict) and isinstance(value.get("layer"), int) and isinstance(value.get("head"), int):
            on_pick(value["layer"], value["head"])

    def asked():
        cell = map_view.cell_asked((st.session_state.get(key) or {}).get("why"), data["n_layers"], data["n_heads"])
        if cell is not None:
            on_why(*cell)

    data = dict(data, why=on_why is not None, keys=bool(keys))
    default, why = {"pick": None}, {}
    if on_why is not None:  # Streamlit refuses a default state with no callback: "why" only where a click can ask
        default["why"], why["on_why_change"] = None, asked
    mount = registered(map_view.NAME, "gv-map", "attention_map")
    return mount(data=data, key=key, default=default, on_pick_change=picked, **why)


def query_bars(data: dict, *, key: str):
    """Mount the component with its payload (gptviz.figures.browser)."""
    return registered(bars_view.NAME, "gv-qbars", "query_bars")(data=data, key=key)


def token_rows(data: dict, *, key: str):
    """Mount the component with its payload (gptviz.figures.browser)."""
    return registered(rows_view.NAME, "gv-rows", "token_rows")(data=data, key=key)


def token_span(data: dict, *, key: str, on_span):
    """Mount the component; `on_span(start, end)` runs (a Streamlit callback) when the visitor picks a span."""

    def picked():
        span = span_view.picked_span((st.session_state.get(key) or {}).get("span"), len(data["tokens"]))
        if span is not None:
            on_span(*span)

    mount = registered(span_view.NAME, "gv-span", "token_span")
    return mount(data=data, key=key, default={"span": None}, on_span_change=picked)


def chip_span(data: dict, *, key: str, on_span):
    """Mount the span gesture on the pills named in `data` (it draws nothing itself); `on_span(start, end)` runs (a
    Streamlit callback) when the visitor drags across the chips or shift-clicks one."""

    def picked():
        value = (st.session_state.get(key) or {}).get("span")
        span = chips_view.picked_span(value, data["T"])
        if span is not None:
            on_span(*span)

    mount = registered(chips_view.NAME, "gv-chipspan", "chip_span")
    return mount(data=data, key=key, default={"span": None}, on_span_change=picked)
