"""The Explainers page (AppTest): activation curves equal torch's functions, the causal mask is the
model's, and the block diagram of the sidebar's wiring is marked."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from streamlit.testing.v1 import AppTest

from gptviz.app import keys as K
from gptviz.app import model_service, sidebar
from gptviz.model.tokenizer import encode, token_labels
from tests.support.pagetest import TINY, array, edge_prompts, figures, run_page, title_of


def drawn_labels(axis: dict) -> list[str]:
    """A token category axis's labels as drawn (repeats are told apart by zero-width spaces, which draw as nothing)."""
    return [c.replace("\u200b", "") for c in axis["categoryarray"]]


def page(prompt: str = sidebar.DEFAULT_PROMPT, spec: model_service.ModelSpec | None = TINY, **state) -> AppTest:
    return run_page("explainers", prompt, spec, **state)


@pytest.mark.slow
def test_activation_functions_are_torchs_and_the_models_is_marked():
    at = page()
    assert not at.exception and not at.error
    figs = figures(at)
    assert len(figs) == 4
    curves = figs[0]["data"]
    assert len(curves) == 7
    x = torch.tensor(array(curves[0]["x"]), dtype=torch.float64)
    assert float(x[0]) == -4.0 and float(x[-1]) == 4.0
    by_name = {c["name"]: c for c in curves if c.get("showlegend") is not False}
    own = [n for n in by_name if "this model" in n]
    assert own == ["GELU (exact, erf) — this model"]  # the tiny preset uses exact GELU
    np.testing.assert_allclose(array(by_name[own[0]]["y"]), F.gelu(x).numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        array(by_name["GELU (tanh approx.)"]["y"]), F.gelu(x, approximate="tanh").numpy(), rtol=1e-12, atol=1e-15
    )
    np.testing.assert_allclose(array(by_name["ReLU"]["y"]), F.relu(x).numpy())
    gelu_derivative = array(curves[1]["y"])  # autograd; closed form Φ(x) + x·φ(x)
    closed = 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-(x**2) / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(gelu_derivative, closed.numpy(), rtol=1e-10, atol=1e-12)
    shapes = figs[0]["layout"]["shapes"]
    assert len(shapes) == 4  # two regions (x = 0 excluded), on two panels
    assert any("Shaded: where the three functions differ by more than 0.01" in c.value for c in at.caption)


@pytest.mark.slow
def test_gpt2_preset_highlights_tanh_gelu():
    at = page(spec=model_service.ModelSpec(K.SOURCE_PRESET, "gpt2-small", "pre"))
    assert not at.exception
    names = [c["name"] for c in figures(at)[0]["data"] if c.get("showlegend") is not False]
    assert "GELU (tanh approx.) — this model" in names


@pytest.mark.slow
def test_causal_mask_slider_and_prompt_labels():
    prompt = "To be, or not to be: that is the question."
    at = page(prompt)
    at.slider(key=K.EXP_MASK_N).set_value(5).run()
    assert not at.exception
    mask = [f for f in figures(at) if title_of(f).startswith("Causal mask")][0]
    z = array(mask["data"][0]["z"])
    np.testing.assert_array_equal(z, np.tril(np.ones((5, 5))))
    assert "15 of 25 pairs allowed" in title_of(mask)
    assert drawn_labels(mask["layout"]["yaxis"]) == token_labels(encode(prompt)[:5])


@pytest.mark.slow
@edge_prompts("empty", "one-token", "emoji-cjk")
def test_edge_prompts(prompt):
    at = page(prompt)
    assert not at.exception and not at.error
    n = at.slider(key=K.EXP_MASK_N).value
    assert n == min(8, max(1, len(encode(prompt))))
    mask = [f for f in figures(at) if title_of(f).startswith("Causal mask")][0]
    assert array(mask["data"][0]["z"]).shape == (n, n)
    at.slider(key=K.EXP_MASK_N).set_value(20).run()  # longer than the prompt: positions
    mask = [f for f in figures(at) if title_of(f).startswith("Causal mask")][0]
    assert drawn_labels(mask["layout"]["yaxis"])[:2] == ["t0", "t1"]


@pytest.mark.slow
def test_block_diagrams_mark_the_sidebar_wiring():
    for norm in ("pre", "post"):
        at = page(spec=TINY._replace(norm=norm))
        assert not at.exception
        blocks = [title_of(f) for f in figures(at) if "block (GPT" in title_of(f)]
        marked = [t for t in blocks if "the sidebar's model" in t]
        assert len(blocks) == 2 and len(marked) == 1
        assert marked[0].startswith("Pre-norm" if norm == "pre" else "Post-norm")


def test_empty_x_range_is_explained():
    at = page(exp_range=(1.0, 1.0))
    assert not at.exception
    assert any("range with some width" in i.value for i in at.info)
    assert len(figures(at)) == 3


@pytest.mark.slow
def test_without_a_model_nothing_is_highlighted():
    at = page(spec=None)
    assert not at.exception
    names = [c["name"] for c in figures(at)[0]["data"] if c.get("showlegend") is not False]
    assert not any("this model" in n for n in names)
