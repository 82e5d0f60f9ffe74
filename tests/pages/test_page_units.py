"""The unit page ("What does this unit do?") against the shipped index, its searches and bad input, a unit from a
link, an index built on request within the server's limits, and the links to it from the Activations and Attention
pages."""

from __future__ import annotations

import re
import urllib.parse

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from gptviz import index as ix
from gptviz.app import keys as K
from gptviz.app import links, model_service
from gptviz.app import unit_index as ui
from gptviz.model.tokenizer import encode
from gptviz.serve import limits
from tests.support.pagetest import APP, TINY, array, figures, run_page, token_rows

PRE = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
SEARCH_TAB = {K.UNIT_TAB: K.UNIT_TABS[1]}  # only the open tab is built
LINK = re.compile(r"\[(L\d+[NH]\d+)\]\((units\?[^)]*)\)")


@pytest.fixture(scope="module")
def shipped():
    return ix.bundled_index("shakespeare-pre")


def examples_on_screen(at: AppTest) -> dict:
    return token_rows(at, K.UNIT_EXAMPLES)


def peaks_on_screen(at: AppTest) -> list[float]:
    """The examples' value on each row's outlined (peak) token, top row first."""
    return [row["values"][row["peak"]] for row in examples_on_screen(at)["rows"]]


@pytest.mark.slow
def test_opens_on_a_default_unit_with_its_figures(shipped):
    at = run_page("units", spec=PRE)
    assert not at.exception and not at.error
    assert not at.dataframe  # the search tab, closed, is not built
    assert at.session_state[K.UNIT] == "L2N26"
    share = f"{shipped.arrays['active_share'][shipped.flat('L2N26')]:.1%}".replace(".", "\\.").replace("%", "\\%")
    assert at.markdown[0].value.startswith(f"**L2N26\\: active on {share} of tokens")  # the index's own count
    titles = [f["layout"] for f in figures(at)]
    assert len(titles) == 2  # histogram, direct effect (the examples are text: the token-rows component)
    # every listed activation on screen equals the index
    np.testing.assert_allclose(peaks_on_screen(at), shipped.arrays["top_values"][shipped.flat("L2N26")], rtol=1e-5)
    names = [row["name"] for row in examples_on_screen(at)["rows"]]
    for name, e in zip(names, ix.top_examples(shipped, "L2N26"), strict=True):
        assert name.startswith(f"#{e.rank + 1}  {e.value:.3f}  {e.doc_name}")
        assert name.endswith("(held out)") == shipped.documents[e.doc]["held_out"]
    hist = figures(at)[0]["data"][0]
    assert array(hist["y"]).sum() == shipped.tokens  # the counts add up to the tokens scanned


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["L2N26", "L1H2"])
def test_the_bands_show_the_indexs_examples_from_the_whole_range(shipped, unit):
    at = run_page("units", spec=PRE, unit=unit)
    assert not at.exception and not at.error
    i = shipped.flat(unit)
    captions = [c.value for c in at.caption if c.value.startswith("Band ")]
    assert len(captions) == ix.BANDS
    for band in ix.band_examples(shipped, unit):
        shown = token_rows(at, K.per_item(K.UNIT_BANDS, band.number))
        peaks = [row["values"][row["peak"]] for row in shown["rows"]]
        np.testing.assert_allclose(
            peaks, shipped.arrays["band_values"][i, band.number][: len(band.examples)], rtol=1e-4, atol=1e-6
        )  # each example's own token, recomputed, is its value
        assert [row["name"].split("  ")[1] for row in shown["rows"]] == [e.doc_name for e in band.examples]
        assert shown["cmax"] == pytest.approx(float(shipped.arrays["top_values"][i, 0]))  # the top examples' scale
        assert all(band.lo <= p <= band.hi * (1 + 1e-5) for p in peaks)
        assert f"{band.lo:.3g} to {band.hi:.3g}".replace(".", "\\.") in captions[band.number]
    # the exports are offered below the figures (clicked in tests/browser/test_browser_units.py)
    labels = [b.label for b in at.get("download_button")]
    assert "This unit as JSON (Neuronpedia's dashboard shape)" in labels and "This unit's page as HTML" in labels


@pytest.mark.slow
def test_a_head_from_state_shows_where_its_peak_looks(shipped):
    at = run_page("units", spec=PRE, unit="L1H2")
    assert not at.exception and not at.error
    assert at.markdown[0].value.startswith("**L1H2\\: output norm")
    np.testing.assert_allclose(peaks_on_screen(at), shipped.arrays["top_values"][shipped.flat("L1H2")], rtol=1e-5)
    # each example names where its peak looks, from a fresh one-at-a-time recomputation of its attention
    from gptviz import load_pretrained
    from gptviz.model.tokenizer import token_labels

    model, docs = load_pretrained("shakespeare-pre"), ix.index_documents(shipped)
    for row, e in zip(examples_on_screen(at)["rows"], ix.top_examples(shipped, "L1H2"), strict=True):
        ctx = ix.example_context(shipped, docs, e.doc, e.pos, model=model, unit="L1H2", before=20, after=6)
        j = int(np.nanargmax(ctx.attention))
        assert f"→ {token_labels([ctx.ids[j]])[0]} {ctx.peak - j} back ({ctx.attention[j]:.2f})" in row["name"]
    at.radio(key=K.UNIT_COLOUR).set_value("where the peak token looks").run()
    weights = [v for row in examples_on_screen(at)["rows"] for v in row["values"] if v is not None]
    assert 0 <= min(weights) and max(weights) <= 1 + 1e-6


def test_an_induction_heads_examples_show_that_it_copies(shipped):
    at = run_page("units", spec=PRE, unit="L1H0")  # the pre-norm twin's induction head
    names = [row["name"] for row in examples_on_screen(at)["rows"]]
    copies = [n for n in names if n.endswith("↻")]
    assert len(copies) >= len(names) // 2, names  # most of its top examples attend after an earlier copy


@pytest.mark.slow
def test_a_unit_in_the_url_opens_that_unit():
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["unit"] = "l0h0"
    at.query_params["source"] = "bundled"
    at.run()
    at.switch_page("app_pages/units.py").run()
    assert not at.exception and not at.error
    assert at.markdown[0].value.startswith("**L0H0\\:")


def test_bad_unit_ids_get_a_message():
    at = run_page("units", spec=PRE, unit="L9N0")
    assert "does not exist" in at.warning[0].value and "Showing L2N26 instead" in at.warning[0].value
    assert at.markdown[0].value.startswith("**L2N26")
    state: dict = {}
    notices = links.apply_link(state, {"unit": "neuron 5"})
    assert K.UNIT not in state and "must be a neuron or head id" in notices[0]
    links.apply_link(state, {"unit": "l3h1"})
    assert state[K.UNIT] == "L3H1"


@pytest.mark.slow
def test_picking_a_head_keeps_the_index_in_range():
    at = run_page("units", spec=PRE)
    at.radio(key=K.UNIT_KIND).set_value("head").run()
    assert at.session_state[K.UNIT] == "L2H3"  # neuron 26 clamped to the last of 4 heads
    assert at.markdown[0].value.startswith("**L2H3")


def test_search_by_prompt_token_equals_units_at(shipped):
    at = run_page("units", spec=PRE, **SEARCH_TAB)
    table = at.dataframe[0].value
    model = model_service.load_model(PRE)
    ids = encode(at.session_state[K.PROMPT])
    want = ix.units_at(model, ids, len(ids) - 1, index=shipped, k=8, kind="neuron") + ix.units_at(
        model, ids, len(ids) - 1, index=shipped, k=4, kind="head"
    )
    assert list(table["unit"]) == [str(s.unit) for s in want]
    np.testing.assert_allclose(table["value here"], [s.value for s in want], rtol=1e-5)
    assert all("⟦" in t for t in table["its top example in the corpus"])


@pytest.mark.parametrize(
    "word, message",
    [("", "Type a word"), ("Rosencrantzian", "is not one token"), (" Aaron", "occurs fewer than 20 times")],
)
def test_word_search_bad_input(word, message):
    at = run_page("units", spec=PRE, **SEARCH_TAB)
    at.text_input(key=K.UNIT_WORD).set_value(word).run()
    assert not at.exception
    shown = [m.value for m in at.info] + [m.value for m in at.warning]
    assert any(message in re.sub(r"\\(.)", r"\1", m) for m in shown), shown


def test_word_search_lists_the_index_units(shipped):
    at = run_page("units", spec=PRE, **SEARCH_TAB)
    at.text_input(key=K.UNIT_WORD).set_value("king").run()  # tried as ' king' too
    table = at.dataframe[1].value  # after the prompt search's
    want = ix.units_for_token(shipped, encode(" king")[0], k=10)
    assert list(table["unit"]) == [str(f.unit) for f in want]
    np.testing.assert_allclose(table["z"], [f.z for f in want], rtol=1e-5)


@pytest.mark.slow
def test_a_model_without_an_index_builds_one_within_limits(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    small = limits.ServerLimits(index_tokens=3_000, index_mb=2048)
    monkeypatch.setattr(limits, "server_limits", lambda: small)
    at = run_page("units", spec=TINY)
    assert "no neuron index yet" in at.info[0].value
    assert at.number_input(key=K.UNIT_BUILD_TOKENS).value == 3_000
    at.button(key=K.UNIT_BUILD).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.markdown[0].value.startswith("**L1N0")  # the middle layer's first neuron of the 2-layer preset
    built = list((tmp_path / "indexes").iterdir())
    assert len(built) == 1 and (built[0] / ix.INDEX_JSON).exists()
    assert ix.load_index(built[0]).tokens <= 3_000
    shown = " ".join(m.value for m in [*at.markdown, *at.info, *at.warning, *at.caption])
    assert str(tmp_path) not in shown
    with pytest.raises(limits.LimitError, match="at most 3,000 tokens"):
        ui.check_build(TINY, 3_001)
    tight = limits.ServerLimits(index_tokens=3_000, index_mb=1)
    monkeypatch.setattr(limits, "server_limits", lambda: tight)
    with pytest.raises(limits.LimitError, match="more than the 1 MiB"):
        ui.check_build(TINY, 3_000)


@pytest.mark.slow
def test_an_index_over_your_own_corpus_is_the_one_the_page_reads(tmp_path, monkeypatch):
    import json

    from gptviz.app.model_service import load_model

    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    corpus = tmp_path / "letters.jsonl"
    texts = [f"Dear friend, letter {i}: the weather is fine and the garden is green.\n" * 6 for i in range(12)]
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    docs = ix.tokenize_corpus(corpus, tmp_path / "ids")
    index = ix.build_index(
        load_model(TINY), docs, source=corpus.name, corpus={"path": str(corpus), "text_column": "text"}
    )
    ix.save_index(index, tmp_path / "indexes" / "letters")  # a name of the operator's own
    at = run_page("units", spec=TINY)
    assert not at.exception and not at.error, [e.value for e in at.error]
    unit = at.session_state[K.UNIT]
    rows = examples_on_screen(at)["rows"]
    best = ix.top_examples(index, unit)
    assert [r["name"].split("  ")[2] for r in rows] == [e.doc_name for e in best]  # "line3", ... from the corpus
    np.testing.assert_allclose(peaks_on_screen(at), [e.value for e in best], atol=1e-5)  # sent to 5 decimals
    shown = " ".join(m.value for m in [*at.markdown, *at.info, *at.warning, *at.caption])
    assert f"{index.tokens:,} tokens" in shown and str(tmp_path) not in shown
    corpus.write_text("changed")  # the corpus moved on: a clear message, never an exception box
    ix.save_index(index, tmp_path / "indexes" / "letters")  # a new mtime: read again
    at = run_page("units", spec=TINY)
    assert not at.exception and "could not be read" in " ".join(e.value for e in at.error)


def test_one_build_per_visitor_and_the_server_cap():
    guard = ui.BuildGuard(most=2)
    guard.start("s1", "1.2.3.4")
    with pytest.raises(limits.LimitError, match="already being built for you"):
        guard.start("s1", "5.6.7.8")
    with pytest.raises(limits.LimitError, match="already being built for you"):
        guard.start("s2", "1.2.3.4")  # another tab from the same address
    guard.start("s3", "9.9.9.9")
    with pytest.raises(limits.LimitError, match="builds 2 indexes at a time"):
        guard.start("s4", "8.8.8.8", wait_s=0)  # no wait for a turn: refused at once
    guard.end("s1", "1.2.3.4")
    guard.start("s4", "8.8.8.8")


def pills(at, name: str):
    """The unit pills of one list (its per_item name) as the ids they offer."""
    return next(g for g in at.button_group if g.key == K.per_item(K.UNIT_PILLS, name))


def picked(at, name: str, unit: str):
    """Pick `unit` among a list's pills: the unit page opens at the next run (the router's part)."""
    at = pills(at, name).set_value(unit).run()
    assert not at.exception, at.exception
    assert at.session_state[K.UNIT] == unit and at.session_state[K.UNIT_NAV_PENDING]
    assert at.session_state[K.UNIT_TAB] == K.UNIT_TABS[0]
    assert pills(at, name).value is None  # the pill does not stay picked for the next visit
    return at


@pytest.mark.slow
def test_activations_pills_are_the_listed_neurons_and_open_them():
    from tests.support.pagetest import figure

    at = run_page("activations", spec=PRE)
    bars = figure(at, "Most active neurons")["data"][0]["y"]
    assert pills(at, "act_neurons").options == [b.replace(" ", "") for b in bars]
    picked(at, "act_neurons", bars[1].replace(" ", ""))


@pytest.mark.slow
def test_activations_head_pills_are_each_detectors_best_heads():
    at = run_page("activations", spec=PRE)  # every tab runs
    lines = [m.value for m in at.markdown if m.value.startswith("**Previous-token**")]
    named = list(dict.fromkeys(re.findall(r"L\d+H\d+", lines[0])))
    assert named and pills(at, K.ACT_HEADS).options == named
    picked(at, K.ACT_HEADS, named[0])


def test_attention_pills_are_the_detector_tables_first_heads():
    at = run_page("attention", spec=PRE)
    table = at.dataframe[0].value
    heads = ["L{}H{}".format(*re.fullmatch(r"layer (\d+), head (\d+)", h).groups()) for h in table["head"][:6]]
    assert pills(at, K.ATT_DETECTORS).options == heads
    picked(at, K.ATT_DETECTORS, heads[0])


@pytest.mark.slow
def test_ablated_heads_on_the_why_page_open_their_unit_pages():
    at = run_page("why", spec=PRE, **{K.WHY_VIEW: "Ablate heads", K.WHY_ABLATED: [(1, 2), (0, 0)]})
    assert not at.exception, at.exception
    assert pills(at, "why_ablated").options == ["L0H0", "L1H2"]
    picked(at, "why_ablated", "L1H2")


def test_a_picked_row_names_its_unit():
    from gptviz.app.unit_nav import unit_of_selection

    units = ["L0N1", "L1H2", "L3N7"]
    assert unit_of_selection({"rows": [1]}, units) == "L1H2"
    assert unit_of_selection({"rows": []}, units) is None  # a row unpicked
    assert unit_of_selection({"rows": [5]}, units) is None  # a stale pick past a shorter table


def test_search_tables_are_picked_by_row(shipped):
    from streamlit.proto.Dataframe_pb2 import Dataframe

    at = run_page("units", spec=PRE, **SEARCH_TAB)
    at.text_input(key=K.UNIT_WORD).set_value("king").run()
    tables = [d for d in at.dataframe if "its top example in the corpus" in d.value.columns]
    assert len(tables) == 2
    assert all(list(d.proto.selection_mode) == [Dataframe.SelectionMode.SINGLE_ROW] for d in tables)


def test_a_link_to_the_other_twin_names_its_wiring():
    state = {K.MODEL_SPEC: PRE, K.MODEL_SOURCE: K.SOURCE_BUNDLED, K.NORM: "pre", K.PROMPT: "Hi"}
    url = links.unit_url(state, "L2H1", norm="post")
    query = urllib.parse.parse_qs(url.split("?", 1)[1])
    assert query["unit"] == ["L2H1"] and query["norm"] == ["post"] and query["source"] == ["bundled"]


@pytest.mark.slow
def test_a_picked_neuron_opens_its_page_in_this_session():
    """Through app.py, as a visitor clicks: the router follows the pick to the unit page with the same model."""
    from tests.support.pagetest import open_app

    at = open_app(**{K.MODEL_SOURCE: K.SOURCE_BUNDLED})
    at.switch_page("app_pages/activations.py")
    at = at.run()
    group = pills(at, "act_neurons")
    unit = group.options[3]
    at = group.set_value(unit).run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["What does this unit do?"]
    assert at.session_state[K.UNIT] == unit and K.UNIT_NAV_PENDING not in at.session_state  # followed once
    assert at.markdown[0].value.startswith(f"**{unit}")
