"""Pre-norm vs post-norm: one set of random weights run both ways, measured layer by layer against the
theory; then the bundled twins trained each way. The first tab is drawn here; the others are draw-only views
(gptviz/app/views/norms_*.py), and every number comes from gptviz.app.services.norms."""

from __future__ import annotations

import streamlit as st

from gptviz.app import display, reproduce
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.links import sync_address
from gptviz.app.services import norms as services
from gptviz.app.services.norms_pair import Pair
from gptviz.app.sidebar import keep_valid
from gptviz.app.views.norms_paper import paper_section
from gptviz.app.views.norms_same import same_weights_section
from gptviz.app.views.norms_twins import (
    LoadedTwins,
    confounds_note,
    load_twins,
    pick_twins,
    short_name,
    trained_twins_section,
)
from gptviz.figures import explainers as explainer_figs
from gptviz.figures import norms_attention as fig_norms_attention
from gptviz.figures import training as fig_train
from gptviz.model import unit_id, weights

TABS = ("Trained twins side by side", "Same weights, two wirings", "The paper's setting", "The twins in depth")

state = st.session_state

INTRO = (
    "Where the LayerNorm sits decides how signals and gradients move through the stack. Pre-norm "
    "(GPT-2) normalises the input of each sub-layer and leaves the residual stream alone: "
    "x + f(LN(x)). Post-norm (GPT-1, the original Transformer) normalises after each residual "
    "addition: LN(x + f(x)).\n\n"
    "**Trained twins side by side** runs the sidebar's prompt through the two bundled models the sidebar's "
    "LayerNorm toggle switches between: trained separately, they grew their heads in different places, so heads "
    "are paired by what they do (attention-pattern similarity), not by index. **Same weights, two wirings** runs "
    "one set of random weights both ways, so every difference there comes from the wiring alone. **The paper's "
    "setting** checks Xiong et al.'s (2020) claims at their own initialisation. **The twins in depth**: every "
    "head's match with its scores, the training history, generation. Where Hugging Face's GPT-2 small and GPT-1 are "
    "both on this server, the first and last tabs offer them as a pair too: trained, of the same size, one of "
    "each wiring, with everything else that differs between them said beside them."
)
TOP_LINE = (
    "The sidebar's LayerNorm toggle switches between two separately trained models: here both read your "
    "prompt, heads matched by role."
)


# ---- the first tab: the trained twins side by side ----------------------------------------------------------------


def quoted(label: str) -> str:
    return f"“{display.md_text(label)}”"


def comparison_sentence(match, typical: float, top: dict[str, list[tuple[str, float]]], twins: str = "twins") -> str:
    """The one sentence of the first screen, every word of it read off the numbers beside it (`twins`: what the
    pair is called; two tokenizers' guesses are the same word when they read alike, "the␣" and "␣the")."""
    (pre_tok, pre_p), (post_tok, post_p) = top["pre"][0], top["post"][0]
    same = pre_tok == post_tok or (twins != "twins" and same_word(pre_tok, post_tok))
    guess = (
        f"Both {twins} guess {quoted(pre_tok)} next"
        if same
        else f"The {twins} guess differently next (pre-norm {quoted(pre_tok)}, post-norm {quoted(post_tok)})"
    )
    surer = "pre" if pre_p >= post_p else "post"
    alike = (
        "far more alike than"
        if match.similarity >= 2 * typical
        else "more alike than"
        if match.similarity > typical
        else "no more alike than"
    )
    return (
        f"{guess}; the {surer}-norm {twins.removesuffix('s')} is surer ({max(pre_p, post_p):.0%} against "
        f"{min(pre_p, post_p):.0%}), "
        f"and the matched heads below attend {alike} a blind pair (similarity {match.similarity:.2f} against "
        f"{typical:.2f})."
    )


def same_word(a: str, b: str) -> bool:
    """Two tokenizers' labels for the same word (GPT-2 keeps case and a leading space, GPT-1 lower-cases it and
    marks a word's end)."""
    return a.replace("␣", "").strip().lower() == b.replace("␣", "").strip().lower() != ""


def pick_pair_index(matches: list) -> int:
    """The matched pair shown, as an index into `matches` (kept in state); at first the most similar pair. Read
    before the picker is drawn, as the sentence above it names the pair."""
    most_similar = max(range(len(matches)), key=lambda i: matches[i].similarity)
    keep_valid(K.TWINS_PAIR, range(len(matches)), most_similar)  # a link's pair past these twins' says so
    state.setdefault(K.TWINS_PAIR, most_similar)
    return state[K.TWINS_PAIR]


def pick_pair(matches: list) -> int:
    """The picker of the matched pair (its value: pick_pair_index)."""
    return S.TWINS_PAIR.selectbox(
        st,
        options=range(len(matches)),
        format_func=lambda i: (
            f"pre {unit_id.head_id(*matches[i].a)} ↔ post {unit_id.head_id(*matches[i].b)}"
            f" (similarity {matches[i].similarity:.2f})"
        ),
    )


def side_by_side_section(bundled: dict, pair: Pair) -> LoadedTwins | None:
    """The first screen: the sidebar's prompt through both twins, a matched pair of heads side by side, each twin's
    next-token probabilities and the two wirings. The pair and its picker are a fragment (matched_pair): a pick
    reruns them alone, where it reran the whole page, all four tabs (issue 60: 1.4-1.8 s to the page final); the
    next-token bars and the wirings beside them are the full run's. Returns the loaded twins for the later tab."""
    names = pair.names
    if not pair.bundled:
        st.caption(
            f"{names['pre']} and {names['post']} from Hugging Face, both on this server: two trained models of "
            "the same size, one of each wiring, each reading the prompt through its own tokenizer."
        )
    # the sentence and the pair it speaks of first, in one column: a phone stacks the columns, so the pair is on its
    # first screen; the caveat and the pair's picker under the maps, the bars and the wirings beside them
    left, right = st.columns([2.1, 1])
    snippet = st.container()
    with left:
        shown = st.fragment(matched_pair)(bundled, pair, snippet)
    if shown is None:
        return None
    tw, top = shown
    with right:
        next_tokens_and_wirings(pair, tw, top)
    return tw


def twins_on_the_prompt(pair: Pair) -> tuple[LoadedTwins, dict, list, float, dict] | None:
    """Both twins on the sidebar's prompt (all from the caches after the first run): the loaded twins, their captures,
    the matched heads, a blind pair's typical similarity and each twin's top next tokens; None after a message."""
    tw = load_twins(pair)
    if tw is None:
        return None
    try:
        caps = services.twins_captures(tw.specs, tw.ids, tw.cfg.n_layers)
        matches, _, typical = services.head_matches(tw.specs, tw.cfg)
    except (ValueError, RuntimeError) as err:
        st.error(f"Could not run the twins on this prompt: {err}")
        return None
    top = {norm: services.top_tokens(caps[norm][0], labels=pair.codecs[norm].labels)[1] for norm in tw.specs}
    return tw, caps, matches, typical, top


def matched_pair(bundled: dict, pair: Pair, snippet) -> tuple[LoadedTwins, dict] | None:
    """The fragment of the first tab, in the left column: what loading the twins says (a prompt past their context...),
    the sentence, the picked pair's two maps, the caveat and the picker; then the snippet in its box under both
    columns. Returns the loaded twins and their top tokens to the full run (None when they could not run)."""
    got = twins_on_the_prompt(pair)
    if got is None:
        return None
    tw, caps, matches, typical, top = got
    index = pick_pair_index(matches)
    match = matches[index]
    st.markdown(comparison_sentence(match, typical, top, "twins" if pair.bundled else "models"))
    with st.container(horizontal=True, wrap=False, key=K.TWINS_SIDE_PAIR):  # a pair on a phone too
        for i, fig in enumerate(pair_maps(pair, tw, caps, match)):
            with st.container():
                display.show_figure(fig, key=K.per_item(K.TWINS_SIDE_MAPS, i))
    caveat = services.twins_caveat(bundled, pair.names) if pair.bundled else None
    if caveat:
        st.caption(
            f":material/warning: {caveat}",
            help="Retraining them alike is planned; each model card (gptviz/bundled/) has its full recipe.",
        )
    elif not pair.bundled:
        confounds_note(pair)
    pick_pair(matches)
    if pair.bundled:  # the snippet loads the bundled twins by name
        with snippet:
            reproduce.show(
                reproduce.twins(
                    pair.names, tw.ids["pre"], index, services.probe_length(tw.cfg), reproduce.prompt_text()
                )
            )
    sync_address()  # a pick reruns only this fragment, not the router that writes the address
    return tw, top


def pair_maps(pair: Pair, tw: LoadedTwins, caps: dict, match) -> list:
    """The matched heads' attention maps, one figure each, side by side (no difference map: the heads are two
    models' and need not attend alike)."""
    pats = {
        "pre": caps["pre"][1].pattern(match.a[0])[match.a[1]].numpy(),
        "post": caps["post"][1].pattern(match.b[0])[match.b[1]].numpy(),
    }
    figures = fig_norms_attention.attention_panels(
        pats["pre"],
        pats["post"],
        tw.labels["pre"],
        "",
        (
            f"{panel_name(pair, 'pre')} {unit_id.head_id(*match.a)}<br>the picked head",  # two short lines: a phone's
            f"{panel_name(pair, 'post')} {unit_id.head_id(*match.b)}<br>similarity {match.similarity:.2f}",
            "",
        ),  # half
        height=320,
        post_labels=None if pair.same_tokens else tw.labels["post"],
        with_difference=False,  # built, then dropped, in every run
    )
    figures[0].update_traces(showscale=False)  # one colour bar for the pair: both maps share the 0..1 scale
    figures[1].update_traces(colorbar_title_text="")  # its title ran past a phone's half width; hover names it
    return figures


def next_tokens_and_wirings(pair: Pair, tw: LoadedTwins, top: dict) -> None:
    """Beside the pair: both twins' next-token bars with their chance level, then the two wirings' diagrams."""
    dists = {short_name(pair, norm): top[norm] for norm in tw.specs}
    bars_fig = fig_train.next_token_bars(dists, f"“{tw.labels['pre'][-1]}”")
    bars_fig.update_traces(textposition="auto")  # the longest bar's label inside it, not over the next panel
    bars_fig.update_xaxes(nticks=4)  # a third of the width: five ticks turned on end, three or four read level
    display.show_figure(bars_fig, key=K.TWINS_SIDE_NEXT)
    vocab = tw.vocab["pre"]
    st.caption(
        f"Top {services.SIDE_TOP_K} of {vocab:,} tokens; a uniform guess gives each {1 / vocab:.3%}."
        if len(set(tw.vocab.values())) == 1
        else f"Top {services.SIDE_TOP_K} of each model's own tokens ({tw.vocab['pre']:,} and "
        f"{tw.vocab['post']:,}); a uniform guess gives each {1 / tw.vocab['pre']:.3%} and "
        f"{1 / tw.vocab['post']:.3%}."
    )
    with st.container(horizontal=True, wrap=False, key=K.TWINS_SIDE_WIRINGS):
        for norm in ("pre", "post"):
            with st.container():
                display.show_figure(
                    explainer_figs.block_diagram(norm, compact=True), key=K.per_item(K.TWINS_SIDE_WIRING, norm)
                )


def panel_name(pair: Pair, norm: str) -> str:
    """A map's title start: the wiring, or for the Hub pair the model (short: two fit a phone's width)."""
    return f"{norm}-norm" if pair.bundled else {"pre": "GPT-2", "post": "GPT-1"}[norm]


# Style only (no user or model text): on a phone a one-line title, so the twins' pair fits the first screen.
PAGE_CSS = f"<style>{display.PHONE_TITLE_CSS}</style>"


def main() -> None:
    st.html(PAGE_CSS)
    st.title("Pre-norm vs post-norm")
    st.caption(TOP_LINE, help=INTRO)
    tab_side, tab_same, tab_paper, tab_depth = st.tabs(list(TABS))
    bundled = weights.bundled_models()
    with tab_side:  # what toggling the wiring changes comes first: the twins on the prompt, heads matched by role
        twins = pick_twins(bundled)
        tw = side_by_side_section(bundled, twins) if twins is not None else None
    with tab_same:
        same_weights_section()
    with tab_paper:
        paper_section()
    with tab_depth:
        if twins is not None:
            trained_twins_section(bundled, twins, tw)
        else:
            st.info("The bundled twins are not here yet; see the first tab.")


main()
