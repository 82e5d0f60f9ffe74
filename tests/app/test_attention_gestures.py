"""The Attention page's gestures (issues 58 and 62), their Python halves: a span's summed attention equals the sum of
the captured pattern's rows (from) or columns (to); the text view draws those sums for the span in session state; a
map cell's "why" click is accepted only for a single head and a key the query can see. The browser halves are in
test_browser_attention_gestures.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gptviz.app import display, model_service
from gptviz.app import keys as K
from gptviz.figures.browser import token_span as tspan
from gptviz.figures.browser.attention_map import cell_asked
from gptviz.model.hooks import capture
from gptviz.model.tokenizer import encode
from tests.support.pagetest import TINY, component_data, run_page


@pytest.fixture(scope="module")
def pattern(request):
    from tests.support.models import build

    model = build(seed=3)
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    _, cache = capture(model, ids, ["blocks.1.attn.hook_pattern"])
    return cache["blocks.1.attn.hook_pattern"][0, 2].numpy()  # [T, T], head 2


@pytest.mark.parametrize("start, end", [(0, 1), (3, 7), (5, 12), (0, 12)])
def test_span_sums_are_the_sums_of_the_patterns_rows_or_columns(pattern, start, end):
    rows = sum(pattern[q] for q in range(start, end))  # attention from the span: one row per query
    cols = sum(pattern[:, k] for k in range(start, end))  # attention to the span: one column per key
    assert np.allclose(tspan.span_sums(pattern, start, end, "from"), rows, atol=1e-6)
    assert np.allclose(tspan.span_sums(pattern, start, end, "to"), cols, atol=1e-6)
    # from the span: every row sums to 1, so the sums over the keys add up to the span's length
    assert tspan.span_sums(pattern, start, end, "from").sum() == pytest.approx(end - start, abs=1e-4)


def test_the_payload_greys_what_the_span_and_a_token_cannot_see(pattern):
    T = len(pattern)
    from_span = tspan.payload(pattern, [f"t{i}" for i in range(T)], start=3, end=6, direction="from")
    assert [v is None for v in from_span["values"]] == [k >= 6 for k in range(T)]  # keys after the span's last query
    assert np.allclose([v for v in from_span["values"] if v is not None], pattern[3:6].sum(0)[:6], atol=1e-6)
    to_span = tspan.payload(pattern, [f"t{i}" for i in range(T)], start=3, end=6, direction="to")
    assert [v is None for v in to_span["values"]] == [q < 3 for q in range(T)]  # queries before the span's first key
    assert to_span["cmax"] == pytest.approx(max(v for v in to_span["values"] if v is not None))


@pytest.mark.parametrize("start, end", [(-1, 2), (3, 3), (5, 2), (0, 13)])
def test_a_span_outside_the_prompt_is_refused_in_words(pattern, start, end):
    with pytest.raises(ValueError, match="a span is"):
        tspan.span_sums(pattern, start, end, "from")
    assert tspan.picked_span([start, end], len(pattern)) is None
    with pytest.raises(ValueError, match="direction"):
        tspan.span_sums(pattern, 0, 2, "sideways")


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"layer": 1, "head": 2, "query": 5, "key": 3}, (1, 2, 5, 3)),
        ({"layer": 1, "head": 2, "query": 5, "key": 5}, (1, 2, 5, 5)),
        ({"layer": 1, "head": 2, "query": 3, "key": 5}, None),  # above the diagonal: no score
        ({"layer": 1, "head": 4, "query": 5, "key": 3}, None),  # the mean of the 4 heads (index 4): no single score
        ({"layer": 2, "head": 0, "query": 5, "key": 3}, None),  # no such layer
        ({"layer": 1, "head": 0, "query": 5}, None),
        ("5,3", None),
        (None, None),
        ({"layer": True, "head": 0, "query": 5, "key": 3}, None),
    ],
)
def test_only_a_cell_the_qk_decomposition_takes_opens_it(value, expected):
    assert cell_asked(value, 2, 4) == expected


PROMPT = "The cat sat on the mat. The cat sat on the"


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["from", "to"])
def test_the_text_view_draws_the_span_summed_from_the_capture(direction):
    at = run_page(
        "attention",
        PROMPT,
        att_view="On the text",
        att_layer=1,
        att_head=2,
        att_text_mode=f"attention {direction} a span",
        **{K.ATT_SPAN: (2, 6)},
    )
    assert not at.exception, [e.message for e in at.exception]
    data = component_data(at, tspan.NAME, K.ATT_SPAN_VIEW)
    ids = tuple(encode(PROMPT))
    pattern = model_service.capture_cache(TINY, ids, ("blocks.1.attn.hook_pattern",))[1].prompt(0).pattern(1)[2]
    by_hand = pattern[2:6].sum(0) if direction == "from" else pattern[:, 2:6].sum(1)
    seen = [v is not None for v in data["values"]]
    assert (data["start"], data["end"]) == (2, 6) and seen == [
        (k < 6) if direction == "from" else (k >= 2) for k in range(len(ids))
    ]
    assert np.allclose([v for v in data["values"] if v is not None], by_hand.numpy()[seen], atol=1e-5)
    assert any("tokens 2-5" in c.value.replace("\\", "") for c in at.caption)


@pytest.mark.slow
def test_the_map_offers_the_why_click_and_the_keys_and_says_so():
    at = run_page("attention", PROMPT, att_layer=1, att_head=display.MEAN_HEAD)
    assert not at.exception, [e.message for e in at.exception]
    data = component_data(at, "gptviz_attention_map", K.ATT_MAP)
    assert data["why"] is True and data["keys"] is True


def why_here_script(kept: int, gpt1_folder: str = "") -> None:
    """A page run that asks for the Why page on cell (1, 2, 7, 3) of a map showing the prompt's last `kept` tokens, in
    GPT-2's tokens or, with `gpt1_folder`, in that GPT-1's own BPE."""
    from types import SimpleNamespace

    from gptviz.app.views.attention_views import why_here
    from gptviz.model.gpt1_tokenizer import folder_tokenizer
    from gptviz.model.tokenizer import get_tokenizer

    enc = folder_tokenizer(gpt1_folder) if gpt1_folder else get_tokenizer()
    seen = SimpleNamespace(T=kept, cfg=SimpleNamespace(n_ctx=64), enc=enc)
    why_here(seen, 1, 2, 7, 3)


@pytest.mark.parametrize("dropped", [0, 4])
def test_the_why_page_gets_the_cell_of_the_same_tokens_when_the_map_kept_only_the_last(dropped):
    # the Attention page may keep only a long prompt's last tokens; the Why page reads it whole (up to the context),
    # where the map's position 7 is position 7 + the tokens dropped
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(why_here_script, args=(len(encode(PROMPT)) - dropped,), default_timeout=60)
    at.session_state[K.PROMPT] = PROMPT
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    cell = [at.session_state[k] for k in (K.WHY_QK_LAYER, K.WHY_QK_HEAD, K.WHY_QK_QUERY, K.WHY_QK_KEY)]
    assert cell == [1, 2, 7 + dropped, 3 + dropped] and at.session_state[K.WHY_VIEW] == K.WHY_QK_VIEW


def test_a_gpt1_map_cell_shifts_by_the_tokens_dropped_in_gpt1s_own_bpe(tmp_path):
    """A GPT-1 model's map counts the prompt in GPT-1's BPE, which cuts text unlike GPT-2's: the shift to the Why
    page's positions is counted in the same tokens (it was counted in GPT-2's: 16 places off on this prompt)."""
    from streamlit.testing.v1 import AppTest

    from tests.support.gpt1 import gpt1_folder, hf_ids

    gpt1 = gpt1_folder(tmp_path / "openai-gpt")
    prompt = "Romeo, Romeo, wherefore art thou Romeo? Then his lines again: Romeo, Romeo."
    whole = len(hf_ids(gpt1, prompt))
    assert whole != len(encode(prompt)) and whole <= 64  # the two tokenizers disagree on its length
    at = AppTest.from_function(why_here_script, args=(whole - 4, str(gpt1.folder)), default_timeout=60)
    at.session_state[K.PROMPT] = prompt
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    cell = [at.session_state[k] for k in (K.WHY_QK_QUERY, K.WHY_QK_KEY)]
    assert cell == [7 + 4, 3 + 4]
