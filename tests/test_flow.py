"""The information-flow graph (gptviz.flow): contributions that sum to the captured stream, shares that sum to 1,
a graph whose every edge reaches the threshold and leads to the output, and the induction route on the bundled
model."""
from __future__ import annotations

import pytest
import torch

from conftest import SMALL, build, random_ids
from gptviz import GPT, capture, load_pretrained
from gptviz.figures.flow import flow_figure
from gptviz.flow import attention_contributions, head_writes, information_flow, proximity
from gptviz.tokenizer import encode, token_labels


@pytest.fixture
def mixing() -> GPT:
    """Xavier-uniform weights: sub-layers write as much as the skip carries (GPT-2's 0.02 init leaves the graph
    nearly all skip), so the graphs below have attention and MLP edges to check."""
    return GPT(SMALL, init="xavier", seed=0).eval()


def test_attention_contributions_and_skip_sum_to_the_captured_stream(model):
    """resid_mid[i] = resid_pre[i] + sum_j c[i, j] + b_O, for every layer and query: the split is exact."""
    ids = random_ids(10, seed=4)
    names = [f"blocks.{l}.{n}" for l in range(SMALL.n_layers)
             for n in ("hook_resid_pre", "hook_resid_mid", "attn.hook_pattern", "attn.hook_v")]
    _, cache = capture(model, ids, names)
    for layer in range(SMALL.n_layers):
        writes = head_writes(model, layer, cache[f"blocks.{layer}.attn.hook_v"][0])
        contrib = attention_contributions(cache[f"blocks.{layer}.attn.hook_pattern"][0], writes, list(range(10)))
        rebuilt = cache[f"blocks.{layer}.hook_resid_pre"][0] + contrib.sum(1) + model.blocks[layer].attn.c_proj.bias
        torch.testing.assert_close(rebuilt, cache[f"blocks.{layer}.hook_resid_mid"][0], atol=1e-5, rtol=1e-5)
        # causal: a query gets nothing from later keys
        assert contrib[2, 3:].abs().max() == 0


def test_proximity_shares_are_normalised_and_favour_the_part_closest_to_the_sum():
    total = torch.tensor([1.0, 1.0])
    parts = torch.tensor([[0.9, 1.0], [0.1, 0.0], [-1.0, 0.0]])      # a part pointing away gets nothing
    shares = proximity(parts, total)
    assert float(shares.sum()) == pytest.approx(1.0)
    assert float(shares[2]) == 0 and shares[0] > shares[1] > 0
    # |y|_1 = 2; |y - c|_1 = 0.1, 1.9, 3.0 -> proximities 1.9, 0.1, 0 -> shares 0.95, 0.05, 0
    torch.testing.assert_close(shares, torch.tensor([0.95, 0.05, 0.0]))


@pytest.mark.parametrize("threshold", [0.02, 0.1, 0.3])
def test_every_kept_edge_reaches_the_threshold_and_leads_to_the_output(mixing, threshold):
    ids = random_ids(12, seed=7)
    graph = information_flow(mixing, ids, threshold)
    assert graph.edges and all(threshold <= e.importance <= 1 + 1e-6 for e in graph.edges)
    if threshold < 0.1:
        assert len({e.source for e in graph.edges if e.kind == "attention"}) > 2   # the graph spreads
    assert all(e.source <= e.target for e in graph.edges)                      # causal
    # walk down from the output: every edge's target is reached by an edge above it, or is the output itself
    reached = {(SMALL.n_layers - 1, "mlp", graph.position)}
    for layer in reversed(range(SMALL.n_layers)):
        for e in graph.edges:
            if e.layer == layer and e.sublayer == "mlp":
                assert (layer, "mlp", e.target) in reached, e
                reached.add((layer, "attn", e.target))
        for e in graph.edges:
            if e.layer == layer and e.sublayer == "attn":
                assert (layer, "attn", e.target) in reached, e
                reached.add((layer - 1, "mlp", e.source))


def test_each_sum_s_shares_add_up_to_one_at_a_tiny_threshold(mixing):
    """At threshold ~0 every part with any share is kept: the output's MLP sum (skip + MLP) is exactly 1."""
    graph = information_flow(mixing, random_ids(6, seed=1), threshold=1e-9)
    top = [e for e in graph.edges if e.layer == SMALL.n_layers - 1 and e.sublayer == "mlp"]
    assert {e.kind for e in top} <= {"residual", "mlp"}
    assert sum(e.importance for e in top) == pytest.approx(1.0, abs=1e-5)
    # the last attention sum also holds a share for the output bias, which is no edge: its edges add up to <= 1
    last_attn = [e for e in graph.edges if e.layer == SMALL.n_layers - 1 and e.sublayer == "attn"]
    assert 0.5 < sum(e.importance for e in last_attn) <= 1 + 1e-5


def test_a_larger_threshold_keeps_a_subset_of_the_edges(mixing):
    ids = random_ids(12, seed=9)
    low, high = information_flow(mixing, ids, 0.05), information_flow(mixing, ids, 0.2)
    assert set(high.edges) <= set(low.edges) and len(high.edges) < len(low.edges)


def test_bad_requests_raise_clearly(post_model, model):
    with pytest.raises(ValueError, match="pre-norm"):
        information_flow(post_model, random_ids(5), 0.05)
    for bad in (0, 1, -0.1, 2.0):
        with pytest.raises(ValueError, match="threshold"):
            information_flow(model, random_ids(5), bad)


def test_the_bundled_model_routes_the_repeat_through_its_induction_circuit():
    """A B C D E F G H A B C: the last C's prediction (D) reads D's stream at layer 1 (induction), and D's stream
    read C's at layer 0 (the previous-token head): the two-step route a copy needs."""
    model = load_pretrained("shakespeare-pre")
    ids = encode("A B C D E F G H A B C")
    graph = information_flow(model, torch.tensor([ids]), 0.04)
    attention = {(e.layer, e.source, e.target): e.importance for e in graph.edges if e.kind == "attention"}
    assert attention[(1, 3, 10)] > 0.5                     # the last ' C' reads ' D', after the earlier ' C'
    assert attention[(0, 2, 3)] > 0.3                      # ' D' reads the ' C' before it
    assert max(attention, key=attention.get) == (1, 3, 10)
    fig = flow_figure(graph, token_labels(ids), n_heads=model.config.n_heads, title="flow")
    hover = [row for trace in fig.data if trace.customdata is not None and trace.mode == "markers"
             and trace.legendgroup == "attention" for row in trace.customdata]
    assert [1, "attention", "'␣D'", 3, "'␣C'", 10] in [list(r[:6]) for r in hover]


def test_an_attention_edges_largest_head_is_recomputed_from_the_weight_slices(mixing):
    """Each head's write along an edge, pattern[h, i, j] * v[j, h] @ W_O[:, h's slice], recomputed here: the heads'
    writes sum to the edge's contribution, and the edge names the largest and its share of the L1 norms."""
    ids = random_ids(10, seed=3)
    graph = information_flow(mixing, ids, 0.05)
    names = [f"blocks.{l}.attn.{n}" for l in range(SMALL.n_layers) for n in ("hook_pattern", "hook_v")]
    _, cache = capture(mixing, ids, names)
    dh = SMALL.d_head
    checked = 0
    for e in (e for e in graph.edges if e.kind == "attention"):
        w = mixing.blocks[e.layer].attn.c_proj.weight.detach()
        v = cache[f"blocks.{e.layer}.attn.hook_v"][0, e.source]                     # [heads, d_head]
        p = cache[f"blocks.{e.layer}.attn.hook_pattern"][0, :, e.target, e.source]   # [heads]
        per_head = torch.stack([p[h] * (v[h] @ w[:, h * dh:(h + 1) * dh].t()) for h in range(SMALL.n_heads)])
        norms = per_head.abs().sum(-1)
        assert e.head == int(norms.argmax()) and e.head_share == pytest.approx(float(norms.max() / norms.sum()),
                                                                               rel=1e-4)
        pattern = cache[f"blocks.{e.layer}.attn.hook_pattern"][0]
        edge = attention_contributions(pattern, head_writes(mixing, e.layer, cache[f"blocks.{e.layer}.attn.hook_v"][0]),
                                       [e.target])[0, e.source]
        torch.testing.assert_close(per_head.sum(0), edge, atol=1e-5, rtol=1e-5)
        checked += 1
    assert checked > 5
    assert all(e.head == -1 for e in graph.edges if e.kind != "attention")
