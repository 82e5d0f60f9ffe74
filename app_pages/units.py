"""What does this unit do? One MLP neuron or attention head over a corpus: where it fires most (its top examples,
coloured token by token), the distribution of its values, the tokens its output promotes and suppresses; and the
other way round, the units most active on a token of the prompt or on a word across the corpus.

Everything corpus-wide comes from the model's neuron index (gptviz.index): shipped with the bundled models, built
here on request for others (gptviz.app.unit_index). The unit is in the URL (?unit=L2N26, ?unit=L1H2).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from gptviz import index as ix
from gptviz.app import display, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app import unit_index as ui
from gptviz.app.components import token_rows
from gptviz.app.model_service import ModelSpec
from gptviz.app.services import LimitError
from gptviz.app.services import unit_page as services
from gptviz.app.unit_nav import open_on_row_pick
from gptviz.figures import unit_page as fu
from gptviz.figures.browser.token_rows import payload as token_rows_payload
from gptviz.figures.browser.token_rows import reserve_css
from gptviz.model.model import GPT
from gptviz.model.tokenizer import decode, encode, position_labels, token_labels

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


# ---------------------------------------------------------------------------------------------------- one token


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


# ---------------------------------------------------------------------------------------------------- one unit


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


# ---------------------------------------------------------------------------------------------------- search


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
