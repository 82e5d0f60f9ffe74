"""The "What does this unit do?" page's first tab, drawn: one unit's top examples, examples from its whole range, the
distribution of its values, its direct effect on the logits and its downloads; and the one-token box the page's
boxes share. Layout only: the numbers come from gptviz.app.services.unit_page and gptviz.app.unit_index."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from ... import index as ix
from ...figures import unit_page as fu
from ...figures.browser.token_rows import payload as token_rows_payload
from ...figures.browser.token_rows import reserve_css
from ...model.model import GPT
from ...model.tokenizer import decode, encode, token_labels
from .. import display
from .. import keys as K
from .. import settings as S
from .. import unit_index as ui
from ..components import token_rows
from ..model_service import ModelSpec
from ..services import LimitError
from ..services import unit_page as services

state = st.session_state


def one_token_box(setting, key: str | None = None, **kwargs) -> str | None:
    """A text box for one token, its length checked here: None, with a message, when the text has TOKEN_BOX_CHARS
    characters or more, and it is never tokenised or echoed. A value set in session state (a link, a test) skips
    the widget's max_chars: past it, it is cleared before the box is drawn (never sent back to the browser). A
    websocket message may carry any length too; Streamlit cuts a widget's value to its max_chars (TOKEN_BOX_CHARS),
    so a cut value is told by its length, and stays in the box beside the message."""
    limit = services.TOKEN_BOX_CHARS
    key = key or setting.key  # a head's source token: the record's key per head (K.per_item)
    value = state.get(key)
    too_long = value is not None and (not isinstance(value, str) or len(value) > limit)
    if too_long:
        state[key] = ""
    typed = setting.text_input(st, key=key, max_chars=limit, **kwargs)
    if too_long or len(typed) >= limit:
        st.warning(
            f"That text is too long: this box takes one token, fewer than {limit} characters (GPT-2's "
            "longest has 66). Type a single word."
        )
        return None
    return typed


def examples_section(spec: ModelSpec, loaded: ui.Loaded, unit: ix.Unit) -> list[ix.Context]:
    examples = ix.top_examples(loaded.index, unit)
    try:
        with st.spinner("Reading the top examples..."):
            contexts = ui.contexts(spec, loaded, unit)
    except LimitError as err:  # the server's memory has no room for their forward pass now
        st.warning(str(err))
        return []
    by_attention = False
    if unit.kind == "head":
        by_attention = S.UNIT_COLOUR.radio(st, horizontal=True) != S.UNIT_COLOUR.default
    value_name = "attention" if by_attention else ("activation" if unit.kind == "neuron" else "output norm")
    cmax = 1.0 if by_attention else max(e.value for e in examples) if examples else 1.0
    held = sum(loaded.index.documents[e.doc]["held_out"] for e in examples)
    st.markdown(
        f"**Top {len(examples)} examples** over {loaded.index.tokens:,} tokens, peak token outlined "
        f"({held} from plays the model never trained on, marked *held out*)."
    )
    rows = fu.example_rows(loaded.index, contexts, examples, by_attention=by_attention, enc=loaded.enc)
    st.html(reserve_css(K.UNIT_EXAMPLES, len(rows)))  # style only (no model text): the rows' room before they draw
    token_rows(token_rows_payload(rows, value_name=value_name, cmax=cmax), key=K.UNIT_EXAMPLES)
    display.figure_download(
        lambda: fu.examples_text(rows, value_name=value_name, cmax=cmax),
        f"{unit}_top_examples.html",
        key=K.UNIT_EXAMPLES,
    )
    display.download_csv(
        pd.DataFrame(
            {
                "rank": [e.rank + 1 for e in examples],
                "value": [e.value for e in examples],
                "document": [e.doc_name for e in examples],
                "held_out": [loaded.index.documents[e.doc]["held_out"] for e in examples],
                "position": [e.pos for e in examples],
                "text": [decode(c.ids, loaded.enc) for c in contexts],
            }
        ),
        f"{unit}_top_examples.csv",
        key=K.per_item(K.UNIT_EXAMPLES, "csv"),
    )
    return contexts


def bands_section(spec: ModelSpec, loaded: ui.Loaded, unit: ix.Unit) -> None:
    """Five bands of the unit's positive values, weakest first, five examples of each (gptviz.index.bands)."""
    value_name = "activation" if unit.kind == "neuron" else "output norm"
    try:
        with st.spinner("Reading the examples from the whole range..."):
            bands = ui.band_contexts(spec, loaded, unit)
    except LimitError as err:
        st.warning(str(err))
        return
    if not bands:
        st.markdown(f"**Examples from the whole range**: {unit} is never above 0 on the corpus.")
        return
    st.markdown(
        "**Examples from the whole range**: its positive values in five bands between their quantiles, "
        "weakest first, five examples of each drawn uniformly from the band (the example's token outlined, "
        "every band coloured on the top examples' scale), so you see what it does weakly, not only at its "
        "peak."
    )
    positives, sample = ix.positive_count(loaded.index, unit), loaded.index.meta["bands"]["sample"]
    peak = bands[-1][0].hi  # the last band ends at the unit's largest value
    for band, contexts in bands:
        st.caption(
            display.md_text(
                fu.band_title(
                    band.number + 1,
                    band.levels,
                    band.lo,
                    band.hi,
                    len(band.examples),
                    band.sampled,
                    value_name,
                    positives,
                    sample,
                )
            )
        )
        if band.examples:
            key = K.per_item(K.UNIT_BANDS, band.number)
            rows = fu.example_rows(loaded.index, contexts, band.examples, ranked=False, enc=loaded.enc)
            st.html(reserve_css(key, len(rows)))  # style only: the rows' room before they draw
            token_rows(token_rows_payload(rows, value_name=value_name, cmax=peak), key=key)


def export_section(spec: ModelSpec, loaded: ui.Loaded, unit: ix.Unit, source: int | None) -> None:
    """The unit's page as Neuronpedia's feature-dashboard JSON and as one HTML file (built when clicked)."""
    left, right = st.columns(2)
    left.download_button(
        "This unit as JSON (Neuronpedia's dashboard shape)",
        file_name=f"{unit}.json",
        data=lambda: services.unit_json(spec, loaded, unit, source),
        mime="application/json",
        key=K.per_item(K.UNIT_EXPORT, "json"),
        on_click="ignore",
        icon=":material/download:",
        help="Its top and band examples with each token's value, histogram and top logits, in the "
        "fields of Neuronpedia's feature dashboards (`python -m gptviz index export` writes "
        "every unit).",
    )
    right.download_button(
        "This unit's page as HTML",
        file_name=f"{unit}.html",
        mime="text/html",
        data=lambda: services.unit_html(spec, loaded, unit, source),
        key=K.per_item(K.UNIT_EXPORT, "html"),
        on_click="ignore",
        icon=":material/download:",
        help="One file that opens offline in any browser: the same data as the JSON.",
    )


def histogram_section(loaded: ui.Loaded, unit: ix.Unit) -> None:
    index = loaded.index
    edges, counts = ix.histogram(index, unit)
    q = ix.quantiles(index, unit)
    i = index.flat(unit)
    if unit.kind == "neuron":
        line = f"active (> 0) on {index.arrays['active_share'][i]:.1%} of the {index.tokens:,} tokens"
    else:
        line = f"its output norm at each of the {index.tokens:,} tokens"
    log = S.UNIT_HIST_LOG.toggle(st)
    st.markdown(
        f"**Distribution**: {line}; dashed lines at the 1%, 50% and 99% quantiles "
        f"(mean {index.arrays['mean'][i]:.3g}, sd {index.arrays['std'][i]:.3g})."
    )
    display.show_figure(
        fu.unit_histogram(
            edges, counts, q, value_name="activation" if unit.kind == "neuron" else "output norm", log=log
        ),
        key=K.UNIT_HIST,
    )


def source_token(contexts: list[ix.Context]) -> int:
    """The token a head's top example attends to most (its OV circuit's default input)."""
    c = contexts[0] if contexts else None
    if c is None or c.attention is None or not np.isfinite(c.attention).any():
        return 0
    return int(c.ids[int(np.nanargmax(c.attention))])


def effect_section(model: GPT, unit: ix.Unit, contexts: list[ix.Context], enc=None) -> int | None:
    """-> for a head, the token its effect is read with (None for a neuron, or when the typed token is not one)."""
    source = None
    if unit.kind == "neuron":
        what = "Its output weights through the final norm and the unembedding"
    else:
        default = token_labels([source_token(contexts)], enc)[0].replace("␣", " ")
        key = K.per_item(K.UNIT_SOURCE, unit)  # each head its own default
        state.setdefault(key, default)
        typed = one_token_box(S.UNIT_SOURCE, key)
        if typed is None:
            return None
        ids = encode(typed, enc)
        if len(ids) != 1 or ids[0] >= model.config.vocab_size:
            st.warning(
                f"{display.md_text(repr(typed))} is {len(ids)} tokens, not one; type a single token "
                "(a piece of the model's vocabulary, with its leading space where it has one)."
            )
            return None
        source = ids[0]
        what = f"What attending to {display.md_text(repr(typed))} writes, through the final norm and the unembedding"
    try:
        effect = services.direct_effect(model, unit, source)
    except LimitError as err:  # the server's memory has no room now
        st.warning(str(err))
        return source
    spread = float(effect.effect.std())
    st.markdown(
        f"**Direct effect on the logits.** {what}: the tokens it raises and lowers most, per unit of "
        f"output (spread over the whole vocabulary: sd {spread:.3f})."
    )
    labels = lambda items: [(token_labels([t], enc)[0], v) for t, v in items]  # noqa: E731
    display.show_figure(fu.direct_effect_bars(labels(effect.promoted), labels(effect.suppressed)), key=K.UNIT_EFFECT)
    return source


def per_play_of(loaded: ui.Loaded) -> int:
    """How many tokens of each play the index scanned (its snippet scans the same)."""
    return max((len(d.ids) for d in loaded.docs), default=0)
