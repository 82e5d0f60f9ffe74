"""The Embeddings page (AppTest, tiny preset): real values from the capture and the model's weights.

As in test_page_attention: the page file runs directly with the two values the sidebar provides
(model_spec, prompt); AppTest does not keep app.py's sidebar on reruns after a page switch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from gptviz import GPT, GPTConfig
from gptviz import methods as analysis
from gptviz.app import display, jobs, model_service, sidebar
from gptviz.app import keys as K
from gptviz.model import tokenizer
from gptviz.model.tokenizer import encode
from tests.support.pagetest import (
    TINY,
    array,
    edge_prompts,
    figures,
    forward_calls,
    kept_of_edge_prompt,
    run_page,
    title_of,
)

N_CTX, D_MODEL = 128, 64
TITLES = [
    "Cosine similarity of the prompt's token embeddings",
    "Cosine similarity between all 128 position",
    "Token embeddings, first two principal components",
]


def page(prompt: str, spec: model_service.ModelSpec = TINY, **state) -> AppTest:
    return run_page("embeddings", prompt, spec, **state)


def capture_for(prompt: str) -> dict[str, torch.Tensor]:
    ids = tuple(encode(prompt)[-N_CTX:])
    _, store = model_service.get_capture(TINY, ids, ("hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"))
    return {name: t[0] for name, t in store.items()}  # the one prompt of the [1, ...] capture


@pytest.mark.slow
def test_default_prompt_shows_the_capture():
    at = page(sidebar.DEFAULT_PROMPT)
    assert not at.exception and not at.error
    figs = figures(at)
    assert len(figs) == 4
    for fig, start in zip(figs[1:], TITLES, strict=False):
        assert title_of(fig).startswith(start)
    panels = figs[0]["data"]
    assert len(panels) == 3
    cache = capture_for(sidebar.DEFAULT_PROMPT)
    T = len(encode(sidebar.DEFAULT_PROMPT))
    tok, total = cache["hook_embed"], cache["blocks.0.hook_resid_pre"]
    model = model_service.load_model(TINY)
    np.testing.assert_allclose(array(panels[0]["z"]), tok[:, :64].numpy(), rtol=1e-6)
    np.testing.assert_allclose(array(panels[1]["z"]), model.wpe.weight[:T, :64].detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(array(panels[2]["z"]), total[:, :64].numpy(), rtol=1e-6)
    # token similarity: the cosine of the captured token embeddings
    sim = array(figs[1]["data"][0]["z"])
    np.testing.assert_allclose(sim, analysis.cosine_similarity_matrix(tok).numpy(), rtol=1e-5, atol=1e-6)
    # position similarity: every learned position
    pos = array(figs[2]["data"][0]["z"])
    assert pos.shape == (N_CTX, N_CTX)
    np.testing.assert_allclose(
        pos, analysis.cosine_similarity_matrix(model.wpe.weight.detach()).numpy(), rtol=1e-5, atol=1e-6
    )
    # PCA: the prompt's distinct tokens, against a sample of the vocabulary
    vocab, prompt_trace = figs[3]["data"]
    assert len(array(prompt_trace["x"])) == len(set(encode(sidebar.DEFAULT_PROMPT)))
    assert len(array(vocab["x"])) + len(array(prompt_trace["x"])) >= 2000
    data_buttons = [b for b in at.get("download_button") if b.proto.label != "Interactive HTML"]
    assert len(data_buttons) == 4  # beside each figure's own HTML download


@pytest.mark.slow
def test_dimension_range_slider_changes_the_panels_without_a_forward_pass():
    prompt = "Embeddings page: a prompt only this test uses."
    at = page(prompt)
    before = forward_calls()
    at.slider(key=K.EMB_DIMS).set_value((10, 30)).run()
    assert not at.exception
    panels = figures(at)[0]["data"]
    assert [int(x) for x in array(panels[0]["x"])] == list(range(10, 30))
    np.testing.assert_allclose(array(panels[0]["z"]), capture_for(prompt)["hook_embed"][:, 10:30].numpy(), rtol=1e-6)
    at.select_slider(key=K.EMB_PCA_N).set_value(500).run()
    assert not at.exception
    assert forward_calls() == before


def test_post_norm_model_runs():
    at = page("To be, or not to be", spec=TINY._replace(norm="post"))
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 4


@pytest.mark.slow
@edge_prompts("empty", "one-token", "longer-than-context", "emoji-cjk")
def test_edge_prompts(prompt):
    at = page(prompt)
    kept = kept_of_edge_prompt(at, prompt, N_CTX)
    figs = figures(at)
    if not kept:
        # the model's own structure still shows: position similarity and the vocabulary PCA
        assert [title_of(f)[:30] for f in figs] == [TITLES[1][:30], TITLES[2][:30]]
        assert len(array(figs[1]["data"][1]["x"])) == 0
        return
    assert len(figs) == 4
    assert array(figs[0]["data"][0]["z"]).shape == (len(kept), min(64, D_MODEL))
    assert array(figs[1]["data"][0]["z"]).shape == (len(kept), len(kept))


@pytest.mark.slow
def test_dimension_range_edges():
    at = page("Hello there", emb_dims=(5, 5))
    assert not at.exception
    assert any("at least one dimension" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 3  # the other views stay
    # a model wider than the 256 dimensions drawn at a time (registered as a "trained" model: cheap to build)
    torch.manual_seed(0)
    wide = GPT(GPTConfig(vocab_size=50257, n_ctx=16, d_model=320, n_layers=1, n_heads=4)).eval()
    jobs.trained_models().add("test-embeddings-wide", wide, owner=None)
    spec = model_service.ModelSpec(K.SOURCE_TRAINED, "test-embeddings-wide", "pre")
    at = page("Hello there", spec=spec, emb_dims=(0, 320))
    assert not at.exception and not at.error
    assert any("the first 256 of the chosen range" in c.value for c in at.caption)
    assert len(array(figures(at)[0]["data"][0]["x"])) == 256


def test_an_empty_capture_is_explained_not_a_traceback(monkeypatch):
    from gptviz.model.hooks import ActivationCache

    empty = lambda spec, ids, names=None: (torch.zeros(1, len(ids), 5), ActivationCache({}, 2))  # noqa: E731
    monkeypatch.setattr(model_service, "capture_cache", empty)
    at = page("Hello world")
    assert not at.exception
    assert "without the hook points it asked for" in at.error[0].value


def test_fit_vocabulary_replaces_only_ids_past_the_model():
    assert tokenizer.fit_vocabulary([15496, 47299, 39999, 40000], 40000) == ([15496, 39999, 39999, 39999], 2)
    assert tokenizer.fit_vocabulary([1, 2], 50257) == ([1, 2], 0)


@pytest.mark.slow
def test_a_gpt2_id_past_gpt1s_vocabulary_runs_and_is_explained():
    """'Daytona' is GPT-2 id 47299, past the GPT-1 preset's 40,000 ids: the page must run, not fail."""
    assert 47299 in encode(" Daytona")
    at = run_page(
        "embeddings", prompt="Drive to Daytona", spec=model_service.ModelSpec(K.SOURCE_PRESET, "gpt1", "post")
    )
    assert not at.exception and not at.error
    assert any("past this model's 40,000-id vocabulary" in c.value for c in at.caption)


def test_a_hub_id_with_markup_is_shown_as_literal_text(monkeypatch):
    """The folder / Hub id is the visitor's text: markdown in it (bold, maths, an image the browser would
    fetch) must reach the page escaped, never rendered."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "![p](http://host/p.png) **x** $x^2$"
    at = run_page("embeddings", spec=model_service.ModelSpec(K.SOURCE_PRETRAINED, name, "pre"))
    assert not at.exception and at.error
    shown = at.error[0].value
    assert "![p](" not in shown and "**x**" not in shown and "$x^2$" not in shown
    assert display.md_text(name) in shown
