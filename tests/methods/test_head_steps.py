"""One head's arithmetic recomputed from a capture equals what the forward pass captured, step by step; value-
weighted attention and attention sinks recomputed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from gptviz import capture
from gptviz.methods.head_steps import (
    first_token_chance,
    first_token_scores,
    head_hook_names,
    head_steps,
    row_shares,
    value_output_norms,
    value_weighted,
)
from tests.support.models import build, random_ids


def captured(model, ids, layer):
    _, cache = capture(model, ids[None], list(head_hook_names(layer, model.config.norm)))
    return {name: value[0] for name, value in cache.items()}


@pytest.mark.parametrize("norm, qkv_bias", [("pre", True), ("post", True), ("pre", False)])
def test_every_step_equals_the_captured_values(norm, qkv_bias):
    model = build(norm=norm, qkv_bias=qkv_bias)
    ids = random_ids(12)
    layer, T = 1, 12
    cache = captured(model, ids, layer)
    a = f"blocks.{layer}.attn"
    outs = []
    for head in range(model.config.n_heads):
        for query in (0, 5, T - 1):
            s = head_steps(model, cache, layer, head, query)
            assert s.x.shape == (T, 32) and s.w_q.shape == (32, 8) and s.w_o.shape == (8, 32)
            assert torch.allclose(s.q, cache[f"{a}.hook_q"][query, head], atol=1e-6)
            assert torch.allclose(s.k, cache[f"{a}.hook_k"][: query + 1, head], atol=1e-6)
            assert torch.allclose(s.v, cache[f"{a}.hook_v"][: query + 1, head], atol=1e-6)
            assert torch.allclose(s.scores, s.dots / math.sqrt(8)) and s.scale == pytest.approx(1 / math.sqrt(8))
            assert torch.isinf(s.masked[query + 1 :]).all() and torch.equal(s.masked[: query + 1], s.scores)
            pattern_row = cache[f"{a}.hook_pattern"][head, query]
            assert torch.allclose(s.weights, pattern_row[: query + 1], atol=1e-6)
            assert float(pattern_row[query + 1 :].abs().sum()) == 0.0
            assert torch.allclose(s.z, cache[f"{a}.hook_z"][query, head], atol=1e-6)
        outs.append(head_steps(model, cache, layer, head, T - 1).out)
    # the heads' outputs plus the one output bias are the layer's attention output
    last = torch.stack(outs).sum(0) + s.out_bias
    assert torch.allclose(last, cache[f"blocks.{layer}.hook_attn_out"][T - 1], atol=1e-5)


def test_post_norm_reads_the_residual_stream_and_pre_norm_the_normalised_input():
    assert head_hook_names(2, "pre")[0] == "blocks.2.ln_1.hook_normalized"
    assert head_hook_names(2, "post")[0] == "blocks.2.hook_resid_pre"


def test_bad_head_or_query_is_a_clear_error():
    model = build()
    cache = captured(model, random_ids(5), 0)
    with pytest.raises(ValueError, match="no head 0.4: the model has 2 layers of 4 heads"):
        head_steps(model, cache, 0, 4, 0)
    with pytest.raises(ValueError, match="query 5 is outside the prompt's 5 tokens"):
        head_steps(model, cache, 0, 0, 5)


def test_value_weighted_attention_by_hand():
    model = build()
    ids = random_ids(9)
    cache = captured(model, ids, 0)
    v, pattern = cache["blocks.0.attn.hook_v"], cache["blocks.0.attn.hook_pattern"]
    norms = value_output_norms(model, 0, v)
    W = model.blocks[0].attn.c_proj.weight.detach()  # [out, in]
    for h in range(4):
        for j in (0, 4, 8):
            by_hand = W[:, h * 8 : (h + 1) * 8] @ v[j, h]  # token j's value through head h's part of W_O
            assert norms[h, j].item() == pytest.approx(by_hand.norm().item(), rel=1e-5)
    vw = value_weighted(model, 0, v, pattern)
    i, j, h = 7, 3, 2
    assert vw[h, i, j].item() == pytest.approx(pattern[h, i, j].item() * norms[h, j].item(), rel=1e-5)
    assert float(vw[h, 2, 3:].abs().sum()) == 0.0  # the future stays at zero
    shares = row_shares(vw)
    assert torch.allclose(shares.sum(-1), torch.ones(4, 9), atol=1e-5)


def test_a_tiny_value_makes_a_heavy_weight_small():
    pattern = torch.tensor([[[1.0, 0.0], [0.9, 0.1]]])  # one head; query 1 puts 0.9 on key 0
    model = build(n_heads=1, d_model=8)
    v = torch.zeros(2, 1, 8)
    v[0, 0, 0], v[1, 0, 0] = 1e-3, 1.0  # key 0's value is tiny
    shares = row_shares(value_weighted(model, 0, v, pattern))
    assert shares[0, 1, 0].item() < 0.05 and shares[0, 1, 1].item() > 0.95


def test_first_token_scores_and_their_chance():
    T = 6
    uniform = torch.tril(torch.ones(T, T))
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]
    assert first_token_scores(uniform).item() == pytest.approx(first_token_chance(T))
    assert first_token_chance(T) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6) / 5)
    sink = torch.zeros(1, 1, T, T)
    sink[..., 0] = 1.0
    assert first_token_scores(sink).item() == 1.0
    with pytest.raises(ValueError, match="at least two tokens"):
        first_token_chance(1)


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_values_recomputed_from_the_attention_input_equal_the_captured_ones(qkv_bias):
    from gptviz.methods.head_steps import values_from_input

    model = build(qkv_bias=qkv_bias)
    cache = captured(model, random_ids(10), 1)
    v = values_from_input(model, 1, cache["blocks.1.ln_1.hook_normalized"])
    assert torch.allclose(v, cache["blocks.1.attn.hook_v"], atol=1e-6)
