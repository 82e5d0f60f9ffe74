"""The QK decomposition of an attention score (issue 58): its terms sum to the real pre-softmax score the model
captured, its sources are named as in direct logit attribution, a one-layer cell by hand, and bad cells refused."""

from __future__ import annotations

import math

import pytest
import torch

from gptviz import capture
from gptviz.methods.graph_qk import qk_decomposition
from tests.support.graph_reference import WIRING_IDS, WIRINGS, prompt, unit_model
from tests.support.models import build

CELLS = [(0, 1, 5, 2), (1, 3, 6, 0), (1, 0, 4, 4), (0, 2, 0, 0)]


@pytest.mark.parametrize("kw", WIRINGS, ids=WIRING_IDS)
def test_the_terms_sum_to_the_score_the_model_computed(kw):
    model, ids = unit_model(**kw), prompt()
    _, cache = capture(model, [ids], [f"blocks.{layer}.attn.hook_attn_scores" for layer in range(2)])
    for layer, head, query, key in CELLS:
        qk = qk_decomposition(model, ids, layer, head, query, key)
        real = float(cache[f"blocks.{layer}.attn.hook_attn_scores"][0, head, query, key])
        assert qk.score == pytest.approx(real, abs=1e-5)
        assert float(qk.terms.double().sum()) == pytest.approx(real, abs=1e-4 * max(1.0, abs(real)))
        assert qk.terms.shape == (len(qk.query_sources), len(qk.key_sources))
        assert qk.terms.abs().max() > 1e-3  # something to explain


def test_sources_are_named_as_in_direct_logit_attribution():
    qk = qk_decomposition(unit_model(), prompt(), 1, 2, 6, 3)
    assert qk.query_sources == [
        "embeddings",
        "L0H0",
        "L0H1",
        "L0H2",
        "L0H3",
        "L0 attn bias",
        "L0 MLP",
        "norm bias",
        "query bias",
    ]
    assert qk.key_sources == qk.query_sources[:-1] + ["key bias"]
    first = qk_decomposition(unit_model(norm="post"), prompt(), 0, 0, 3, 1)
    assert first.query_sources == ["embeddings", "norm bias", "query bias"]  # no earlier norm: its row is zero
    assert first.terms[1].abs().max() == 0
    plain = qk_decomposition(unit_model(norm_type="rmsnorm", qkv_bias=False), prompt(), 1, 0, 6, 3)
    assert (
        plain.query_sources
        == plain.key_sources
        == ["embeddings", "L0H0", "L0H1", "L0H2", "L0H3", "L0 attn bias", "L0 MLP"]
    )  # no betas, no q/k biases


@torch.no_grad()
def test_a_one_layer_cell_by_hand():
    """Layer 0 of a pre-norm model: the query is (embedding through ln_1 at its frozen scale) + beta's part + the
    query bias; terms[embeddings][embeddings] is those two embeddings' product."""
    model, ids = unit_model(n_layers=1), prompt(6)
    cfg, (i, j, h) = model.config, (4, 1, 2)
    _, c = capture(model, [ids], ["blocks.0.hook_resid_pre"])
    x = c["blocks.0.hook_resid_pre"][0]
    ln = model.blocks[0].ln_1
    scale = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + cfg.ln_eps)
    normed = (x - x.mean(-1, keepdim=True)) * scale * ln.weight
    dh, d = cfg.d_head, cfg.d_model
    Wq, Wk = (
        model.blocks[0].attn.c_attn.weight[h * dh : (h + 1) * dh],
        model.blocks[0].attn.c_attn.weight[d + h * dh : d + (h + 1) * dh],
    )
    bq = model.blocks[0].attn.c_attn.bias[h * dh : (h + 1) * dh]
    qk = qk_decomposition(model, ids, 0, h, i, j)
    assert float(qk.terms[0, 0]) == pytest.approx(float((Wq @ normed[i]) @ (Wk @ normed[j])) / math.sqrt(dh), rel=1e-4)
    assert float(qk.terms[2, 0]) == pytest.approx(float(bq @ (Wk @ normed[j])) / math.sqrt(dh), rel=1e-4)
    assert float(qk.terms[1, 1]) == pytest.approx(float((Wq @ ln.bias) @ (Wk @ ln.bias)) / math.sqrt(dh), rel=1e-4)


def test_top_terms_are_the_largest_by_size():
    qk = qk_decomposition(unit_model(), prompt(), 1, 1, 6, 2)
    top = qk.top_terms(3)
    assert len(top) == 3 and abs(top[0][2]) >= abs(top[1][2]) >= abs(top[2][2])
    assert abs(top[0][2]) == float(qk.terms.abs().max())


@pytest.mark.parametrize(
    "cell, message",
    [
        ((0, 0, 2, 3), "key 3 is above the diagonal: query 2 cannot attend"),
        ((2, 0, 2, 1), r"layer 2 is out of range: the model has 2 layers \(0..1\)"),
        ((0, 4, 2, 1), r"head 4 is out of range: the model has 4 heads \(0..3\)"),
        ((0, 0, 7, 1), r"query 7 is out of range: the prompt has 7 positions \(0..6\)"),
        ((0, 0, 3, -1), r"key -1 is out of range"),
    ],
)
def test_a_bad_cell_is_refused_in_words(cell, message):
    with pytest.raises(ValueError, match=message):
        qk_decomposition(build(), prompt(), *cell)


def test_an_empty_prompt_is_refused():
    with pytest.raises(ValueError, match="empty"):
        qk_decomposition(build(), [], 0, 0, 0, 0)
