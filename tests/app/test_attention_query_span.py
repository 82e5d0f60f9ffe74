"""Several query tokens at once on the Attention page's chips (issue 62, item 9), its Python halves: the chips' span
makes the map outline its rows and the One head bars their sum, equal to the sum of the captured pattern's rows; the
chance level the caption gives is uniform attention's sum; a single click still picks one token; a link carries the
span as first-last and old one-token links still work. The browser half (the drag itself) is in
test_browser_attention_gestures.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.app.keys import LINKED_KEYS
from gptviz.app.links import apply_link, link_params
from gptviz.figures.browser import chip_span
from gptviz.figures.browser import token_span as tspan
from gptviz.model.hooks import capture
from gptviz.model.tokenizer import encode, token_labels
from tests.support.pagetest import TINY, array, attention_map, component_data, figure, query_bars, run_page

PROMPT = "The cat sat on the mat. The cat sat on the"
LAYER, HEAD = 1, 2


def captured_pattern() -> np.ndarray:
    """The tiny preset's pattern of LAYER, HEAD on PROMPT, captured here with the library's hooks (not the page's
    cache). [T, T]."""
    model = model_service.load_model(TINY)
    _, cache = capture(model, torch.tensor([encode(PROMPT)]), [f"blocks.{LAYER}.attn.hook_pattern"])
    return cache[f"blocks.{LAYER}.attn.hook_pattern"][0, HEAD].numpy()


# ---- the pure part -------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, end", [(0, 1), (0, 5), (3, 8), (7, 12)])
def test_the_chance_level_of_a_span_is_uniform_attentions_rows_summed(start, end):
    T = 12
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # query i: 1/(i+1) on keys 0..i
    assert np.allclose(tspan.uniform_span_sums(start, end), uniform[start:end].sum(0)[:end])
    assert tspan.uniform_span_sums(start, end).sum() == pytest.approx(end - start)


def test_the_gesture_payload_and_the_chips_outline():
    assert chip_span.payload(12, start=3, end=8, chips_key="att_query")["start"] == 3
    with pytest.raises(ValueError, match="a span is"):
        chip_span.payload(12, start=8, end=3, chips_key="att_query")
    css = chip_span.span_css("att_query", "att_chip_span", 3, 8)
    assert ".st-key-att_query" in css and ":nth-child(n+4):nth-child(-n+8)" in css  # chips 3..7, counted from 1
    assert ".st-key-att_chip_span {display: none;}" in css  # the gesture draws nothing: no empty row either
    assert "outline" not in chip_span.span_css("att_query", "att_chip_span", 7, 8)  # one token: the pills show it
    assert chip_span.picked_span({"start": 3, "end": 8, "at": 1}, 12) == (3, 8)
    for bad in ([3, 8], {"start": 3}, {"start": 3, "end": 13}, {"start": True, "end": 4}, None):
        assert chip_span.picked_span(bad, 12) is None


def test_a_link_carries_a_span_as_first_last_and_one_token_as_before():
    state = {}
    assert apply_link(state, {"att_query": "3-7"}) == []
    assert state[K.ATT_QUERY] == 7 and state[K.ATT_QUERY_SPAN] == (3, 8)
    assert link_params(state)["att_query"] == "3-7"
    old = {}
    assert apply_link(old, {"att_query": "7"}) == [] and old == {
        K.ATT_QUERY: 7,
        LINKED_KEYS: {"att_query": "att_query"},
    }
    assert link_params(old)["att_query"] == "7"
    # a span that no longer ends at the query (another token picked since) is not written
    assert link_params({K.ATT_QUERY: 5, K.ATT_QUERY_SPAN: (3, 8)})["att_query"] == "5"
    for bad in ("7-3", "3-", "-3", "3-x", "1-2-3"):
        state = {}
        notices = apply_link(state, {"att_query": bad})
        assert len(notices) == 1 and "att_query" in notices[0] and K.ATT_QUERY not in state, bad


# ---- the page ----------------------------------------------------------------------------------------


def span_page(**state):
    at = run_page("attention", PROMPT, att_layer=LAYER, att_head=HEAD, **state)
    assert not at.exception, [e.message for e in at.exception]
    return at


@pytest.mark.slow
def test_a_span_on_the_chips_sums_its_rows_in_the_bars_and_outlines_them_on_the_map():
    at = span_page(**{K.ATT_QUERY: 7, K.ATT_QUERY_SPAN: (3, 8)})
    pattern, labels = captured_pattern(), token_labels(encode(PROMPT))
    bars = query_bars(at)
    rows = pattern[3] + pattern[4] + pattern[5] + pattern[6] + pattern[7]  # one row per query of the span
    assert (bars["span_start"], bars["query"], bars["value_name"]) == (3, 7, "summed weight")
    assert np.allclose(bars["weights"], rows[:8], atol=1e-5) and sum(bars["weights"]) == pytest.approx(5, abs=1e-4)
    assert bars["title"] == f"Where tokens 3-7 ('{labels[3]}' … '{labels[7]}') look, summed"
    data, _ = attention_map(at)
    assert (data["query_start"], data["query"]) == (3, 7)
    caption = next(c.value.replace("\\", "") for c in at.caption if c.value.replace("\\", "").startswith("Summed"))
    chance = [sum(1 / (i + 1) for i in range(3, 8) if i >= j) for j in range(8)]  # uniform rows 3..7 summed
    assert "Summed over tokens 3-7" in caption and "the 5 rows' bars add up to 5" in caption
    assert f"{chance[0]:.3f} on keys 0-3 down to {chance[7]:.3f} on key 7" in caption
    assert component_data(at, chip_span.NAME, K.ATT_CHIP_SPAN) == {
        "T": len(labels),
        "start": 3,
        "end": 8,
        "chips": K.ATT_QUERY,
        "highlight": chip_span.HIGHLIGHT,
    }
    assert any(":nth-child(n+4):nth-child(-n+8)" in h.proto.body for h in at.get("html"))
    # the text view's span, unset, opens on the chips' span
    at.session_state[K.ATT_VIEW] = "On the text"
    at.session_state[K.ATT_TEXT_MODE] = "attention from a span"
    at.run()
    text = component_data(at, tspan.NAME, K.ATT_SPAN_VIEW)
    assert (text["start"], text["end"]) == (3, 8)


@pytest.mark.slow
def test_to_the_span_sums_its_columns_per_query_beside_uniform_attention():
    at = span_page(**{K.ATT_QUERY: 7, K.ATT_QUERY_SPAN: (3, 8), K.ATT_SPAN_DIRECTION: "to the span"})
    pattern, labels = captured_pattern(), token_labels(encode(PROMPT))
    T = len(labels)
    cols = pattern[:, 3] + pattern[:, 4] + pattern[:, 5] + pattern[:, 6] + pattern[:, 7]  # one column per key
    fig = figure(at, "How much each token looks at tokens 3-7")
    (bars,) = fig["data"]
    assert list(array(bars["x"])) == list(range(3, T))  # earlier queries cannot see the span
    assert np.allclose(array(bars["y"]), cols[3:], atol=1e-6) and (array(bars["y"]) <= 1 + 1e-6).all()
    drawn = [el.proto.component_name for el in at.get("bidi_component")]
    assert "gptviz_query_bars" not in drawn  # the "from" bars are not drawn
    # the table: the five queries looking at it most, each beside uniform attention's (q in span: (q-2)/(q+1))
    table = at.table[0].value
    order = sorted(range(3, T), key=lambda q: (-cols[q], q))[:5]
    assert list(table["position"]) == order
    assert np.allclose(table["on the span"], cols[order], atol=1e-6)
    uniform = [(min(q, 7) - 3 + 1) / (q + 1) for q in order]
    assert np.allclose(table["chance"], uniform)
    caption = next(
        c.value.replace("\\", "")
        for c in at.caption
        if "Chance (uniform attention, query q" in c.value.replace("\\", "")
    )
    assert f"{1 / 4:.3f} at token 3 down to {5 / T:.3f} at token {T - 1}" in caption


@pytest.mark.slow
def test_a_single_click_still_picks_one_token():
    at = span_page(**{K.ATT_QUERY: 7, K.ATT_QUERY_SPAN: (3, 8)})
    at.button_group(key=K.ATT_QUERY).set_value(5).run()  # another chip: that token alone
    bars = query_bars(at)
    assert (bars["span_start"], bars["query"]) == (5, 5) and K.ATT_QUERY_SPAN not in at.session_state
    assert np.allclose(bars["weights"], captured_pattern()[5, :6], atol=1e-5)
    assert not any(c.value.replace("\\", "").startswith("Summed") for c in at.caption)
    # a click on the span's last chip (the pills' value, which the click clears) picks that token, not the last
    at = span_page(**{K.ATT_QUERY: 7, K.ATT_QUERY_SPAN: (3, 8)})
    at.button_group(key=K.ATT_QUERY).set_value(None).run()
    assert at.button_group(key=K.ATT_QUERY).value == 7
    assert (query_bars(at)["span_start"], query_bars(at)["query"]) == (7, 7)
    # a span left by an earlier pick (its end is not the query's) is not shown
    at = span_page(**{K.ATT_QUERY: 2, K.ATT_QUERY_SPAN: (3, 8)})
    assert (query_bars(at)["span_start"], query_bars(at)["query"]) == (2, 2)
