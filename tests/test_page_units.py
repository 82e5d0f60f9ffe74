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
from gptviz import limits
from gptviz.app import keys as K
from gptviz.app import links, models
from gptviz.app import unit_index as ui
from gptviz.figures.attention import HIGHLIGHT
from gptviz.tokenizer import encode
from pagetest import APP, TINY, array, figures, run_page

PRE = models.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
LINK = re.compile(r"\[(L\d+[NH]\d+)\]\((units\?[^)]*)\)")


@pytest.fixture(scope="module")
def shipped():
    return ix.bundled_index("shakespeare-pre")


def peaks_on_screen(at: AppTest) -> list[float]:
    """The examples figure's value on each row's outlined (peak) token, top row first."""
    trace = figures(at)[0]["data"][0]
    outline, rows = trace["marker"]["line"]["color"], array(trace["y"])
    peaks = [i for i, c in enumerate(outline) if c == HIGHLIGHT]
    assert [int(rows[i]) for i in peaks] == list(range(int(rows.max()) + 1))  # one per row, in order
    assert all(trace["customdata"][i][3] for i in peaks)
    return [float(trace["customdata"][i][1]) for i in peaks]


def test_opens_on_a_default_unit_with_its_figures(shipped):
    at = run_page("units", spec=PRE)
    assert not at.exception and not at.error
    assert at.session_state[K.UNIT] == "L2N26"
    assert at.markdown[0].value.startswith("**L2N26\\: active on 13\\.4\\% of tokens")
    titles = [f["layout"] for f in figures(at)]
    assert len(titles) == 3  # examples, histogram, direct effect
    # every listed activation on screen equals the index
    np.testing.assert_allclose(peaks_on_screen(at), shipped.arrays["top_values"][shipped.flat("L2N26")], rtol=1e-5)
    names = figures(at)[0]["layout"]["yaxis"]["ticktext"]
    for name, e in zip(names, ix.top_examples(shipped, "L2N26")):
        assert name.startswith(f"#{e.rank + 1}  {e.value:.3f}  {e.doc_name}")
        assert name.endswith("(held out)") == shipped.documents[e.doc]["held_out"]
    hist = figures(at)[1]["data"][0]
    assert array(hist["y"]).sum() == shipped.tokens  # the counts add up to the tokens scanned


def test_a_head_from_state_shows_where_its_peak_looks(shipped):
    at = run_page("units", spec=PRE, unit="L1H2")
    assert not at.exception and not at.error
    assert at.markdown[0].value.startswith("**L1H2\\: output norm")
    np.testing.assert_allclose(peaks_on_screen(at), shipped.arrays["top_values"][shipped.flat("L1H2")], rtol=1e-5)
    at.radio(key=K.UNIT_COLOUR).set_value("where the peak token looks").run()
    weights = [float(row[1]) for row in figures(at)[0]["data"][0]["customdata"]]
    assert 0 <= min(weights) and max(weights) <= 1 + 1e-6


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


def test_picking_a_head_keeps_the_index_in_range():
    at = run_page("units", spec=PRE)
    at.radio(key=K.UNIT_KIND).set_value("head").run()
    assert at.session_state[K.UNIT] == "L2H3"  # neuron 26 clamped to the last of 4 heads
    assert at.markdown[0].value.startswith("**L2H3")


def test_search_by_prompt_token_equals_units_at(shipped):
    at = run_page("units", spec=PRE)
    table = at.dataframe[0].value
    model = models.load_model(PRE)
    ids = encode(at.session_state[K.PROMPT])
    want = ix.units_at(model, ids, len(ids) - 1, index=shipped, k=8, kind="neuron") + \
        ix.units_at(model, ids, len(ids) - 1, index=shipped, k=4, kind="head")
    assert [re.search(r"unit=(\w+)", u).group(1) for u in table["unit"]] == [str(s.unit) for s in want]
    np.testing.assert_allclose(table["value here"], [s.value for s in want], rtol=1e-5)
    assert all("⟦" in t for t in table["its top example in the corpus"])


@pytest.mark.parametrize("word, message", [("", "Type a word"), ("Rosencrantzian", "is not one token"),
                                           (" Aaron", "occurs fewer than 20 times")])
def test_word_search_bad_input(word, message):
    at = run_page("units", spec=PRE)
    at.text_input(key=K.UNIT_WORD).set_value(word).run()
    assert not at.exception
    shown = [m.value for m in at.info] + [m.value for m in at.warning]
    assert any(message in re.sub(r"\\(.)", r"\1", m) for m in shown), shown


def test_word_search_lists_the_index_units(shipped):
    at = run_page("units", spec=PRE)
    at.text_input(key=K.UNIT_WORD).set_value("king").run()  # tried as ' king' too
    table = at.dataframe[1].value
    want = ix.units_for_token(shipped, encode(" king")[0], k=10)
    assert [re.search(r"unit=(\w+)", u).group(1) for u in table["unit"]] == [str(f.unit) for f in want]
    np.testing.assert_allclose(table["z"], [f.z for f in want], rtol=1e-5)


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


def test_one_build_per_visitor_and_the_server_cap():
    guard = ui.BuildGuard(most=2)
    guard.start("s1", "1.2.3.4")
    with pytest.raises(limits.LimitError, match="already being built for you"):
        guard.start("s1", "5.6.7.8")
    with pytest.raises(limits.LimitError, match="already being built for you"):
        guard.start("s2", "1.2.3.4")  # another tab from the same address
    guard.start("s3", "9.9.9.9")
    with pytest.raises(limits.LimitError, match="builds 2 indexes at a time"):
        guard.start("s4", "8.8.8.8")
    guard.end("s1", "1.2.3.4")
    guard.start("s4", "8.8.8.8")


def test_activations_links_point_at_the_listed_neurons():
    from pagetest import figure
    at = run_page("activations", spec=PRE)
    bars = figure(at, "Most active neurons")["data"][0]["y"]
    line = next(m.value for m in at.markdown if m.value.startswith("What each does"))
    found = LINK.findall(line)
    assert [name for name, _ in found] == [b.replace(" ", "") for b in bars]
    for name, url in found:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        assert query["unit"] == [name] and query["prompt"] == [at.session_state[K.PROMPT]]
    heads = [m.value for m in at.markdown if m.value.startswith("**Previous-token**")]
    assert heads and all(name[2] == "H" or "H" in name for name, _ in LINK.findall(heads[0]))


def test_attention_detector_table_links_each_head():
    at = run_page("attention", spec=PRE)
    table = at.dataframe[0].value
    for head, url in zip(table["head"], table["what it does"]):
        layer, h = re.fullmatch(r"layer (\d+), head (\d+)", head).groups()
        assert url.startswith("units?") and url.endswith(f"unit=L{layer}H{h}")


def test_ablated_heads_on_the_why_page_link_to_their_unit_pages():
    at = run_page("why", spec=PRE, **{K.WHY_VIEW: "Ablate heads", K.WHY_ABLATED: [(1, 2), (0, 0)]})
    assert not at.exception, at.exception
    linked = [LINK.findall(c.value) for c in at.caption if "What each does over the corpus" in c.value]
    assert len(linked) == 1 and [unit for unit, _ in linked[0]] == ["L0H0", "L1H2"]
    assert all(url.startswith("units?") for _, url in linked[0])


def test_a_link_to_the_other_twin_names_its_wiring():
    state = {K.MODEL_SPEC: PRE, K.MODEL_SOURCE: K.SOURCE_BUNDLED, K.NORM: "pre", K.PROMPT: "Hi"}
    url = links.unit_url(state, "L2H1", norm="post")
    query = urllib.parse.parse_qs(url.split("?", 1)[1])
    assert query["unit"] == ["L2H1"] and query["norm"] == ["post"] and query["source"] == ["bundled"]
