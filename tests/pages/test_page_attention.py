"""The Attention page (AppTest, tiny preset) and its figure factories.

AppTest note (Streamlit 1.67): after the first run of app.py, AppTest reruns the page file that run
finished on as the main script, without app.py's sidebar, so widget-state keys of the sidebar (the
prompt) are dropped. The page tests therefore run the page file directly with the two values the
sidebar would provide (model_spec, prompt); test_router_default_page checks the app.py path once.
"""

from __future__ import annotations

import math
import platform

import numpy as np
import plotly.colors as pcolors
import pytest
import torch
from streamlit.testing.v1 import AppTest

from gptviz import methods as analysis
from gptviz.app import display, model_service, sidebar
from gptviz.app import keys as K
from gptviz.figures import attention as fa
from gptviz.figures.browser import attention_map as amap
from gptviz.model.tokenizer import decode, encode, token_labels
from gptviz.serve import allocator
from tests.support import ROOT
from tests.support.pagetest import (
    MARKUP,
    TINY,
    array,
    attention_map,
    edge_prompts,
    figure,
    finish_generation,
    forward_calls,
    generation_of,
    held_generation,
    kept_and_charted,
    live_code,
    open_app,
    query_bars,
    run_page,
)

N_LAYERS, N_HEADS, N_CTX = 2, 4, 128  # the tiny preset


def page(prompt: str, **state) -> AppTest:
    return run_page("attention", prompt, **state)


def patterns_for(prompt: str) -> torch.Tensor:
    ids = tuple(encode(prompt)[-N_CTX:])
    _, cache = model_service.get_capture(
        TINY, ids, model_service.attention_page_names(N_LAYERS, "pre")
    )  # the page's own capture
    return torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][0] for i in range(N_LAYERS)])  # prompt 0 of [1, ...]


# ---- the page ----------------------------------------------------------------------------------------


def test_router_default_page():
    allocator._applied = None  # app.py sets the allocator policy before any page runs
    at = open_app()
    assert not at.exception
    assert at.title[0].value == "Attention"
    assert at.session_state[K.MODEL_SPEC] == TINY
    assert len(at.button_group(key=K.ATT_QUERY).options) == len(encode(sidebar.DEFAULT_PROMPT))
    assert allocator.freed_memory_kept() is (platform.libc_ver()[0] == "glibc")
    # the session's first run ends with the script that loads the browser's Plotly bundle when idle; the next has none
    warm = [h for h in at.get("html") if "__gvPlotlyWarm" in h.proto.body]
    assert at.session_state[K.PLOTLY_WARMED] and len(warm) == 1 and display.plotly_chunk() in warm[0].proto.body
    at.run()
    assert not at.exception and not [h for h in at.get("html") if "__gvPlotlyWarm" in h.proto.body]


def test_default_state_widgets_and_real_weights():
    at = page(sidebar.DEFAULT_PROMPT)
    assert not at.exception and not at.error
    ids = encode(sidebar.DEFAULT_PROMPT)
    assert at.selectbox(key=K.ATT_LAYER).options == [f"layer {i}" for i in range(N_LAYERS)]
    assert at.selectbox(key=K.ATT_HEAD).options == [f"head {h}" for h in range(N_HEADS)] + ["mean of all heads"]
    assert len(at.selectbox(key=K.ATT_SCALE).options) == len(fa.SCALES)
    chips = at.button_group(key=K.ATT_QUERY)
    assert chips.options and len(chips.options) == len(ids)
    # every view, in the order the settings give them (att_view's choices)
    assert [t.label for t in at.tabs] == list(K.ATTENTION_VIEWS) and len(at.tabs) == 8
    assert at.button(key=K.ATT_GENERATE).label == "Generate" and at.button(key=K.ATT_STOP).label == "Stop"
    # the heatmap carries the model's own weights, every head of every layer (tiny: all fit), each mean last
    data, weights = attention_map(at)
    expected = patterns_for(sidebar.DEFAULT_PROMPT).numpy()
    assert (data["layer"], data["head"], data["layers"]) == (0, 0, list(range(N_LAYERS)))
    assert data["col_labels"] == token_labels(ids) and data["query"] == len(ids) - 1
    np.testing.assert_allclose(weights[:, :N_HEADS], expected, atol=0.5 / amap.LEVELS + 1e-7)
    np.testing.assert_allclose(weights[:, N_HEADS], expected.mean(1), atol=0.5 / amap.LEVELS + 1e-7)
    assert data["head_names"] == [f"head {h}" for h in range(N_HEADS)] + ["mean of all heads"]
    # the bars are the last token's row, over every key it can see, with the tokens' own text
    bars = query_bars(at)
    assert bars["query"] == len(ids) - 1 and bars["labels"] == token_labels(ids)
    assert bars["title"] == f"Where token {len(ids) - 1} '{token_labels(ids)[-1]}' looks"
    np.testing.assert_allclose(bars["weights"], expected[0, 0, -1], atol=1e-6)


@pytest.mark.slow
def test_display_widgets_run_no_forward_pass():
    prompt = "A prompt only this test uses: the forward count must move once, then never."
    model_service.induction_scores(TINY, 50)  # the detector table's own run, cached once per model (not per prompt)
    before = forward_calls()
    at = page(prompt)
    assert forward_calls() == before + 1  # the capture ran once (fresh prompt)
    after_first = forward_calls()
    at.selectbox(key=K.ATT_LAYER).select(1).run()
    at.selectbox(key=K.ATT_HEAD).select(-1).run()
    assert not at.exception
    data, weights = attention_map(at)
    assert (data["layer"], data["head"]) == (1, N_HEADS)  # the mean of layer 1
    np.testing.assert_allclose(weights[1, N_HEADS], patterns_for(prompt)[1].mean(0).numpy(), atol=1e-5)
    at.selectbox(key=K.ATT_SCALE).select("sqrt").run()
    at.button_group(key=K.ATT_QUERY).set_value(2).run()
    bars = query_bars(at)
    assert bars["query"] == 2 and len(bars["weights"]) == 3
    np.testing.assert_allclose(bars["weights"], patterns_for(prompt)[1].mean(0)[2, :3].numpy(), atol=1e-5)
    for view in K.ATTENTION_VIEWS[1:]:
        at.session_state[K.ATT_VIEW] = view
        at.run()
        assert not at.exception
    assert forward_calls() == after_first


@edge_prompts("empty", "one-token", "longer-than-context", "emoji-cjk", "markup")
def test_edge_prompts(prompt):
    at = page(prompt)
    kept = kept_and_charted(at, prompt, N_CTX)
    if not kept:
        return
    chips = at.button_group(key=K.ATT_QUERY).options
    assert len(chips) == len(kept)
    # chips are the display labels, Markdown-escaped (backslash before punctuation), never HTML; a repeat carries
    # zero-width spaces, so the label picked maps back to its own position
    assert len(set(chips)) == len(chips)
    unescaped = [c.replace("\\", "").rstrip("\u200b") for c in chips]
    assert unescaped == [label.replace("\\", "") for label in token_labels(kept)]
    assert all("\ufffd" not in c for c in chips)
    data, _ = attention_map(at)
    assert data["col_labels"] == token_labels(kept)  # plain text: the browser draws it, it never parses it


def test_markup_prompt_reaches_the_heatmap_as_text_only():
    """The heatmap component gets token text as data and sets it only as textContent or canvas text; the
    Plotly version (its download) escapes it for Plotly's label markup."""
    at = page(MARKUP)
    data, _ = attention_map(at)
    assert "<" in data["col_labels"] and "img" in "".join(data["col_labels"])
    js = (ROOT / "gptviz" / "figures" / "browser" / "attention_map.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "outerHTML" not in js
    heat = fa.attention_heatmap(np.eye(len(data["col_labels"])), data["col_labels"])
    custom = np.array(heat.data[0].customdata, dtype=object)
    texts = {str(c) for c in custom[..., 0].ravel()}
    assert "'&lt;'" in texts and not any("<" in t for t in texts)


def test_entropy_map_values_and_click_target():
    prompt = "the cat sat on the mat and the dog sat on the log"
    at = page(prompt, att_view="Entropy map")
    assert not at.exception
    fig = figure(at, "Attention entropy per head")
    heat, points = fig["data"]
    ent = analysis.attention_entropy(patterns_for(prompt))
    np.testing.assert_allclose(array(heat["z"]), ent.mean(-1).numpy(), rtol=1e-5)
    assert heat["zmax"] == pytest.approx(analysis.uniform_attention_entropy(len(encode(prompt))))
    custom = array(points["customdata"]).reshape(-1, 4)
    assert [tuple(map(int, c[:2])) for c in custom] == [(layer, h) for layer in range(N_LAYERS) for h in range(N_HEADS)]
    assert fa.selected_head({"selection": {"points": [{"customdata": list(custom[5])}]}}) == (1, 1)
    assert fa.selected_head({"selection": {"points": [{"x": 3, "y": 1, "customdata": {"0": 1, "1": 3}}]}}) == (1, 3)
    assert fa.selected_head({"selection": {"points": [{"customdata": {"0": 0, "1": 2}}]}}) == (0, 2)
    assert fa.selected_head({"selection": {"points": [{"customdata": {}}]}}) is None


@pytest.mark.slow
def test_model_view_and_layer_grid_trace_counts():
    prompt = "one two three four five"
    at = page(prompt, att_view="Model view: every layer and head")
    mv = figure(at, "Every layer (rows)")
    # one tiled trace, panels T + 1 apart, and the click markers (one per panel)
    assert len(mv["data"]) == 2 and array(mv["data"][1]["customdata"]).shape == (N_LAYERS * N_HEADS, 2)
    T = len(encode(prompt))
    tiled = array(mv["data"][0]["z"])
    assert tiled.shape == (N_LAYERS * (T + 1) - 1, N_HEADS * (T + 1) - 1)
    expected = patterns_for(prompt)
    panel = tiled[T + 1 : 2 * T + 1, 2 * (T + 1) : 2 * (T + 1) + T]  # layer 1, head 2
    np.testing.assert_allclose(np.nan_to_num(panel), expected[1, 2].numpy(), rtol=1e-6)
    at.toggle(key=K.ATT_MV_MEAN).set_value(True).run()
    mean_view = array(figure(at, "Every layer (rows)")["data"][0]["z"])
    assert mean_view.shape == (N_LAYERS * (T + 1) - 1, T)
    np.testing.assert_allclose(np.nan_to_num(mean_view[:T]), expected[0].mean(0).numpy(), rtol=1e-5)
    at.session_state[K.ATT_VIEW] = "All heads of the layer"
    at.run()
    assert len(figure(at, "Layer 0: every head")["data"]) == N_HEADS


@pytest.mark.slow
def test_short_generation_produces_tokens():
    prompt = "To be, or not to be"
    at = page(prompt)
    before = forward_calls()
    at.number_input(key=K.ATT_GEN_N).set_value(3)
    at.slider(key=K.ATT_GEN_TEMP).set_value(0.0)
    at.button(key=K.ATT_GENERATE).click()
    at = finish_generation(at.run())
    assert not at.exception and not at.error
    job = generation_of(at)
    assert len(job.steps) == 3 and not job.running
    assert forward_calls() == before + 3  # one forward pass per new token, no capture rerun
    new_ids = [s.token_id for s in job.steps]
    # greedy: each token is the argmax, i.e. rank 1
    assert [s.rank for s in job.steps] == [1, 1, 1]
    assert at.code[0].value == decode(encode(prompt)) + decode(new_ids)
    data, weights = attention_map(at, K.ATT_GEN_MAP)
    assert (data["layer"], data["head"]) == (0, 0) and weights.shape[2:] == (3, len(encode(prompt)) + 2)
    # step 0's row is the prompt's last query row from the capture
    np.testing.assert_allclose(
        weights[0, 0, 0, : len(encode(prompt))], patterns_for(prompt)[0, 0, -1].numpy(), atol=0.5 / amap.LEVELS + 1e-6
    )
    # the generated text can become the prompt of every view (the sidebar's prompt)
    at.button(key=K.ATT_GEN_USE).click().run()
    assert at.session_state[K.PROMPT] == decode(encode(prompt)) + decode(new_ids)
    at.run()
    assert len(at.button_group(key=K.ATT_QUERY).options) == len(encode(at.session_state[K.PROMPT]))  # re-tokenised


@pytest.mark.slow
def test_a_head_switch_during_a_generation_neither_stops_it_nor_reruns_the_model(monkeypatch):
    """The generation runs beside the page: picking another head redraws, the model keeps writing, and the
    finished run is drawn for the head picked."""
    at = page("Keep writing while I look")
    gate = held_generation(monkeypatch, at, K.ATT_GEN_N, K.ATT_GENERATE, 6)
    at.selectbox(key=K.ATT_HEAD).set_value(1).run()
    assert not at.exception and generation_of(at).running
    gate.release()
    at = finish_generation(at)
    job = generation_of(at)
    assert not job.stopped and len(job.steps) == 6
    data, weights = attention_map(at, K.ATT_GEN_MAP)
    assert (data["layer"], data["head"]) == (0, 1) and weights.shape[2] == 6
    assert not at.exception


@pytest.mark.slow
def test_stop_keeps_the_tokens_written_so_far(monkeypatch):
    prompt = "Stop me"
    at = page(prompt)
    gate = held_generation(monkeypatch, at, K.ATT_GEN_N, K.ATT_GENERATE, 5)
    at.run()  # a redraw while the model waits after its second token: Stop keeps what the page has shown
    assert generation_of(at).shown == 2
    shown = decode(encode(prompt)) + decode([s.token_id for s in generation_of(at).steps[:2]])
    assert shown in [t.value for t in at.text] and not live_code(at)  # live: plain text (st.code's highlighter is slow)
    at.button(key=K.ATT_STOP).click().run()
    gate.release()
    at = finish_generation(at)
    assert not at.exception
    assert generation_of(at).stopped, [i.value for i in at.info]
    assert any("Stopped after 2 of 5 tokens" in i.value for i in at.info), [i.value for i in at.info]
    assert at.code[0].value.startswith(prompt)


def test_sampling_widgets_bound_the_settings():
    at = page("bounds")
    assert at.number_input(key=K.ATT_GEN_TOPK).min == 0 and at.number_input(key=K.ATT_GEN_TOPK).max == 50257
    assert at.number_input(key=K.ATT_GEN_N).min == 1
    assert at.slider(key=K.ATT_GEN_TEMP).min == 0.0 and at.slider(key=K.ATT_GEN_TEMP).max == 2.0
    assert at.slider(key=K.ATT_GEN_TOPP).min == 0.05 and at.slider(key=K.ATT_GEN_TOPP).max == 1.0


def test_start_generation_rejects_bad_settings_before_storing():
    def script():
        import streamlit as st

        from gptviz.app import keys as K
        from gptviz.app import live, model_service  # noqa: F811  (the script runs alone: the module's are not there)

        got = model_service.load_model(model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "pre"))
        try:
            live.start_generation(
                model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "pre"),
                got,
                [1, 2, 3],
                dict(max_new_tokens=2, temperature=1.0, top_k=None, top_p=1.5, seed=0),
                "attention",
            )
        except ValueError as err:
            st.error(str(err))
        st.text(f"stored: {K.GENERATION in st.session_state}")

    at = AppTest.from_function(script, default_timeout=60).run()
    assert "top_p" in at.error[0].value
    assert at.text[0].value == "stored: False"


# ---- figure factories ---------------------------------------------------------------------------------


def test_attention_heatmap_data():
    pattern = torch.softmax(torch.randn(4, 4).masked_fill(torch.ones(4, 4).triu(1).bool(), float("-inf")), -1)
    labels = ["the", "<b>", "the", "&"]
    fig = fa.attention_heatmap(pattern.numpy(), labels, query=2)
    weights, mask = fig.data
    assert len(fig.data) == 2 and mask.name == "masked"
    z = np.array(weights.z, dtype=float)
    np.testing.assert_allclose(np.tril(z), np.tril(pattern.numpy()), rtol=1e-6)
    assert np.isnan(z[np.triu_indices(4, 1)]).all()
    assert (np.array(mask.z)[np.triu_indices(4, 1)] == 1).all() and np.isnan(np.array(mask.z)[np.tril_indices(4)]).all()
    # category axes that thin their labels to the width drawn; the two 'the' stay distinct columns (a zero-width
    # space apart, drawn the same); tag-like text escaped
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert axis.type == "category" and axis.tickmode == "auto"
        assert list(axis.categoryarray) == ["the", "&lt;b&gt;", "the\u200b", "&amp;"]
    assert list(weights.x) == list(fig.layout.xaxis.categoryarray) == list(mask.y)
    assert fig.data[0].customdata[2][0][0] == "'the'" and fig.data[0].customdata[2][1][1] == "'&lt;b&gt;'"
    assert "→" in weights.hovertemplate and weights.hovertemplate.endswith("<extra></extra>")
    assert fig.layout.shapes[0].y0 == 1.5 and fig.layout.shapes[0].x1 == 2.5  # the query row outline
    assert (fig.layout.xaxis.tickangle, fig.layout.xaxis.tickfont.size, fig.layout.yaxis.tickfont.size) == (-60, 11, 11)
    assert fig.layout.yaxis.autorange == "reversed" and not fig.layout.xaxis.zeroline and not fig.layout.yaxis.showgrid
    assert (mask.zmin, mask.zmax, mask.showscale, mask.hoverongaps) == (0, 1, False, False)
    assert mask.hovertemplate == "masked: a token cannot look at later tokens<extra></extra>"


def test_color_axis_scales():
    z = np.array([[1.0, np.nan], [0.2, 0.3]])
    assert fa.color_axis("linear", z)["cmax"] == 1.0
    assert fa.color_axis("max", z)["cmax"] == pytest.approx(0.3)  # the first row (always 1) excluded
    sqrt = fa.color_axis("sqrt", z)["colorscale"]
    assert sqrt[0][0] == 0 and sqrt[-1][0] == 1 and len(sqrt) == 21
    with pytest.raises(ValueError, match="scale"):
        fa.color_axis("log")


def test_attention_grid_and_entropy_map_data():
    pats = torch.softmax(torch.randn(2, 3, 5, 5), -1).numpy()
    fig = fa.attention_grid(
        pats, list("abcde"), panel_names=[[f"L{layer}H{h}" for h in range(3)] for layer in range(2)], selected=(1, 2)
    )
    assert len(fig.data) == 6 and all(t.coloraxis == "coloraxis" for t in fig.data)
    z = np.array(fig.data[4].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 0] == pytest.approx(pats[1, 1, 1, 0])
    assert fig.data[4].name == "L1H1" and list(fig.data[4].x) == ["0 a", "1 b", "2 c", "3 d", "4 e"]
    assert fig.layout.shapes[0].xref == "x6 domain"
    mv = fa.model_view(
        pats,
        ["a", "<b>", "a", "d", "e"],
        row_names=["layer 0", "layer 1"],
        col_names=["head 0", "head 1", "head 2"],
        selected=(1, 2),
    )
    tiled = np.array(mv.data[0].z, dtype=float)
    assert len(mv.data) == 1 and tiled.shape == (11, 17)
    assert np.isnan(tiled[5, :]).all() and np.isnan(tiled[:, 5]).all()  # the gap row and column
    np.testing.assert_allclose(np.tril(np.nan_to_num(tiled[6:11, 12:17])), np.tril(pats[1, 2]), rtol=1e-6)
    assert np.isnan(tiled[6, 13])  # masked: key after query
    assert mv.data[0].y[7] == "layer 1 · '&lt;b&gt;' (1)" and mv.data[0].x[14] == "head 2 · 'a' (2)"
    assert list(mv.layout.xaxis.ticktext) == ["head 0", "head 1", "head 2"]
    outline = mv.layout.shapes[-1]
    assert (outline.x0, outline.x1, outline.y0, outline.y1) == (11.5, 16.5, 5.5, 10.5)
    ent = np.array([[0.1, 0.2], [0.3, 0.4]])
    em = fa.entropy_map(ent, uniform_entropy=1.0, selected=(1, 0))
    np.testing.assert_allclose(np.array(em.data[0].z), ent, rtol=1e-6)
    assert em.data[0].zmax == 1.0
    assert [tuple(c[:2]) for c in em.data[1].customdata] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert fa.selected_head({"selection": {"points": []}}) is None


def test_attention_entropy_values():
    uniform = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(analysis.attention_entropy(uniform).numpy(), [0, math.log(2), math.log(3)], rtol=1e-6)
    assert analysis.uniform_attention_entropy(3) == pytest.approx((0 + math.log(2) + math.log(3)) / 3)


def test_entropy_map_is_dark_where_heads_are_focused_and_sane_for_one_token():
    """The caption says dark cells are focused heads: the scale's dark end is entropy 0. A one-token prompt has
    entropy 0 everywhere (and an even spread of 0): the scale still runs 0 to 1, not -0.5 to 0.5."""
    import plotly.colors as pcolors

    em = fa.entropy_map(np.array([[0.1, 2.0]]), uniform_entropy=2.5)
    heat = em.data[0]
    low, high = heat.colorscale[0][1], heat.colorscale[-1][1]
    brightness = lambda c: sum(pcolors.unlabel_rgb(c))  # noqa: E731
    assert brightness(low) < brightness(high) and (heat.zmin, heat.zmax) == (0, 2.5)
    one = fa.entropy_map(np.zeros((2, 4)), uniform_entropy=0.0).data[0]
    assert (one.zmin, one.zmax) == (0, 1.0)
    at = page("Hi")
    assert not at.exception and any(m.value.startswith("**1 token** (") for m in at.markdown)


@pytest.mark.slow
def test_the_default_colour_scale_shows_small_weights():
    """A linear 0-1 scale made nearly every trained head look pale; the default is the square root, said in help."""
    at = page("The cat sat on the mat")
    assert at.selectbox(key=K.ATT_SCALE).value == fa.DEFAULT_SCALE == "sqrt"
    assert "square root" in at.selectbox(key=K.ATT_SCALE).help
    data, _ = attention_map(at)
    assert data["scale"] == "sqrt" and data["colors"][0][1] == [247, 251, 255]  # Blues, white at 0
    axis = fa.color_axis("sqrt")
    assert len(axis["colorscale"]) == 21
    # a weight of 0.05 gets the colour a linear scale gives sqrt(0.05) = 0.22; the bar's ticks are evenly spaced in
    # the weight (its scale is linear), so none sits on another in a short bar
    linear = fa.color_axis("linear")
    assert (
        axis["colorscale"][1][0] == 0.05
        and axis["colorscale"][1][1] == pcolors.sample_colorscale(linear["colorscale"], [0.05**0.5])[0]
    )
    assert axis["colorbar"]["tickvals"] == [0, 0.25, 0.5, 0.75, 1]
    gen = run_page("generation", "The cat sat on the mat")
    assert gen.selectbox(key=K.GEN_SCALE).value == "sqrt"


def test_model_view_panels_carry_their_head_for_a_click():
    """Each panel's first cell (always 1: the first token sees only itself) holds a marker whose customdata is its
    (layer, head), which the page's click handler reads with selected_head."""
    p = np.random.default_rng(0).random((2, 3, 4, 4))
    fig = fa.model_view(
        p, list("abcd"), row_names=["layer 0", "layer 1"], col_names=["head 0", "head 1", "head 2"], clickable=True
    )
    marker = fig.data[1]
    assert marker.customdata.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert marker.x[5] == fig.data[0].x[2 * 5] and marker.y[5] == fig.data[0].y[5]  # panel (1, 2)'s cell (0, 0)
    assert fa.selected_head(
        {"selection": {"points": [{"x": marker.x[5], "y": marker.y[5], "customdata": list(marker.customdata[5])}]}}
    ) == (1, 2)
    assert (
        len(
            fa.model_view(
                p, list("abcd"), row_names=["layer 0", "layer 1"], col_names=["head 0", "head 1", "head 2"]
            ).data
        )
        == 1
    )  # not clickable: no markers


def test_where_a_query_looks_thins_its_key_labels_so_they_do_not_collide():
    from gptviz.figures import span_bars

    labels = [f"t{i}" for i in range(64)]
    weights = np.full(64, 1 / 64)
    fig = span_bars.query_bars(weights, labels, 63)
    ticks = list(fig.layout.xaxis.tickvals)
    assert ticks == list(range(0, 64, 4)) and list(fig.layout.xaxis.ticktext) == [labels[i] for i in ticks]
    np.testing.assert_allclose(fig.data[0].y, weights)  # every bar is still there, only the labels thin out
    short = span_bars.query_bars(weights[:16], labels[:16], 15)
    assert list(short.layout.xaxis.tickvals) == list(range(16))


# ---- the first screen ---------------------------------------------------------------------------------

BUNDLED = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")


def test_the_page_opens_on_the_prompts_most_telling_head_with_its_score_beside_chance():
    """It opened on layer 0, head 0 whatever the prompt (a previous-token diagonal): it opens on the head the
    detectors find, with the measured score and chance level in one line above the map."""
    at = run_page("attention", sidebar.DEFAULT_PROMPT, spec=BUNDLED)
    assert not at.exception
    ids = encode(sidebar.DEFAULT_PROMPT)
    _, cache = model_service.capture_cache(BUNDLED, tuple(ids), model_service.pattern_names(4))
    scores = analysis.prompt_induction_scores(cache.prompt(0).patterns(), ids)
    layer, head = divmod(int(scores.argmax()), scores.shape[1])
    assert (at.selectbox(key=K.ATT_LAYER).value, at.selectbox(key=K.ATT_HEAD).value) == (layer, head) != (0, 0)
    line = next(m.value for m in at.markdown if "Worth a look" in m.value)
    assert f"layer {layer}, head {head}" in line and "induction" in line
    assert f"{float(scores[layer, head]):.2f}" in line and f"{analysis.prompt_induction_chance(ids):.2f}" in line
    assert at.expander[0].proto.expanded  # Heads worth a look: open


def test_the_maps_line_on_each_head_is_its_detector_furthest_above_chance_on_this_prompt():
    """On a phone the map fills the first screen, so the map itself says what the shown head does: a line per head
    under its title, the on-prompt detector with the largest score over chance, its score beside that chance; the head
    worth a look says so. Recomputed here from the page's own capture and the detector functions."""
    at = run_page("attention", sidebar.DEFAULT_PROMPT, spec=BUNDLED)
    assert not at.exception
    ids = encode(sidebar.DEFAULT_PROMPT)
    _, cache = model_service.capture_cache(BUNDLED, tuple(ids), model_service.pattern_names(4))
    pats, T = cache.prompt(0).patterns(), len(ids)
    measured = {
        "induction": (analysis.prompt_induction_scores(pats, ids), analysis.prompt_induction_chance(ids)),
        "previous-token": (analysis.previous_token_scores(pats), analysis.previous_token_chance(T)),
        "duplicate-token": (analysis.duplicate_token_scores(pats, ids), analysis.duplicate_token_chance(ids)),
        "first token (sink)": (pats[..., 1:, 0].mean(-1), float(np.mean(1 / np.arange(2, T + 1)))),
    }
    data, _ = attention_map(at)
    notes = data["head_notes"]
    assert len(notes) == 4 and all(len(row) == 5 and row[-1] == "" for row in notes)  # 4 heads, then the mean: none
    shown = (at.selectbox(key=K.ATT_LAYER).value, at.selectbox(key=K.ATT_HEAD).value)
    worth = [(layer, h) for layer in range(4) for h in range(4) if notes[layer][h].startswith("Worth a look: ")]
    assert worth == [shown]  # the page opened on it
    for layer in range(4):
        for h in range(4):
            name = max(measured, key=lambda n: float(measured[n][0][layer, h]) / measured[n][1])
            if (layer, h) == shown:
                name = "induction"  # picked for induction, the first detector in the opening order that clears
            score, chance = measured[name]
            assert (
                notes[layer][h].removeprefix("Worth a look: ")
                == f"{name} {float(score[layer, h]):.2f} (chance {chance:.2f})"
            ), (layer, h)


def test_the_induction_example_is_one_click_away_and_opens_its_induction_head():
    at = run_page("attention", "Romeo.\nBut soft!", spec=BUNDLED, att_layer=3, att_head=2)
    name = next(n for n in sidebar.EXAMPLE_PROMPTS if "letters" in n)
    button = next(b for b in at.button if b.label == name)
    button.click().run()
    assert at.session_state[K.PROMPT] == sidebar.EXAMPLE_PROMPTS[name]
    line = next(m.value for m in at.markdown if "Worth a look" in m.value)
    assert "induction" in line
    assert (at.selectbox(key=K.ATT_LAYER).value, at.selectbox(key=K.ATT_HEAD).value) != (3, 2)
    # a visitor's own pick afterwards stays: only loading an example moves the head
    at.selectbox(key=K.ATT_HEAD).select(3).run()
    assert at.selectbox(key=K.ATT_HEAD).value == 3


def test_the_pages_prompt_box_is_the_sidebars_prompt_both_ways():
    """A phone's first screen has the prompt on the page (its sidebar starts closed): one prompt in two boxes."""
    at = page("the cat sat on the mat")
    assert at.text_area(key=K.PAGE_PROMPT).value == "the cat sat on the mat"
    at.text_area(key=K.PAGE_PROMPT).input("A B C D A B C D").run()
    assert not at.exception
    assert at.session_state[K.PROMPT] == "A B C D A B C D"  # what every page reads
    assert any(m.value.startswith("**8 tokens**") for m in at.markdown)  # and this page ran on it
    at.session_state[K.PROMPT] = "Hi there"  # typed in the sidebar
    at.run()
    assert at.text_area(key=K.PAGE_PROMPT).value == "Hi there"


def test_the_suggested_head_says_whether_the_map_shows_it_and_one_click_shows_it():
    """Toggling the LayerNorm placement ran another model: the line named its best head (layer 2, head 0) while the
    pickers stayed on the first model's (layer 1, head 0). The line now says which head the map shows, and its button
    moves the pickers (and so the map) to the suggested head."""
    at = run_page("attention", sidebar.DEFAULT_PROMPT, spec=BUNDLED)
    shown = (at.selectbox(key=K.ATT_LAYER).value, at.selectbox(key=K.ATT_HEAD).value)
    line = next(m.value for m in at.markdown if "Worth a look" in m.value)
    assert f"Worth a look: layer {shown[0]}, head {shown[1]}**" in line and line.endswith("The map shows it.")
    assert not [b for b in at.button if b.key == K.ATT_SHOW_SUGGESTED]
    at.session_state[K.MODEL_SPEC] = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-post", "post")  # the toggle
    at.run()
    assert not at.exception
    line = next(m.value for m in at.markdown if "Worth a look" in m.value)
    layer, head = (int(n) for n in line.split("**")[1].removeprefix("Worth a look: layer ").split(", head "))
    picked = (at.selectbox(key=K.ATT_LAYER).value, at.selectbox(key=K.ATT_HEAD).value)
    assert picked == shown != (layer, head)  # the post-norm model's best head is another one
    assert line.endswith(f"The map shows layer {picked[0]}, head {picked[1]}.")
    at.button(key=K.ATT_SHOW_SUGGESTED).click().run()
    assert (at.selectbox(key=K.ATT_LAYER).value, at.selectbox(key=K.ATT_HEAD).value) == (layer, head)
    data, _ = attention_map(at)
    assert (data["layer"], data["head"]) == (layer, head)
    assert next(m.value for m in at.markdown if "Worth a look" in m.value).endswith("The map shows it.")
    assert not [b for b in at.button if b.key == K.ATT_SHOW_SUGGESTED]


def test_repeated_token_labels_are_made_distinct_invisibly():
    from gptviz.app.display import distinct_labels

    labels = ["the", "␣cat", ".", "␣the", "␣cat", ".", "␣cat"]
    out = distinct_labels(labels)
    assert len(set(out)) == len(out)
    assert [o.rstrip("\u200b") for o in out] == labels
    assert out[:4] == labels[:4] and out[4] == "␣cat\u200b" and out[6] == "␣cat\u200b\u200b"
