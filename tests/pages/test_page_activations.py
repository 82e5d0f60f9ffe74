"""The Activations page (AppTest, tiny preset): residual norms, MLP, norm inputs, logit lens and head
detectors show values recomputed here from the capture; display widgets run no forward pass.

As in test_page_attention: the page file runs directly with the sidebar's two values (model_spec, prompt).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from gptviz import methods as analysis
from gptviz.app import keys as K
from gptviz.app import model_service, sidebar
from gptviz.app.services import activations
from gptviz.model.tokenizer import encode
from tests.support.pagetest import TINY, array, edge_prompts, figure, forward_calls, kept_and_charted, run_page

N_LAYERS, N_HEADS, N_CTX, D_FF = 2, 4, 128, 256
TABS = ["Residual stream", "MLP neurons", "Norm inputs", "Logit lens", "Head detectors", "Export"]


def page(prompt: str, spec: model_service.ModelSpec = TINY, **state) -> AppTest:
    return run_page("activations", prompt, spec, **state)


def capture_for(prompt: str, spec: model_service.ModelSpec = TINY):
    """The page's own capture (same hook names, same order: a cache hit)."""
    ids = tuple(encode(prompt)[-N_CTX:])
    logits, cache = model_service.capture_cache(spec, ids, activations.hook_names(N_LAYERS))
    return ids, (logits[0], cache.prompt(0))  # the one prompt of the [1, ...] capture


@pytest.mark.slow
def test_default_prompt_every_view_shows_real_values():
    at = page(sidebar.DEFAULT_PROMPT)
    assert not at.exception and not at.error
    assert [t.label for t in at.tabs] == TABS
    assert len(at.get("plotly_chart")) == 8
    ids, (logits, cache) = capture_for(sidebar.DEFAULT_PROMPT)
    T = len(ids)
    # residual stream: the norms of the captured tensors
    heat = figure(at, "Residual-stream norm")
    np.testing.assert_allclose(
        array(heat["data"][0]["z"]), torch.linalg.norm(cache.resid_stream(), dim=-1).numpy(), rtol=1e-5
    )
    lines = figure(at, "Norms per layer")
    attn = torch.linalg.norm(cache.stack("hook_attn_out"), dim=-1)
    np.testing.assert_allclose(array(lines["data"][1]["y"]), attn[:, T - 1].numpy(), rtol=1e-5)  # focus: last
    # MLP: the histogram counts every value of every layer
    hist = figure(at, "Distribution of MLP activations")
    counts = array(hist["data"][0]["customdata"])[..., 2]
    assert counts.shape[0] == N_LAYERS and (counts.sum(1) == T * D_FF).all()
    bars = figure(at, "Most active neurons")
    post = cache.stack("mlp.hook_post")[:, T - 1]
    np.testing.assert_allclose(
        sorted(array(bars["data"][0]["x"]), reverse=True), np.sort(post.numpy().ravel())[::-1][:10], rtol=1e-6
    )
    # logit lens: the last row is the model's real output
    lens = figure(at, "Logit lens")
    z = array(lens["data"][0]["z"])
    assert z.shape == (N_LAYERS + 1, T)
    np.testing.assert_allclose(z[-1], logits.softmax(-1).max(-1).values.numpy(), rtol=1e-5)
    # head detectors: previous-token scores of the prompt, induction on a repeated sequence
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    det = [f for f in figs if len(f["data"]) == 3 and f["data"][0].get("name") == "previous"][0]
    np.testing.assert_allclose(
        array(det["data"][0]["z"]), analysis.previous_token_scores(cache.patterns()).numpy(), rtol=1e-5
    )
    model = model_service.load_model(TINY)
    np.testing.assert_allclose(
        array(det["data"][2]["z"]), analysis.induction_scores(model, 50).numpy(), rtol=1e-5, atol=1e-7
    )
    assert any("Previous-token" in m.value for m in at.markdown)
    assert at.download_button(key=K.ACT_NPZ).label == "Capture as .npz"


@pytest.mark.slow
def test_display_widgets_run_no_forward_pass():
    prompt = "Activations page: a prompt only this test uses, with a repeat: a prompt."
    at = page(prompt)
    assert not at.exception
    before = forward_calls()
    at.selectbox(key=K.ACT_FOCUS).select(3).run()
    at.toggle(key=K.ACT_RESID_AVG).set_value(True).run()
    at.slider(key=K.ACT_TOPK).set_value(20).run()
    at.checkbox(key=K.ACT_NPZ_ATTN).set_value(False).run()
    assert not at.exception
    assert forward_calls() == before
    ids, (_, cache) = capture_for(prompt)
    lines = figure(at, "Norms per layer (mean over all positions)")
    np.testing.assert_allclose(
        array(lines["data"][0]["y"]), torch.linalg.norm(cache.resid_stream(), dim=-1).mean(1).numpy(), rtol=1e-5
    )
    assert len(figure(at, "Most active neurons")["data"][0]["x"]) == 20
    final = figure(at, "How early the final prediction appears")
    assert final["data"][0]["name"].startswith("at 3:")


@pytest.mark.slow
def test_post_norm_rmsnorm_and_norm_inputs():
    spec = TINY._replace(norm="post")
    at = page("It is the east, and Juliet is the sun.", spec=spec)
    assert not at.exception and not at.error
    assert any("Post-norm" in c.value for c in at.caption)
    ids, (_, cache) = capture_for("It is the east, and Juliet is the sun.", spec)
    stats = figure(at, "What enters each norm")
    x = cache["blocks.1.hook_resid_mid"] + cache["blocks.1.hook_mlp_out"]  # post-norm ln_2 input
    np.testing.assert_allclose(array(stats["data"][1]["y"])[3], x.var(-1, unbiased=False).mean().item(), rtol=1e-4)


@pytest.mark.slow
@edge_prompts("empty", "one-token", "longer-than-context", "emoji-cjk")
def test_edge_prompts(prompt):
    at = page(prompt)
    kept = kept_and_charted(at, prompt, N_CTX)
    if not kept:
        return
    if len(kept) == 1:
        assert any("at least two tokens" in i.value for i in at.info)
    z = array(figure(at, "Logit lens")["data"][0]["z"])
    assert z.shape == (N_LAYERS + 1, len(kept))


@pytest.mark.slow
def test_focus_beyond_a_shorter_prompt_falls_back_to_the_last_token():
    at = page("Three small tokens", act_focus=40)
    assert not at.exception
    T = len(encode("Three small tokens"))
    assert at.selectbox(key=K.ACT_FOCUS).value == T - 1


def test_an_empty_capture_is_explained_not_a_traceback(monkeypatch):
    """After gptviz's code is reloaded in a running server, a cached model built by the old code records
    nothing; the page must say so."""
    from gptviz.model.hooks import ActivationCache

    monkeypatch.setattr(
        model_service,
        "capture_cache",
        lambda spec, ids, names=None: (torch.zeros(1, len(ids), 5), ActivationCache({}, N_LAYERS)),
    )
    at = page("Hello world")
    assert not at.exception
    assert "without the hook points it asked for" in at.error[0].value


@pytest.mark.slow
def test_a_prompt_change_with_the_old_focus_label_kept_falls_back_to_the_last_token():
    """Seen in the browser: after a prompt change the focus selectbox's stored value was the old option's label
    (a str), and comparing it with the token count raised TypeError."""
    from tests.support.pagetest import run_page

    at = run_page("activations", "one two three four five six", act_focus="5 ␣six")
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key=K.ACT_FOCUS).value == len(at.selectbox(key=K.ACT_FOCUS).options) - 1
    at = run_page("activations", "a b", act_focus=5)  # past the end of a shorter prompt
    assert not at.exception and at.selectbox(key=K.ACT_FOCUS).value == 1
