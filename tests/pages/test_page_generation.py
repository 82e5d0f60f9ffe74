"""The Generation page (AppTest, tiny preset) and the generation figure factories.

The page runs as its own script with the two values app.py's sidebar would provide (model_spec,
prompt); see the note in test_page_attention.py on AppTest and st.navigation.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from streamlit.testing.v1 import AppTest

from gptviz import generate
from gptviz.app import keys as K
from gptviz.app import live, model_service, sidebar
from gptviz.figures import generation as fg
from gptviz.figures.common import apply_layout, title_room
from gptviz.model.tokenizer import decode, encode
from tests.support.pagetest import (
    TINY,
    array,
    edge_prompts,
    figure,
    finish_generation,
    forward_calls,
    generate_in,
    generation_of,
    held_generation,
    live_code,
    run_page,
)
from tests.support.token_bars import bars_sampling

N_LAYERS, N_HEADS, N_CTX = 2, 4, 128


def page(prompt: str, **state) -> AppTest:
    return run_page("generation", prompt, **state)


def test_default_state_shows_controls_and_the_first_step_the_model_would_take():
    """It opened on an empty info box ("Press Generate..."): it opens on the sidebar prompt's next-token
    distribution, the one the first new token would be drawn from, measured on the model."""
    at = page(sidebar.DEFAULT_PROMPT)
    assert not at.exception and not at.error and not at.info
    bars = figure(at, "After the prompt: the next-token distribution")
    ids = encode(sidebar.DEFAULT_PROMPT)
    with torch.no_grad():
        probs = torch.softmax(model_service.load_model(TINY)(torch.tensor([ids]))[0, -1], -1)
    np.testing.assert_allclose(array(bars["data"][0]["x"]), probs.topk(20).values.numpy(), rtol=1e-4)
    assert figure(at, "Query ")  # the last prompt token's attention in every head of the layer
    for key in (K.GEN_N, K.GEN_TOPK, K.GEN_SEED):
        assert at.number_input(key=key).value is not None
    assert at.slider(key=K.GEN_TEMP).value == 1.0 and at.slider(key=K.GEN_TOPP).value == 0.9
    assert at.button(key=K.GEN_GENERATE).label == "Generate" and at.button(key=K.GEN_STOP).label == "Stop"
    assert at.selectbox(key=K.GEN_HEAD).value == -1  # the mean of heads by default
    assert len(at.selectbox(key=K.GEN_LAYER).options) == N_LAYERS


@pytest.mark.slow
def test_greedy_generation_matches_the_library_and_fills_the_table():
    prompt = "It was the best of times"
    at = generate_in(page(prompt), 4, temperature=0.0)
    assert not at.exception and not at.error
    steps = generation_of(at).steps
    ids = encode(prompt)
    expected = generate(model_service.load_model(TINY), ids, max_new_tokens=4, temperature=0.0)[len(ids) :]
    assert [s.token_id for s in steps] == expected
    assert at.code[0].value == decode(ids) + decode(expected)
    table = at.dataframe[0].value
    assert list(table["step"]) == [0, 1, 2, 3] and list(table["id"]) == expected
    assert list(table["rank"]) == [1, 1, 1, 1] and list(table["kept by top-k/top-p"]) == [1, 1, 1, 1]
    np.testing.assert_allclose(table["probability"], [s.prob for s in steps])
    assert at.slider(key=K.GEN_STEP).max == 3
    # the inspected step's bars: the top 20 probabilities, most probable first, the sampled one orange
    bars = figure(at, "Step 3: the next-token distribution")
    x = array(bars["data"][0]["x"])
    assert len(x) == 20 and np.all(np.diff(x) <= 0)
    np.testing.assert_allclose(x, [p for _, p, _ in steps[3].top], rtol=1e-6)
    assert bars["data"][0]["marker"]["color"][0] == fg.SAMPLED_COLOR
    assert bars["data"][0]["marker"]["color"][1] == fg.CUT_COLOR  # greedy keeps only the argmax


@pytest.mark.slow
def test_inspecting_steps_runs_no_model():
    at = generate_in(page("Inspect these steps, please"), 3, top_k=5)
    before = forward_calls()
    at.slider(key=K.GEN_STEP).set_value(0).run()
    at.selectbox(key=K.GEN_LAYER).select(1).run()
    at.selectbox(key=K.GEN_HEAD).select(2).run()
    assert not at.exception
    assert forward_calls() == before
    steps = generation_of(at).steps
    assert all(s.n_allowed <= 5 for s in steps)
    step_fig = figure(at, "Query ")
    z = array(step_fig["data"][0]["z"])
    np.testing.assert_allclose(z[:N_HEADS], steps[0].attention[1].numpy(), rtol=1e-6)
    np.testing.assert_allclose(z[N_HEADS], steps[0].attention[1].mean(0).numpy(), rtol=1e-5)
    heat = figure(at, "Layer 1, head 2")
    np.testing.assert_allclose(
        array(heat["data"][0]["z"])[0, : len(encode("Inspect these steps, please"))],
        steps[0].attention[1, 2].numpy(),
        rtol=1e-6,
    )


@pytest.mark.slow
def test_outlined_row_follows_the_inspected_step():
    at = generate_in(page("Outline the inspected step"), 3)
    at.slider(key=K.GEN_STEP).set_value(1).run()
    heat = figure(at, "Layer 0, mean of all heads")
    assert heat["layout"]["shapes"][-1]["y0"] == 0.5  # row 1
    at = generate_in(at, 5)  # a new, longer run: the last step
    assert at.slider(key=K.GEN_STEP).value == 4
    assert figure(at, "Layer 0, mean of all heads")["layout"]["shapes"][-1]["y0"] == 3.5
    assert figure(at, "Step 4: the next-token distribution")


@pytest.mark.slow
def test_context_shift_is_noted():
    prompt = " x" * (N_CTX - 1)  # 127 tokens: the third new token shifts
    at = generate_in(page(prompt), 3)
    assert not at.exception
    steps = generation_of(at).steps
    assert [s.context_shifted for s in steps] == [False, False, True]
    assert any("From step 2 the text was longer than the context window" in i.value for i in at.info)
    assert steps[2].window_start == 1 and steps[2].attention.shape[-1] == N_CTX
    assert list(at.dataframe[0].value["context shifted"]) == ["", "", "yes"]  # text, not checkboxes to tick


@pytest.mark.slow
def test_picking_a_step_sets_the_slider_without_streamlits_default_value_warning(caplog):
    """The slider's default lived both in `value=` and in session state (set by the table's row pick), and
    Streamlit logged 'created with a default value but also had its value set via the Session State API'."""
    at = generate_in(page("It was the best of times"), 4, temperature=0.0)
    assert at.slider(key=K.GEN_STEP).value == 3  # the last step by default
    caplog.clear()
    with caplog.at_level("WARNING"):
        at.session_state[K.GEN_STEP] = 1  # what the table's row pick does
        at.run()
    assert at.slider(key=K.GEN_STEP).value == 1 and not at.exception
    assert not [r for r in caplog.records if "default value" in r.getMessage()], caplog.text


@pytest.mark.slow
@edge_prompts("empty", "markup", "emoji-cjk", "longer-than-context")
def test_edge_prompts(prompt):
    at = page(prompt)
    assert not at.exception and not at.error
    if not encode(prompt):
        assert "Type a prompt" in at.info[0].value
        return
    at = generate_in(at, 2)
    assert not at.exception and not at.error
    steps = generation_of(at).steps
    assert len(steps) == 2
    kept = encode(prompt)[-N_CTX:]
    assert at.code[0].value == decode(kept) + decode([s.token_id for s in steps])  # literal text
    if "<" in prompt:  # step 0's query is the prompt's last token, '>': escaped for Plotly
        at.slider(key=K.GEN_STEP).set_value(0).run()
        assert figure(at, "Query ")["layout"]["title"]["text"].startswith("Query '&gt;' (position")


@pytest.mark.slow
def test_stop_ends_a_running_generation_before_its_next_token(monkeypatch):
    """The model writes in a background thread; Stop (a click, so a rerun) ends it before another token is
    shown, and the page then shows the tokens it had shown: here the two of the last redraw."""
    at = page("Keep what was written")
    gate = held_generation(monkeypatch, at, K.GEN_N, K.GEN_GENERATE, 9)
    assert generation_of(at).running
    at.run()  # a redraw while the model waits after its second token
    assert not at.exception and generation_of(at).shown == 2
    shown = decode(encode("Keep what was written")) + decode([s.token_id for s in generation_of(at).steps[:2]])
    assert shown in [t.value for t in at.text] and not live_code(at)  # live: plain text (st.code's highlighter is slow)
    at.button(key=K.GEN_STOP).click().run()
    gate.release()
    at = finish_generation(at)
    job = generation_of(at)
    assert job.stopped and len(job.steps) == 2
    assert not at.exception
    assert any("Stopped after 2 of 9 tokens" in i.value for i in at.info)
    assert len(at.dataframe[0].value) == 2


@pytest.mark.slow
def test_generation_for_another_prompt_is_not_shown():
    at = generate_in(page("first prompt"), 2)
    at.session_state[K.PROMPT] = "second prompt"
    at.run()
    assert not at.exception
    assert figure(at, "After the prompt") and not at.dataframe


# ---- figure factories ---------------------------------------------------------------------------------


def sampled_past_the_bars(**title):
    """Two bars, both kept, and the sampled token at rank 40 of 500 allowed, not among them."""
    return fg.next_token_bars(
        [1, 2],
        [0.6, 0.4],
        [True, True],
        ["x", "y"],
        sampled_id=99,
        sampled_rank=40,
        sampled_prob=0.001,
        sampled_label="z",
        n_allowed=500,
        kept_mass=1.0,
        **title,
    )


def test_next_token_bars_marks_sampled_and_cutoff():
    fig = bars_sampling(
        [5, 7, 9, 11],
        [0.5, 0.3, 0.15, 0.05],
        [True, True, False, False],
        ["a", "<b>", "c", "a"],
        1,
        n_allowed=2,
        kept_mass=0.8,
    )
    bar = fig.data[0]
    assert list(bar.x) == [0.5, 0.3, 0.15, 0.05] and list(bar.y) == [1, 2, 3, 4]
    assert list(bar.marker.color) == [fg.KEPT_COLOR, fg.SAMPLED_COLOR, fg.CUT_COLOR, fg.CUT_COLOR]
    assert list(fig.layout.yaxis.ticktext) == ["a", "&lt;b&gt;", "c", "a"]  # repeats stay distinct rows
    assert list(fig.layout.yaxis.tickvals) == list(bar.y)  # each bar labelled with its own token (was one off)
    assert fig.layout.shapes[0].y0 == 2.5  # the cut-off line
    assert "2 kept (80.0% of the mass)" in fig.layout.annotations[0].text
    assert bar.customdata[0][3] == pytest.approx(0.5 / 0.8) and bar.customdata[2][3] == 0.0
    everything = sampled_past_the_bars()
    assert not everything.layout.shapes
    note = everything.layout.annotations[0].text
    assert "rank 40" in note and "all 2 shown are kept" in note
    titled = sampled_past_the_bars(title="t")
    assert "rank 40" in titled.layout.title.subtitle.text
    # a title long enough to wrap keeps its second line clear of the notes under it (they sat on the first bar)
    long_title = "After the prompt: the next-token distribution"
    wrapped = sampled_past_the_bars(title=long_title)
    lines = wrapped.layout.title.subtitle.text.count("<br>") + 1
    title_only = apply_layout(go.Figure(), title=long_title).layout.margin.t
    assert "<br>" in wrapped.layout.title.text and wrapped.layout.margin.t == title_only + 16 * lines
    assert bar.customdata[2][2] == "cut by top-k/top-p"
    greedy_cut = live.cut_reason({"temperature": 0.0})
    greedy = bars_sampling(
        [5, 7], [0.6, 0.4], [True, False], ["a", "b"], 0, n_allowed=1, kept_mass=0.6, cut_by=greedy_cut
    )
    assert greedy.data[0].customdata[1][2] == "cut by greedy decoding (temperature 0)"
    assert live.cut_reason({"temperature": 0.7}) == "top-k/top-p"


def test_generation_heatmap_layout_of_rows():
    # prompt of 3 tokens, 3 steps; step 2 ran on a shifted window starting at position 1
    rows = [np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.2, 0.6]), np.array([0.25, 0.25, 0.25, 0.25])]
    labels = ["a", "b", "c", "d", "e", "f"]
    fig = fg.generation_heatmap(rows, [0, 0, 1], labels, 3, highlight=1)
    weights, masked = fig.data
    z = np.array(weights.z, dtype=float)
    assert z.shape == (3, 5)
    np.testing.assert_allclose(z[0, :3], rows[0])
    np.testing.assert_allclose(z[1, :4], rows[1])
    np.testing.assert_allclose(z[2, 1:5], rows[2])
    assert np.isnan(z[0, 3:]).all() and np.isnan(z[2, 0])
    m = np.array(masked.z, dtype=float)
    assert m[2, 0] == 0 and m[0, 4] == 1 and np.isnan(m[1, 0])  # out of window vs future
    assert list(fig.layout.yaxis.ticktext) == ["d", "e", "f"]  # the predicted tokens
    assert weights.customdata[1][0][1] == "'d'" and weights.customdata[1][0][0] == "'e'"
    assert fig.layout.shapes[-1].y0 == 0.5
    # the query × key axes and the masked trace as attention_heatmap draws them
    assert (fig.layout.xaxis.tickangle, fig.layout.xaxis.tickfont.size, fig.layout.xaxis.showgrid) == (-60, 10, False)
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis.title.text == "generated token"
    assert (masked.zmin, masked.zmax, masked.showscale, masked.hoverongaps) == (0, 1, False, False)
    assert masked.hovertemplate == "not visible: a later token, or out of the context window<extra></extra>"


def test_generation_heatmap_thins_its_key_labels_so_they_do_not_collide():
    """64 prompt tokens and 30 new ones: 93 key positions, at most 24 angled labels across ~300 px of plot."""
    rows = [np.full(64 + s, 1 / (64 + s)) for s in range(30)]
    fig = fg.generation_heatmap(rows, [0] * 30, [f"t{i}" for i in range(94)], 64)
    assert list(fig.layout.xaxis.tickvals) == list(range(0, 93, 4))
    assert list(fig.layout.xaxis.ticktext) == [f"t{i}" for i in range(0, 93, 4)]
    assert list(fig.layout.yaxis.tickvals) == list(range(30))  # every generated token down


def test_next_token_bars_leave_room_for_every_subtitle_line():
    """Three subtitle lines (all kept, the mass, a sampled token past the bars) sat on the first bar."""
    kw = dict(sampled_prob=0.002, sampled_label="x", n_allowed=30, kept_mass=0.9, title="Step 29")
    bars = list(range(20)), np.linspace(0.2, 0.01, 20), [True] * 20, list("abcdefghijklmnopqrst")
    three = fg.next_token_bars(*bars, sampled_id=99, sampled_rank=30, **kw)
    two = fg.next_token_bars(*bars, sampled_id=3, sampled_rank=4, **kw)
    assert three.layout.title.subtitle.text.count("<br>") == 2
    assert three.layout.margin.t - two.layout.margin.t == 16 and two.layout.margin.t == title_room() + 32


@pytest.mark.slow
def test_step_attention_and_curves():
    w = torch.softmax(torch.randn(3, 4), -1).numpy()
    fig = fg.step_attention(
        w,
        ["p", "q", "r", "s"],
        window_start=5,
        query_label="s",
        predicted_label="t",
        row_titles=["head 0", "head 1", "mean"],
    )
    assert list(fig.data[0].x) == ["p", "q", "r", "s"] and list(fig.layout.yaxis.ticktext) == [
        "head 0",
        "head 1",
        "mean",
    ]
    assert [int(c[2]) for c in fig.data[0].customdata[0]] == [5, 6, 7, 8]  # each key's position, in the hover
    np.testing.assert_allclose(np.array(fig.data[0].z), w)
    curves = fg.step_curves([0.5, 0.25], [1.0, 2.0], ["a", "b"])
    assert len(curves.data) == 2 and list(curves.data[1].y) == [1.0, 2.0]


@pytest.mark.slow
def test_a_tiny_temperature_from_a_link_generates_the_greedy_text():
    """A link may set any temperature in [0, 2]; 1e-300 made every probability NaN ("Generation failed: ValueError").
    Its limit is greedy decoding, and so is its text."""
    tiny = generate_in(page("It was the best of times"), 6, temperature=1e-300)
    greedy = generate_in(page("It was the best of times"), 6, temperature=0.0)
    assert not tiny.exception and not tiny.error
    assert tiny.code[0].value == greedy.code[0].value


@pytest.mark.slow
def test_when_every_slot_is_busy_generate_waits_in_line_and_says_so():
    from gptviz.app import jobs

    slots = jobs.generation_slots()
    busy = [slots.enter(f"another visitor {i}") for i in range(slots.limit)]
    try:
        at = page("Wait your turn")
        at.number_input(key=K.GEN_N).set_value(2)
        at.button(key=K.GEN_GENERATE).click().run()
        assert not at.exception and not at.error
        job = generation_of(at)
        assert job.running and job.ahead == 0 and not job.steps
        at.run()  # the live view's redraw
        assert any("Waiting for a free generation slot: 0 generations ahead of yours" in i.value for i in at.info)
    finally:
        for ticket in busy:
            ticket.leave()
    at = finish_generation(at)
    assert len(generation_of(at).steps) == 2 and not at.exception


@pytest.mark.slow
def test_the_replay_slider_shows_the_text_the_map_and_the_bars_as_they_stood_at_a_step():
    prompt = "Replay this run"
    at = generate_in(page(prompt), 4, temperature=0.0)
    steps = generation_of(at).steps
    before = forward_calls()
    at.slider(key=K.GEN_STEP).set_value(1).run()
    assert not at.exception and forward_calls() == before
    ids = encode(prompt)
    assert at.code[0].value == decode(ids) + decode([s.token_id for s in steps[:2]])  # the text through step 1
    heat = figure(at, "Layer 0, mean of all heads")
    assert array(heat["data"][0]["z"]).shape[0] == 2  # the map's rows so far
    assert figure(at, "Step 1: the next-token distribution")
    assert any("Replaying step 1 of 3" in c.value for c in at.caption)


def test_the_pace_starts_at_a_watchable_speed_and_next_token_writes_one_token_per_click():
    from gptviz.app import keys as K

    at = run_page("generation", "Pace this run", gen_pace=K.DEFAULT_PACE)  # what a visitor's session starts with
    assert at.select_slider(key=K.GEN_PACE).value == "5 tokens/s"
    at.number_input(key=K.GEN_N).set_value(5)
    at.button(key=K.GEN_GENERATE).click().run()
    job = generation_of(at)
    assert job.pace == 5.0
    at.button(key=K.GEN_NEXT).click().run()  # from now on one token per click
    assert job.pace == 0 and at.select_slider(key=K.GEN_PACE).value == "one token per click"
    job.set_pace(None)
    assert job.wait(30) and len(job.steps) == 5
