"""The view in the URL (gptviz.links and the router): a link sets the sidebar's and the page's settings, the address
bar follows the view, and a bad or stale parameter falls back to the default with a notice, never an exception."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.app import settings as S
from gptviz.app.keys import LINKED_KEYS
from gptviz.app.links import (
    MAX_LINK_PROMPT,
    SOURCE_CODES,
    apply_link,
    link_params,
    prompt_left_out,
    replaced_link_value,
)
from gptviz.figures import attention as fa
from tests.support import ROOT

APP = str(ROOT / "app.py")


def open_link(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for name, value in params.items():
        at.query_params[name] = value
    return at.run()


def toasts(at: AppTest) -> list[str]:
    return [t.value for t in at.toast]


# ---- the pure part -------------------------------------------------------------------------------------


def test_a_link_round_trips_every_kind_of_value():
    state = {
        "model_source": K.SOURCE_PRESET,
        "preset": "tiny",
        "seed": 7,
        "norm": "post",
        "prompt": "A B\nC",
        "att_layer": 1,
        "att_head": -1,
        "att_gen_temp": 0.35,
        "gen_eos": True,
        "att_query": None,
        "example_prompt": None,
        "export_format": "png",
    }
    params = link_params(state)
    assert params == {
        "source": "preset",
        "preset": "tiny",
        "seed": "7",
        "norm": "post",
        "prompt": "A B\nC",
        "att_layer": "1",
        "att_head": "-1",
        "att_gen_temp": "0.35",
        "gen_eos": "1",
    }
    back = {}
    assert apply_link(back, params) == []
    assert {k: v for k, v in back.items() if k != LINKED_KEYS} == {k: v for k, v in state.items() if k in back}
    assert back["att_gen_temp"] == 0.35 and back["gen_eos"] is True and back["att_head"] == -1


def test_bad_values_are_dropped_each_with_a_notice():
    state = {}
    notices = apply_link(
        state,
        {
            "norm": "sideways",
            "seed": "-3",
            "att_gen_temp": "nan",
            "att_layer": "two",
            "preset": "gpt5",
            "source": "trained",
            "prompt": "x" * (MAX_LINK_PROMPT + 1),
            "gen_eos": "yes",
            "<script>": "1",
            "att_head": "1",
        },
    )
    assert state == {"att_head": 1, LINKED_KEYS: {"att_head": "att_head"}}
    assert len(notices) == 9
    assert "The link's `norm` must be one of pre, post; the default is shown instead." in notices
    assert "The link's `seed` must be a whole number from 0 to 2147483647; the default is shown instead." in notices
    assert "The link's parameter `<script>` is not one gptviz knows; it was ignored." in notices


def test_a_prompt_too_long_even_compressed_and_a_session_run_stay_out_of_the_link():
    import random

    rng = random.Random(0)
    noise = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(3000))
    state = {"prompt": noise, "model_source": K.SOURCE_TRAINED, "norm": "pre"}
    assert link_params(state) == {"norm": "pre"} and prompt_left_out(state)  # the sidebar says so
    assert set(SOURCE_CODES.values()) == {K.SOURCE_BUNDLED, K.SOURCE_PRESET, K.SOURCE_PRETRAINED}


def test_a_longer_prompt_travels_compressed_and_comes_back_whole():
    """A 980-character prompt was dropped from the link silently; now it travels packed in `pz`."""
    prompt = (
        "ROMEO.\nBut soft! what light through yonder window breaks? It is the east, and Juliet is the sun! " * 10
    )[:980] + " ✓ <b>"
    params = link_params({"prompt": prompt, "norm": "pre"})
    assert "prompt" not in params and len(params["pz"]) < len(prompt) and not prompt_left_out({"prompt": prompt})
    state = {}
    assert apply_link(state, params) == [] and state["prompt"] == prompt


def test_a_packed_prompt_that_is_not_one_or_would_inflate_past_the_limit_is_refused():
    import base64
    import zlib

    bomb = base64.urlsafe_b64encode(zlib.compress(b"a" * 1_500_000, 9)).decode().rstrip("=")
    assert len(bomb) < 2000  # small in the address, 1.5 MB inflated
    for raw in (bomb, "not-base64!", base64.urlsafe_b64encode(b"plain bytes").decode()):
        state = {}
        notices = apply_link(state, {"pz": raw})
        assert "prompt" not in state and len(notices) == 1 and notices[0].startswith("The link's `pz` must be")


def test_a_replaced_link_value_is_reported_once():
    state = {}
    apply_link(state, {"att_layer": "9"})
    assert "`att_layer` does not fit this model" in replaced_link_value(state, "att_layer")
    assert replaced_link_value(state, "att_layer") is None
    assert replaced_link_value(state, "gen_layer") is None


# ---- in the app --------------------------------------------------------------------------------------


A_VIEW = {
    "source": "preset",
    "preset": "tiny",
    "seed": "3",
    "norm": "post",
    "prompt": "To be or not to be",
    "att_layer": "1",
    "att_head": "2",
    "att_scale": "sqrt",
    "att_gen_temp": "0.4",
}


@pytest.mark.slow
def test_a_link_opens_the_same_view():
    at = open_link(**A_VIEW)
    assert not at.exception and toasts(at) == []
    assert at.session_state[K.MODEL_SPEC] == model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "post", 3, "cpu")
    assert at.text_area(key=K.PROMPT).value == "To be or not to be"
    assert at.selectbox(key=K.ATT_LAYER).value == 1 and at.selectbox(key=K.ATT_HEAD).value == 2
    assert at.selectbox(key=K.ATT_SCALE).value == "sqrt"
    assert at.slider(key=K.ATT_GEN_TEMP).value == 0.4
    # the widgets are drawn from the settings' records: their labels and ranges are the records'
    temp = at.slider(key=S.ATT_GEN_TEMP.key)
    assert (temp.label, temp.min, temp.max, temp.step) == (
        S.ATT_GEN_TEMP.label,
        S.ATT_GEN_TEMP.rule.lo,
        S.ATT_GEN_TEMP.rule.hi,
        S.ATT_GEN_TEMP.rule.step,
    )
    assert at.selectbox(key=S.ATT_SCALE.key).options == [str(o) for o in fa.SCALES.values()]
    # the address bar holds the view, so the link a visitor copies now is the one they opened
    for name, value in A_VIEW.items():
        assert at.query_params[name] == value, name


@pytest.mark.slow
def test_the_address_bar_follows_a_change():
    at = open_link(source="preset", preset="tiny")
    at.selectbox(key=K.ATT_LAYER).set_value(1).run()
    assert not at.exception
    assert at.query_params["att_layer"] == "1"
    assert at.query_params["source"] == "preset" and at.query_params["preset"] == "tiny"


def test_a_stale_or_hostile_link_falls_back_with_notices_and_no_exception():
    # tiny has 2 layers, 4 heads and GPT-2's vocabulary: layer 7, head 9 and top-k 60,000 do not fit it
    at = open_link(
        source="preset",
        preset="tiny",
        att_layer="7",
        att_head="9",
        att_gen_topk="60000",
        norm="diagonal",
        prompt="hello",
        seed="1e9",
        **{"<b>x</b>": "1"},
    )
    assert not at.exception and not at.error
    assert at.selectbox(key=K.ATT_LAYER).value == 0 and at.selectbox(key=K.ATT_HEAD).value == 0
    assert at.number_input(key=K.ATT_GEN_TOPK).value == 0
    assert at.session_state[K.NORM] == "pre" and at.text_area(key=K.PROMPT).value == "hello"
    shown = toasts(at)
    assert any("`norm` must be one of pre, post" in t for t in shown)
    assert any("`seed` must be a whole number" in t for t in shown)
    assert any("parameter `<b>x</b>` is not one gptviz knows" in t for t in shown)
    for name in ("att_layer", "att_head", "att_gen_topk"):
        assert any(f"`{name}` does not fit this model or prompt" in t for t in shown), name


def test_a_pick_inside_the_views_fragment_reaches_the_address():
    """The layer, head, scale and view pickers live in a fragment: a pick reran only the fragment, so the address
    kept the old view until the next full run and a copied link opened the wrong one. The fragment writes it now."""
    from tests.support.pagetest import run_page

    at = run_page("attention", "A B C D A B C D")
    at.selectbox(key=K.ATT_LAYER).set_value(1).run()
    at.selectbox(key=K.ATT_SCALE).set_value("linear").run()
    assert not at.exception
    assert at.query_params["att_layer"] == "1" and at.query_params["att_scale"] == "linear"


def test_the_why_and_parameters_pages_settings_travel_in_the_link():
    """The Why page's tab, target, rival, ablated heads and patching pair, the Parameters page's model and the
    generation pace never entered the address."""
    from gptviz.app import keys as K
    from gptviz.app.links import apply_link, link_params

    state = {
        K.WHY_VIEW: "Patching",
        K.WHY_TARGET: 262,
        K.WHY_OTHER: 290,
        K.WHY_ABLATED: [(1, 0), (2, 3)],
        K.WHY_EXAMPLE: "Repeated sequence (induction)",
        K.PAR_MODEL: "gpt2-xl",
        K.ATT_GEN_PACE: "1 token/s",
    }
    params = link_params(state)
    assert params["why_heads"] == "1.0,2.3" and params["why_view"] == "Patching" and params["par_model"] == "gpt2-xl"
    fresh = {}
    assert apply_link(fresh, params) == []
    assert {k: fresh[k] for k in state} == state
    notices = apply_link({}, {"why_heads": "1.0,x", "par_model": "gpt-5"})
    assert len(notices) == 2 and all("default is shown" in n for n in notices)


@pytest.mark.slow
def test_the_twins_matched_pair_travels_in_the_link():
    """Pre-norm vs post-norm's matched pair never entered the address, so a copied link opened the most similar pair
    whatever the visitor had picked. A pick now reaches it, and a link with it opens that pair."""
    at = open_link(source="bundled", norm="pre")
    at.switch_page("app_pages/norms.py").run()
    assert not at.exception, at.exception
    picker = at.selectbox(key=K.TWINS_PAIR)
    most_similar = picker.value
    other = next(i for i in range(len(picker.options)) if i != most_similar)
    picker.set_value(other).run()
    assert not at.exception and at.query_params["twins_pair"] == str(other)
    again = open_link(
        **{name: value[0] if isinstance(value, list) else value for name, value in at.query_params.items()}
    )
    again.switch_page("app_pages/norms.py").run()
    assert not again.exception and toasts(again) == []
    assert again.selectbox(key=K.TWINS_PAIR).value == other
    assert again.query_params["twins_pair"] == str(other)
    stale = open_link(source="bundled", norm="pre", twins_pair="4095")  # past these twins' 16 pairs
    stale.switch_page("app_pages/norms.py").run()
    assert not stale.exception
    assert stale.selectbox(key=K.TWINS_PAIR).value == most_similar  # as on a first visit
    assert any("`twins_pair` does not fit this model or prompt" in t for t in toasts(stale)), toasts(stale)
