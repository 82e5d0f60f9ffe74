"""What does this unit do? One MLP neuron or attention head over a corpus: where it fires most (its top examples,
coloured token by token), the distribution of its values, the tokens its output promotes and suppresses; and the
other way round, the units most active on a token of the prompt or on a word across the corpus.

Everything corpus-wide comes from the model's neuron index (gptviz.index): shipped with the bundled models, built
here on request for others (gptviz.app.unit_index). The unit is in the URL (?unit=L2N26, ?unit=L1H2). The index and
the unit picker are drawn here; the first tab's sections and the search tab are draw-only views
(gptviz/app/views/unit_sections.py, unit_search.py).
"""

from __future__ import annotations

import streamlit as st

from gptviz import index as ix
from gptviz.app import display, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app import unit_index as ui
from gptviz.app.model_service import ModelSpec
from gptviz.app.services import LimitError
from gptviz.app.services import unit_page as services
from gptviz.app.views.unit_search import search_tab
from gptviz.app.views.unit_sections import (
    bands_section,
    effect_section,
    examples_section,
    export_section,
    histogram_section,
    per_play_of,
)
from gptviz.model.model import GPT

KINDS = S.UNIT_KIND.rule.options
DEFAULT_BUILD_TOKENS = 50_000
state = st.session_state


# ---------------------------------------------------------------------------------------------------- the index


def require_index(spec: ModelSpec, model: GPT) -> ui.Loaded:
    """The model's index (its ids in the model's own tokenizer: loaded.enc), or the offer to build one (the page
    stops until there is one)."""
    try:
        with st.spinner("Loading the neuron index..."):
            loaded = ui.find_index(spec)
    except (ix.IndexFormatError, ValueError, OSError) as err:
        st.error(display.md_text(f"The neuron index for this model could not be read: {err}"))
        build_section(spec, model, rebuild=True)  # a torn or stale file is no dead end: build it again
        st.stop()
    if loaded is None:
        build_section(spec, model)
        st.stop()
    return loaded


def build_section(spec: ModelSpec, model: GPT, rebuild: bool = False) -> None:
    st.info(
        ("Build it again: " if rebuild else "This model has no neuron index yet. Building one ")
        + "runs the model over the start of every play of the complete works and keeps, for every neuron and "
        "head, where it fires most."
    )
    top = min(services.index_tokens_limit(), 1_500_000)
    state.setdefault(K.UNIT_BUILD_TOKENS, min(DEFAULT_BUILD_TOKENS, top))
    tokens = S.UNIT_BUILD_TOKENS.number_input(
        st,
        min_value=1_000 if top >= 1_000 else 1,
        max_value=top,
        step=10_000,
        help=f"At most {top:,} on this server (GPTVIZ_INDEX_TOKENS).",
    )
    if not st.button("Build the index", key=K.UNIT_BUILD, type="primary"):
        return
    bar = st.progress(0.0, text="Starting...")

    def progress(done: int, total: int) -> None:
        bar.progress(min(1.0, done / max(1, total)), text=f"{done:,} of {total:,} tokens scanned")

    def waiting(ahead: int) -> None:
        bar.progress(
            0.0,
            text=f"Waiting for a turn: {ahead} build{'s' if ahead != 1 else ''} ahead of yours "
            "(this server builds indexes one after another, first come first served)",
        )

    try:
        ui.build(spec, int(tokens), progress, on_wait=waiting)
    except LimitError as err:
        st.error(str(err))
        return
    except (ValueError, RuntimeError) as err:
        st.error(f"The index could not be built: {err}")
        return
    st.rerun()


# ---------------------------------------------------------------------------------------------------- picking


def default_unit(index: ix.NeuronIndex) -> str:
    """L2N26 where it exists (the bundled models' punctuation neuron the issue starts from), else the first
    neuron of the middle layer."""
    try:
        return str(index.unit("L2N26"))
    except ValueError:
        return str(ix.Unit("neuron", index.n_layers // 2, 0))


def current_unit(index: ix.NeuronIndex) -> ix.Unit:
    """The unit in state (a link's, or picked), checked against the model; a bad one is replaced, with a notice."""
    raw = state.get(K.UNIT) or default_unit(index)
    try:
        unit = index.unit(raw)
    except ValueError as err:
        st.warning(f"{display.md_text(str(err))}. Showing {default_unit(index)} instead.")
        unit = index.unit(default_unit(index))
    state[K.UNIT] = str(unit)
    return unit


def _picked(d_ff: int, n_heads: int) -> None:
    """The pickers changed: the unit they name (the index clamped to the kind's size) becomes the page's unit."""
    kind, layer, index = state[K.UNIT_KIND], int(state[K.UNIT_LAYER]), int(state[K.UNIT_INDEX])
    size = d_ff if kind == "neuron" else n_heads
    state[K.UNIT] = str(ix.Unit(kind, layer, min(max(index, 0), size - 1)))


def unit_picker(index: ix.NeuronIndex) -> ix.Unit:
    unit = current_unit(index)
    state[K.UNIT_KIND], state[K.UNIT_LAYER], state[K.UNIT_INDEX] = unit.kind, unit.layer, unit.index
    sizes = (index.d_ff, index.n_heads)
    left, mid, right = st.columns([2, 1, 1])
    S.UNIT_KIND.radio(
        left,
        horizontal=True,
        on_change=_picked,
        args=sizes,
        format_func={"neuron": "MLP neuron", "head": "attention head"}.get,
    )
    S.UNIT_LAYER.selectbox(mid, options=range(index.n_layers), on_change=_picked, args=sizes)
    size = index.d_ff if unit.kind == "neuron" else index.n_heads
    S.UNIT_INDEX.number_input(
        right,
        label=S.UNIT_INDEX.label if unit.kind == "neuron" else "Head",
        min_value=0,
        max_value=size - 1,
        step=1,
        on_change=_picked,
        args=sizes,
    )
    return unit


# ---------------------------------------------------------------------------------------------------- the tabs


def unit_tab(spec: ModelSpec, model: GPT, loaded: ui.Loaded) -> None:
    unit = unit_picker(loaded.index)
    st.markdown(f"**{display.md_text(ix.summary(loaded.index, unit, loaded.enc))}**")
    contexts = examples_section(spec, loaded, unit)
    bands_section(spec, loaded, unit)
    left, right = st.columns(2)
    with left:
        histogram_section(loaded, unit)
    with right:
        source = effect_section(model, unit, contexts, loaded.enc)
    if unit.kind == "neuron" or source is not None:
        export_section(spec, loaded, unit, source)
    reproduce.show(reproduce.unit(spec, str(unit), per_play_of(loaded)))


def main() -> None:
    st.title("What does this unit do?")
    st.caption(
        "A neuron or an attention head over the whole corpus: where it fires most, how often, and what its "
        "output does to the next-token logits."
    )
    spec, model = sidebar.require_model()
    loaded = require_index(spec, model)
    # stateful tabs: a picked row opens tab one, and only the open tab is built (the search's table and its model
    # run cost a unit's page about as much again)
    one, search = st.tabs(K.UNIT_TABS, key=K.UNIT_TAB, on_change="rerun")
    if one.open:
        with one:
            unit_tab(spec, model, loaded)
    else:
        with search:
            search_tab(spec, model, loaded)


main()
