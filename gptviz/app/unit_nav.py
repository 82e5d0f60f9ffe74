"""Unit ids that open the unit page in the same session (and a written token that opens the Why page).

A Markdown or LinkColumn link opens a new browser tab: a new session, which runs the whole app from the start (seconds
on a 2-core CPU, several times the page's own run; `python -m benchmarks unit-page` times both). Here a unit id is a
pill or a table row: picking it records where to go, and the router switches page at the start of the next run, in this
session, with the model and caches already loaded. The address bar then shows the unit page's link
(gptviz.app.links.unit_url), to copy."""

from __future__ import annotations

import streamlit as st

from . import keys as K
from .pages import PAGES_DIR

state = st.session_state


def go_to_unit(unit: str, norm: str | None = None) -> None:
    """Open `unit` on the unit page at the next run (call from a widget's callback). `norm`: the bundled twin of
    that wiring (a page comparing both twins opens each head in its own model)."""
    state[K.UNIT] = str(unit)
    state[K.UNIT_TAB] = K.UNIT_TABS[0]
    if norm is not None:
        state[K.MODEL_SOURCE], state[K.NORM] = K.SOURCE_BUNDLED, norm
    state[K.UNIT_NAV_PENDING] = True


def go_to_why(prompt: str, target: int) -> None:
    """Open the Why page's attribution graph for `target` written after `prompt` (the sidebar's prompt becomes that
    text) at the next run, in this session (call from a widget's callback)."""
    state[K.PROMPT] = prompt
    state[K.WHY_TARGET] = int(target)
    state[K.WHY_VIEW] = K.WHY_GRAPH_VIEW
    state.pop(K.WHY_NODE, None)  # the node checked belongs to the last graph
    state[K.WHY_NAV_PENDING] = True


def go_to_why_attends(layer: int, head: int, query: int, key: int) -> None:
    """Open the Why page's "why a head attends" tab on one attention score of the sidebar's prompt, at the next run,
    in this session (call from a widget's callback, e.g. a click on an attention map's cell)."""
    state[K.WHY_QK_LAYER], state[K.WHY_QK_HEAD] = int(layer), int(head)
    state[K.WHY_QK_QUERY], state[K.WHY_QK_KEY] = int(query), int(key)
    state[K.WHY_VIEW] = K.WHY_QK_VIEW
    state[K.WHY_NAV_PENDING] = True


def follow_pending() -> None:
    """The router's part: switch to the unit page or the Why page if a pick asked for it (st.switch_page ends
    this run)."""
    for flag, page in ((K.UNIT_NAV_PENDING, "units.py"), (K.WHY_NAV_PENDING, "why.py")):
        if state.pop(flag, False):
            keep_the_sidebar()
            st.switch_page(PAGES_DIR / page)


def keep_the_sidebar() -> None:
    """The switch ends this run before the sidebar is drawn, so Streamlit drops its widgets' values as stale: the
    unit page opened on the default prompt and model, not the visitor's. Set again as session values, they are what
    the sidebar draws next."""
    from .sidebar import MODEL_KEYS

    for key in (*MODEL_KEYS, K.PROMPT, K.EXPORT_FORMAT, K.PALETTE):
        if key in state:
            state[key] = state[key]


def follow_from_fragment() -> None:
    """In a fragment: follow a pick its own callback just recorded (a fragment rerun runs no router)."""
    if _fragment_rerun():
        follow_pending()


def _fragment_rerun() -> bool:
    """This run reruns fragments only (a widget in a fragment changed): the router did not run before it."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def _pill_picked(key: str, norm: str | None) -> None:
    unit = state.get(key)
    state[key] = None  # the pill does not stay selected for the next visit
    if unit:
        go_to_unit(unit, norm)


def unit_pills(label: str, units, key: str, norm: str | None = None, help: str | None = None) -> None:
    """Unit ids as pills; picking one opens what it does over the corpus. Pills inside a fragment: a pick reruns only
    the fragment, not the router that follows the pick, so the pills follow it themselves (at once, not at the next
    full run)."""
    follow_from_fragment()
    st.pills(
        label,
        [str(u) for u in units],
        key=key,
        on_change=_pill_picked,
        args=(key, norm),
        help=help or "Pick one to open what it does over the corpus (its top examples and direct effect).",
    )


def unit_of_selection(selection, units: list[str]) -> str | None:
    """The unit of a dataframe's picked row (its selection: {"rows": [...]}), or None."""
    rows = selection["rows"]
    return units[rows[0]] if rows and rows[0] < len(units) else None


def _row_picked(key: str, units: list[str], norm: str | None) -> None:
    unit = unit_of_selection(state[key]["selection"], units)
    if unit is not None:
        go_to_unit(unit, norm)


def open_on_row_pick(key: str, units, norm: str | None = None):
    """A dataframe's on_select callback: picking row i opens units[i] (the table drawn with selection_mode
    "single-row" and this key)."""
    units = [str(u) for u in units]
    return lambda: _row_picked(key, units, norm)
