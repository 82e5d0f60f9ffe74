"""A model whose weights hold NaN (a diverged training run), or whose activations overflow with finite weights:
every page shows a clear message, never an exception box (issue 43, item 7)."""

from __future__ import annotations

import re

import pytest
import torch

from gptviz import GPT, PRESETS
from gptviz.app import jobs, model_service
from gptviz.app import keys as K
from gptviz.app.router import PAGE_LIST
from tests.support.pagetest import run_page

# pages that show the sidebar's model; the others (norms, training, timeline) show the bundled twins or runs
MODEL_PAGES = {"attention", "generation", "embeddings", "activations", "why", "units", "parameters", "explainers"}


def trained(run_id: str, edit) -> model_service.ModelSpec:
    """A tiny model, its weights edited, offered as a trained model (how a diverged run reaches the sidebar)."""
    model = GPT(PRESETS["tiny"], seed=0).eval()
    with torch.no_grad():
        edit(model)
    jobs.trained_models().add(run_id, model, None)
    return model_service.ModelSpec(K.SOURCE_TRAINED, run_id, "pre")


@pytest.fixture(scope="module")
def nan_spec():
    def poison(model):
        model.blocks[0].attn.c_attn.weight[3, :5] = float("nan")

    return trained("nan-run", poison)


def shown(at) -> str:
    """The page's messages as plain text (Markdown escapes removed)."""
    return re.sub(r"\\(.)", r"\1", " ".join(m.value for m in [*at.error, *at.warning, *at.info]))


@pytest.mark.slow
@pytest.mark.parametrize("page", [stem for _, stem, _, _ in PAGE_LIST])
def test_every_page_shows_a_message_for_nan_weights(page, nan_spec):
    at = run_page(page, spec=nan_spec)
    assert not at.exception, [e.value for e in at.exception]
    if page in MODEL_PAGES:
        assert "weights hold 5 NaN or infinite values" in shown(at), shown(at)
        assert "blocks.0.attn.c_attn.weight" in shown(at)


def test_the_refusal_is_remembered_not_loaded_again(nan_spec, monkeypatch):
    with pytest.raises(model_service.NonFiniteError, match="5 NaN"):
        model_service.load_model(nan_spec)
    monkeypatch.setattr(model_service, "_build_model", lambda *a: pytest.fail("built again"))
    with pytest.raises(model_service.NonFiniteError, match="5 NaN"):
        model_service.load_model(nan_spec)


@pytest.mark.slow
def test_counts_every_non_finite_value_across_chunks(monkeypatch):
    model = GPT(PRESETS["tiny"], seed=0)
    monkeypatch.setattr(
        model_service, "_CHUNK", 7
    )  # chunks far smaller than the tensors: none is missed or counted twice
    with torch.no_grad():
        model.wte.weight[0, 0] = float("inf")
        model.wte.weight[-1, -1] = float("-inf")
        model.ln_f.weight[2] = float("nan")
    bad, total, first = model_service.non_finite_weights(model)
    assert bad == 3 and first == "wte.weight"
    assert total == sum(t.numel() for t in [*model.parameters(), *model.buffers()] if t.is_floating_point())


def test_finite_weights_that_overflow_show_a_message_on_the_attention_page():
    def overflow(model):  # the final norm's gain and the (tied) unembedding at 1e38: the logits overflow to inf
        model.ln_f.weight.fill_(1e38)
        model.lm_head.weight.mul_(1e37)  # largest about 1e36: finite

    spec = trained("overflow-run", overflow)
    at = run_page("attention", spec=spec)
    assert not at.exception, [e.value for e in at.exception]
    assert "activations on this prompt are not finite (NaN or infinite from token 0" in shown(at), shown(at)
