"""The "What does this unit do?" page's search tab, drawn: the units most active on a token of the prompt, and those
that fire most on a word across the corpus, each a table whose rows open the unit. Layout only: the numbers come from
gptviz.app.services.unit_page and the index (gptviz.index)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ... import index as ix
from ...model.model import GPT
from ...model.tokenizer import decode, encode, position_labels
from .. import display, reproduce, sidebar
from .. import keys as K
from .. import settings as S
from .. import unit_index as ui
from ..model_service import ModelSpec
from ..services import LimitError
from ..services import unit_page as services
from ..unit_nav import open_on_row_pick
from .unit_sections import one_token_box, per_play_of


def top_example_text(loaded: ui.Loaded, unit: ix.Unit, before: int = 10, after: int = 3) -> str:
    """The unit's top example as plain text, its peak token in ⟦ ⟧ (read from the corpus; no model run)."""
    found = ix.top_examples(loaded.index, unit, 1)
    if not found:
        return ""
    e = found[0]
    ids = loaded.docs[e.doc].ids
    enc = loaded.enc
    text = (
        decode(ids[max(0, e.pos - before) : e.pos], enc)
        + "⟦"
        + decode(ids[e.pos : e.pos + 1], enc)
        + "⟧"
        + decode(ids[e.pos + 1 : e.pos + 1 + after], enc)
    )
    return text.replace("\n", " ↵ ")


def units_table(loaded: ui.Loaded, units: list[ix.Unit], columns: dict[str, list], key: str) -> None:
    """The units with their top example; picking a row opens that unit in the first tab."""
    frame = pd.DataFrame(
        {
            "unit": [str(u) for u in units],
            **columns,
            "its top example in the corpus": [top_example_text(loaded, u) for u in units],
        }
    )
    st.caption("Pick a row to open that unit.")
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        key=key,
        selection_mode="single-row",
        on_select=open_on_row_pick(key, units),
        column_config={"unit": st.column_config.TextColumn("unit", width="small", pinned=True)},
    )


def prompt_search(spec: ModelSpec, model: GPT, loaded: ui.Loaded) -> None:
    prompt = sidebar.prompt_tokens(model.config.n_ctx, vocab_size=model.config.vocab_size, enc=loaded.enc)
    if prompt is None:
        return
    ids = prompt.ids
    sidebar.keep_valid(K.UNIT_FOCUS, range(len(ids)), len(ids) - 1)
    labels = position_labels(ids, loaded.enc)
    pos = S.UNIT_FOCUS.selectbox(st, options=range(len(ids)), index=len(ids) - 1, format_func=labels.__getitem__)
    try:
        found = services.units_here(spec, ids, pos)
    except LimitError as err:  # the server's memory has no room for the prompt's forward pass now
        st.warning(str(err))
        return
    st.markdown(
        "**Most active here**, by value / the unit's peak over the corpus (1.0 = as high as it ever "
        "went; a unit's typical value is its median, beside it)."
    )
    units_table(
        loaded,
        [s.unit for s in found],
        {
            "value here": [s.value for s in found],
            "share of its corpus peak": [s.share_of_peak for s in found],
            "its median": [ix.quantiles(loaded.index, s.unit).get(0.5) for s in found],
        },
        key=K.UNIT_HERE_TABLE,
    )
    reproduce.show(reproduce.units_here(spec, ids, pos, per_play_of(loaded), reproduce.prompt_text()))


def word_search(spec: ModelSpec, loaded: ui.Loaded) -> None:
    word = one_token_box(S.UNIT_WORD, placeholder="e.g. king")
    if word is None:
        return
    if not word.strip():
        st.info("Type a word to see the neurons that fire most on it across the corpus.")
        return
    counts = services.TokenCounts(loaded.index)
    # a word typed bare means the word in running text (' king'); punctuation means itself ('!')
    forms = [" " + word.strip(), word] if word[:1].isalpha() else [word, " " + word.strip()]
    enc = loaded.enc  # the model's own tokenizer: GPT-1's lower-cases and splits words its own way
    tried = [w for w in dict.fromkeys(forms + [word.strip()]) if len(encode(w, enc)) == 1]
    frequent = [w for w in tried if encode(w, enc)[0] in counts]
    if not frequent:
        why = (
            (
                "is not one token of the model's vocabulary (it splits into "
                + " + ".join(repr(decode([t], enc)) for t in encode(word, enc))
                + ")"
            )
            if not tried
            else f"occurs fewer than {loaded.index.meta['top_tokens']['min_count']} times in the corpus"
        )
        st.warning(display.md_text(f"{word!r} {why}; try another word or one of its pieces."))
        return
    token = encode(frequent[0], enc)[0]
    found = ix.units_for_token(loaded.index, token, k=10)
    st.markdown(
        display.md_text(
            f"Token {decode([token], enc)!r} (id {token}, {counts[token]:,} times in the corpus): "
            "the neurons whose mean on it is furthest above their own mean, in standard "
            "deviations (z; 0 = typical)."
        )
    )
    units_table(
        loaded,
        [f.unit for f in found],
        {
            "z": [f.z for f in found],
            "mean on it": [f.mean for f in found],
            "its mean": [float(loaded.index.arrays["mean"][loaded.index.flat(f.unit)]) for f in found],
        },
        key=K.UNIT_WORD_TABLE,
    )
    reproduce.show(reproduce.units_for_word(spec, token, per_play_of(loaded)))


def search_tab(spec: ModelSpec, model: GPT, loaded: ui.Loaded) -> None:
    st.subheader("On a token of the prompt")
    prompt_search(spec, model, loaded)
    st.subheader("On a word, across the corpus")
    word_search(spec, loaded)
