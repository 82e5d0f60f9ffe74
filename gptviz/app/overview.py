"""The Overview page's service: the sidebar's prompt through the model, read at one position
(gptviz.methods.overview), and what a click on one of the diagram's boxes opens."""

from __future__ import annotations

from typing import NamedTuple

import streamlit as st
from streamlit.errors import StreamlitPageNotFoundError

from ..methods.overview import ForwardOverview, forward_overview, overview_hook_names
from ..model.tokenizer import position_labels, token_labels
from . import keys as K
from . import settings as S
from .model_service import capture_cache, require_capture
from .pages import PAGES_DIR
from .seen import Seen
from .sidebar import keep_valid

state = st.session_state

# the page each kind of box opens (gptviz.figures.overview.Cell.kind)
STAGE_PAGES = {
    "token": "embeddings",
    "embed": "embeddings",
    "add": "activations",
    "ln": "norms",
    "attn": "attention",
    "mlp": "activations",
    "lens": "activations",
    "ln_f": "activations",
    "prob": "why",
    "next": "why",
}
# Stages the page also links as words, in the order the forward pass meets them (title, page stem)
STAGE_LINKS = (
    ("Embeddings", "embeddings"),
    ("Attention", "attention"),
    ("Activations", "activations"),
    ("Why this token?", "why"),
    ("Generation", "generation"),
)
# The diagram draws stages left to right above this width (px) and top to bottom at or below it: Streamlit's
# width for starting with the sidebar closed (display.NARROW_PX), where a phone's 390 px begins
NARROW_PX = 768
# Past this many blocks the left-to-right layout's columns get too narrow for their numbers: top to bottom on any
# screen (gpt2-medium's 24 blocks would be 36 px columns in a 1,050 px page)
MOST_WIDE_BLOCKS = 12
_CSS = (
    f"<style>@media (max-width: {NARROW_PX}px) {{.st-key-{K.OV_WIDE} {{display: none;}}}} "
    f"@media (min-width: {NARROW_PX + 1}px) {{.st-key-{K.OV_TALL} {{display: none;}}}}</style>"
)


class Reading(NamedTuple):
    """The prompt read at the page's chosen position."""

    overview: ForwardOverview
    names: dict[int, str]  # token text of every id the overview names


def position_picker(ids: tuple[int, ...], column, enc=None) -> int:
    """The position the diagram follows: the last token unless another is picked (`enc`: the model's tokenizer)."""
    labels = position_labels(ids, enc)
    keep_valid(K.OV_POSITION, range(len(ids)), len(ids) - 1)
    return S.OV_POSITION.selectbox(column, options=range(len(ids)), index=len(ids) - 1, format_func=labels.__getitem__)


def overview_at(seen: Seen, position: int) -> Reading:
    """One capture of the prompt (cached, shared), read at `position`."""
    cfg = seen.cfg
    names = overview_hook_names(cfg.n_layers, cfg.norm)
    cache = require_capture(seen.spec, seen.ids, names)
    logits, _ = capture_cache(seen.spec, seen.ids, names)  # the same capture: a cache hit
    try:
        ov = forward_overview(seen.model, cache.prompt(0), logits[0], position, ids=seen.ids)  # the one prompt
    except (ValueError, RuntimeError) as err:
        st.error(f"The model could not be read at this position: {err}")
        st.stop()
    wanted = {ov.token_id, ov.embed_lens_id, *ov.top_ids, *(b.lens_id for b in ov.blocks)}
    wanted.discard(-1)
    if ov.next_id is not None:
        wanted.add(ov.next_id)
    ordered = sorted(wanted)
    return Reading(ov, dict(zip(ordered, token_labels(ordered, seen.enc), strict=True)))


def layouts(n_layers: int) -> tuple[str, ...]:
    """The layouts the page draws: one per screen width, or top to bottom only for a deep model."""
    return ("wide", "tall") if n_layers <= MOST_WIDE_BLOCKS else ("tall",)


def screen_style() -> None:
    """Show each layout only on the screens it is for (style only: no user or model text is part of it)."""
    st.html(_CSS)


def chart_key(layout: str) -> str:
    """The diagram's key: a new one after each click, so a visit back does not find the old click selected."""
    return K.per_item(K.OV_CHART, layout, state.get(K.OV_CHART_SEQ, 0))


def stage_target(point: dict, position: int, ids: tuple[int, ...]) -> tuple[str, dict]:
    """(page stem, settings for that page) for a clicked box (its customdata [kind, layer, head, token]): block i's
    attention opens on that head with this token as the query, a per-token view on this token, a next-token
    box in Why this token? on that candidate (at the prompt's last position, which that page explains)."""
    kind, layer, head, token = point["customdata"][:4]
    layer, head, token = int(layer), int(head), int(token)
    page = STAGE_PAGES.get(kind, "activations")
    settings: dict = {}
    if kind == "attn":
        settings = {
            K.ATT_LAYER: layer,
            K.ATT_HEAD: head,
            K.ATT_QUERY: position,
            K.ATT_QUERY_POS: position,
            K.ATT_QUERY_FOR: (ids, position),
        }
    elif page == "activations":
        settings = {K.ACT_FOCUS: position}
    elif kind == "prob" and position == len(ids) - 1:
        settings = {K.WHY_TARGET: token}
    return page, settings


def stage_clicked(key: str, position: int, ids: tuple[int, ...]) -> None:
    """The diagram's on_select: remember where the clicked box goes; the page switches at its next run."""
    points = (state.get(key) or {}).get("selection", {}).get("points", [])
    if not points or "customdata" not in points[0]:
        return
    page, settings = stage_target(points[0], position, ids)
    state.update(settings)
    state[K.OV_GO] = page
    state[K.OV_CHART_SEQ] = state.get(K.OV_CHART_SEQ, 0) + 1


def follow_click() -> None:
    """Open the page a click asked for (st.switch_page cannot run inside the click's callback)."""
    page = state.pop(K.OV_GO, None)
    if page is not None:
        st.switch_page(PAGES_DIR / f"{page}.py")


def page_link(where, stem: str, label: str, icon: str) -> None:
    """st.page_link in this session (the model and prompt stay as they are); nothing where the app's navigation is
    not running (a test that runs one page file alone), which has no other page to link to."""
    try:
        where.page_link(PAGES_DIR / f"{stem}.py", label=label, icon=icon)
    except StreamlitPageNotFoundError:
        pass


def stage_links() -> None:
    """The stages as links too (keyboard, screen readers), in one row."""
    for column, (title, stem) in zip(st.columns(len(STAGE_LINKS)), STAGE_LINKS, strict=True):
        page_link(column, stem, title, ":material/arrow_forward:")


def overview_link() -> None:
    """The one line another page (Attention, the landing page) spends on this one."""
    page_link(st, "overview", "The whole model at a glance", "🗺️")
