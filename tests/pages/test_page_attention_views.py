"""The Attention page's views from BertViz, CircuitsVis and Transformer Explainer, and the head detectors beside
the head picker (AppTest, tiny preset): each figure holds the values recomputed here from a capture."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gptviz import methods as analysis
from gptviz.app import display, model_service
from gptviz.app import keys as K
from gptviz.figures import head_views as hv
from gptviz.methods.head_steps import (
    first_token_chance,
    first_token_scores,
    head_hook_names,
    row_shares,
    value_weighted,
)
from gptviz.model.tokenizer import encode
from tests.support.pagetest import TINY, array, figure, figures, run_page

PROMPT = "The cat sat on the mat. The cat sat on the"


def view(name: str, prompt: str = PROMPT, **state):
    at = run_page("attention", prompt, att_view=name, **state)
    assert not at.exception, [e.message for e in at.exception]
    return at


def layer_cache(layer: int, prompt: str = PROMPT):
    ids = tuple(encode(prompt))
    return model_service.capture_cache(TINY, ids, head_hook_names(layer, "pre"))[1].prompt(0), len(ids)  # prompt 0


@pytest.mark.slow
def test_lines_view_draws_the_chosen_heads_with_their_weights():
    at = view("Lines between tokens", att_layer=1, att_head=display.MEAN_HEAD)
    fig = figure(at, "Layer 1: each query")
    cache, T = layer_cache(1)
    pattern = cache["blocks.1.attn.hook_pattern"].numpy()
    heads = {t["meta"]["head"] for t in fig["data"] if isinstance(t.get("meta"), dict)}
    assert heads == {0, 1, 2, 3}  # the mean of the heads: every head overlaid
    for trace in fig["data"]:
        if isinstance(trace.get("meta"), dict):
            h = trace["meta"]["head"]
            for q, k, _ in array(trace["y"]).reshape(-1, 3):
                w = pattern[h, int(q), int(k)]
                assert abs(trace["opacity"] - max(w, 1 / hv.LINE_LEVELS)) <= 0.5 / hv.LINE_LEVELS + 1e-6
    # one head, only the chosen query's lines
    at = view("Lines between tokens", att_layer=1, att_head=2, att_query=4, att_lines_focus=True)
    fig = figure(at, "Layer 1: each query")
    ys = np.concatenate([array(t["y"]).reshape(-1, 3) for t in fig["data"] if isinstance(t.get("meta"), dict)])
    assert set(ys[:, 0].astype(int)) == {4} and {
        t["meta"]["head"] for t in fig["data"] if isinstance(t.get("meta"), dict)
    } == {2}


@pytest.mark.slow
def test_text_view_colours_the_tokens_by_the_query_row_or_by_what_each_receives():
    at = view("On the text", att_layer=0, att_head=3, att_query=5)
    cache, T = layer_cache(0)
    pattern = cache["blocks.0.attn.hook_pattern"][3]
    # each token's value in its hover data ([position, text, value]); its colour is the scale's at that value
    colored = figure(at, "Layer 0, head 3: where token 5")["data"][0]
    assert [int(row[0]) for row in colored["customdata"]] == list(range(6))  # the query sees keys 0-5
    assert np.allclose([float(row[2]) for row in colored["customdata"]], pattern[5, :6].numpy(), atol=1e-6)
    assert len(colored["marker"]["color"]) == 6
    at = view("On the text", att_layer=0, att_head=3, att_text_mode="how much it is looked at")
    received = figure(at, "Layer 0, head 3: mean weight")["data"][0]
    by_hand = [pattern[k:, k].mean().item() for k in range(T)]
    assert np.allclose([float(row[2]) for row in received["customdata"]], by_hand, atol=1e-6)


@pytest.mark.slow
def test_inside_the_head_shows_the_real_computation_and_the_neuron_view():
    at = view("Inside the head", att_layer=1, att_head=1, att_query=7, att_neuron_key=3)
    steps_fig = next(f for f in figures(at) if any(t.get("name") == "softmax" for t in f["data"]))
    cache, T = layer_cache(1)
    softmax = next(t for t in steps_fig["data"] if t["name"] == "softmax")
    assert np.allclose(array(softmax["z"])[0, :8], cache["blocks.1.attn.hook_pattern"][1, 7, :8].numpy(), atol=1e-6)
    z = next(t for t in steps_fig["data"] if t["name"] == "z")
    assert np.allclose(array(z["z"])[0], cache["blocks.1.attn.hook_z"][7, 1].numpy(), atol=1e-6)
    neuron = figure(at, "Query 7 · key 3")
    q, k, product = array(neuron["data"][0]["z"])
    assert np.allclose(q, cache["blocks.1.attn.hook_q"][7, 1].numpy(), atol=1e-6)
    assert np.allclose(k, cache["blocks.1.attn.hook_k"][3, 1].numpy(), atol=1e-6)
    assert f"{product.sum():.4f}" in neuron["layout"]["title"]["text"]
    assert f"{product.sum() / math.sqrt(16):.4f}" in neuron["layout"]["title"]["text"]
    at = view("Inside the head", att_head=display.MEAN_HEAD)
    assert any("Pick a single head" in i.value for i in at.info)


def test_value_weighted_view_by_hand_and_the_sink_line():
    at = view("Value-weighted", att_layer=0, att_head=2)
    shares = figure(at, "Weight × ‖value · W_O‖")["data"][0]
    cache, T = layer_cache(0)
    model = model_service.load_model(TINY)
    vw = value_weighted(model, 0, cache["blocks.0.attn.hook_v"], cache["blocks.0.attn.hook_pattern"])
    expected = row_shares(vw[2]).numpy()
    got = array(shares["z"])
    lower = np.tril(np.ones((T, T), dtype=bool))
    assert np.allclose(got[lower], expected[lower], atol=1e-6) and np.isnan(got[~lower]).all()
    sink = first_token_scores(cache["blocks.0.attn.hook_pattern"][None])[0, 2].item()
    text = " ".join(m.value for m in at.markdown)
    assert f"uniform attention: {first_token_chance(T):.2f}" in text and f"{sink:.2f}" in text


def test_the_detector_table_holds_the_scores_and_their_chance_sorted_by_score():
    at = view("One head")
    frame = next(d.value for d in at.dataframe if "head" in d.value.columns and len(d.value) == 8)
    ids = encode(PROMPT)
    T = len(ids)
    _, cache = model_service.capture_cache(TINY, tuple(ids), model_service.pattern_names(2))
    patterns = cache.prompt(0).patterns()
    prompt_chance, random_chance = analysis.prompt_induction_chance(ids), analysis.induction_chance(50)
    expected = {
        f"previous-token (chance {analysis.previous_token_chance(T):.3f})": analysis.previous_token_scores(patterns),
        f"duplicate-token (chance {analysis.duplicate_token_chance(ids):.3f})": analysis.duplicate_token_scores(
            patterns, ids
        ),
        f"induction, on this prompt (chance {prompt_chance:.3f})": analysis.prompt_induction_scores(patterns, ids),
        f"induction, 50 random tokens repeated (chance {random_chance:.3f})": model_service.induction_scores(TINY, 50),
        f"first token (sink) (chance {first_token_chance(T):.3f})": first_token_scores(patterns),
    }
    assert set(frame.columns) == {"head", *expected}
    heads = [tuple(int(w.strip(",")) for w in name.split()[1::2]) for name in frame["head"]]
    assert sorted(heads) == [(layer, h) for layer in range(2) for h in range(4)]
    for column, scores in expected.items():
        assert np.allclose(frame[column], [float(scores[lh]) for lh in heads])
    sort_column = frame.columns[1]  # the detector the table is sorted by, first after the head
    assert list(frame[sort_column]) == sorted(frame[sort_column], reverse=True)  # by score, not by layer
    assert any(f"Sorted by {sort_column.split(' (chance')[0]}" in c.value for c in at.caption)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Lines between tokens", "On the text", "Inside the head", "Value-weighted"])
def test_each_new_view_handles_a_one_token_prompt_and_markup(name):
    at = view(name, prompt="<b>x</b>")
    assert not at.error
    at = view(name, prompt="<script>alert(1)</script> and a longer prompt " * 3)
    for fig in figures(at):
        for trace in fig["data"]:
            for text in trace.get("text") or []:
                assert "<script>" not in str(text)


@pytest.mark.slow
def test_the_chosen_query_follows_its_token_when_the_prompt_changes():
    at = run_page("attention", "the cat sat on the mat")
    at.button_group(key=K.ATT_QUERY).set_value(1).run()  # "␣cat"
    at.session_state[K.PROMPT] = "a big black cat sat on the mat"
    at.run()
    assert not at.exception
    assert at.button_group(key=K.ATT_QUERY).value == 3  # "␣cat" again, not whatever is at index 1
    at.button_group(key=K.ATT_QUERY).set_value(7).run()  # the last token
    at.session_state[K.PROMPT] = "a big black cat sat on the mat today"
    at.run()
    assert at.button_group(key=K.ATT_QUERY).value is None  # still the last token
    at.button_group(key=K.ATT_QUERY).set_value(2).run()  # "␣black"
    at.session_state[K.PROMPT] = "the cat"
    at.run()
    assert at.button_group(key=K.ATT_QUERY).value is None  # gone from the prompt: the last token


@pytest.mark.slow
def test_the_top_keys_table_is_static_and_shows_token_text_as_text():
    # a static table (its weights as bars), not a data grid: the browser redrew the grid after every pick in the map
    # (issue 60). Streamlit's table shows a styled frame's display values as HTML, so they are escaped here.
    import pyarrow as pa

    from tests.support.pagetest import MARKUP

    at = view("One head", prompt=MARKUP)
    assert [d.key for d in at.dataframe] == [K.ATT_DETECTORS]  # the detector table is the page's one grid
    shown = at.table[0].proto.arrow_data
    display_values = pa.ipc.open_stream(shown.styler.display_values).read_all().to_pandas()
    labels = display_values["key token"].tolist()
    assert all("<" not in label and ">" not in label for label in labels)
    assert any("&lt;" in label for label in labels)
    assert all(len(w.split(".")[1]) == 3 for w in display_values["weight"])
