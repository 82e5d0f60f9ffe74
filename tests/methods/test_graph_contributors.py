"""The cheap end of the attribution graph (issue 58): the top contributors are the graph's most influential nodes with
its numbers, a head's source key carries the largest part of its influence, node ids read back into nodes (bad ones
refused in words), and a node removed from a generation is removed once, at its position, with or without the KV
cache, giving the graph's ablation actual at the first new token."""

from __future__ import annotations

import pytest
import torch

from gptviz.methods.graph import attribution_graph
from gptviz.methods.graph_ablation import ablation_actuals
from gptviz.methods.graph_contributors import (
    Contributor,
    contributor_label,
    node_edits,
    parse_node,
    top_contributors,
)
from gptviz.methods.graph_frozen import FrozenModel, _project
from gptviz.methods.interventions import run_with_edits
from gptviz.model.generate import generate
from tests.support.graph_reference import WIRING_IDS, WIRINGS, prompt, reference_metric, unit_model

TARGET = 5


@pytest.mark.slow
@pytest.mark.parametrize("kw", WIRINGS[:4], ids=WIRING_IDS[:4])
def test_the_top_contributors_are_the_graphs_most_influential_nodes(kw):
    model, ids = unit_model(**kw), prompt()
    found = top_contributors(model, ids, TARGET, None, n=5)
    graph = attribution_graph(model, ids, TARGET, None, node_threshold=1.0, max_nodes=100_000, ablations=0)
    ranked = sorted((n for n in graph.nodes if n.kind != "metric"), key=lambda n: -abs(n.influence))[:5]
    assert [c.id for c in found.top] == [n.id for n in ranked]
    assert found.metric == pytest.approx(graph.metric, abs=1e-5)
    for c, n in zip(found.top, ranked, strict=True):
        assert c.value == pytest.approx(n.influence, abs=1e-5)
        assert c.share == pytest.approx(n.influence / graph.metric, rel=1e-5)
        assert (c.kind, c.layer, c.index, c.position) == (n.kind, n.layer, n.index, n.position)


def test_a_heads_source_is_the_key_carrying_most_of_its_influence():
    model, ids = unit_model(), prompt(T=9)
    fm = FrozenModel(model, ids, TARGET)
    heads = [c for c in top_contributors(model, ids, TARGET, n=40).top if c.kind == "head"]
    assert heads
    for c in heads:  # each key's part, from the pattern and the values written apart, sums to the head's influence
        w, layer, h, p = fm.layers[c.layer], c.layer, c.index, c.position
        v = _project(fm.attn_in[layer], w.Wv, w.bv)[h]  # [T, dh]
        parts = torch.stack(
            [fm.pattern[layer][h, p, j] * (v[j] @ w.Wo[h]) @ fm.grads[("attn", layer)][p] for j in range(p + 1)]
        )
        assert float(parts.sum()) == pytest.approx(c.value, abs=1e-4)
        assert c.source == int(parts.abs().argmax())


def test_a_label_names_the_node_the_token_it_brings_and_its_share():
    tokens = ["A", " Romeo", "'\n"]
    head = Contributor("L1H3@2", "head", 1, 3, 2, 1, 0.9, 0.41)
    assert contributor_label(head, tokens) == "L1H3 from ' Romeo' +41%"
    neuron = Contributor("L0N7@2", "neuron", 0, 7, 2, 2, -0.2, -0.09)
    assert contributor_label(neuron, tokens) == 'L0N7 at "\'\\n" -9%'  # repr: the quote and newline stay text
    emb = Contributor("E@1", "embeddings", None, None, 1, 1, 2.0, 1.5)
    assert contributor_label(emb, tokens) == "the token ' Romeo' +150%"
    bias = Contributor("B:L0.attn.out-bias@2", "bias", 0, None, 2, 2, 0.1, 0.05)
    assert contributor_label(bias, tokens) == 'L0 attn.out-bias at "\'\\n" +5%'
    assert head.unit == "L1H3" and neuron.unit == "L0N7" and emb.unit is None and bias.unit is None


@pytest.mark.slow
def test_node_ids_read_back_into_nodes_and_bad_ones_are_refused_in_words():
    model = unit_model(norm="post")
    cfg = model.config
    graph = attribution_graph(model, prompt(), TARGET, None, node_threshold=1.0, max_nodes=100_000, ablations=0)
    for n in graph.nodes:
        if n.kind != "metric":
            ref = parse_node(n.id, cfg, 7)
            assert (ref.id, ref.kind, ref.layer, ref.index, ref.position) == (
                n.id,
                n.kind,
                n.layer,
                n.index,
                n.position,
            )
    for bad, words in (
        ("L9H0@1", "2 layers"),
        ("L0H4@1", "4 heads"),
        ("L0N999@1", "128 neurons"),
        ("E@7", "past the prompt's 7 tokens"),
        ("metric", "no node id"),
        ("L0H0", "no node id"),
        ("B:L0.nope@1", "bias nodes are"),
        (None, "no node id"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_node(bad, cfg, 7)


@pytest.mark.parametrize("node", ["L1H2@6", "L0N11@4", "E@3", "B:L1.mlp.out-bias@6", "L0H1@2"])
def test_a_node_removed_from_a_generation_is_removed_once_where_it_is(node):
    model, ids = unit_model(), prompt()
    ref = parse_node(node, model.config, len(ids))
    edits = node_edits(model, ref)
    cached = generate(model, ids, 6, temperature=0.0, edits=edits)
    recomputed = generate(model, ids, 6, temperature=0.0, edits=edits, use_cache=False)
    assert cached == recomputed  # with the cache the edit sees each new position alone: it must not land there
    logits, _ = run_with_edits(model, torch.tensor([ids]), edits)
    removed = float(logits[0, -1, TARGET])
    assert removed == pytest.approx(
        reference_metric(model, ids, TARGET, None, (ref.kind, ref.layer, ref.index, ref.position, ref.bias)), abs=1e-4
    )
    base, (actual,) = ablation_actuals(model, ids, [ref], TARGET, None)
    assert removed - base == pytest.approx(actual, abs=1e-4)


def test_the_contributors_estimate_grows_with_the_prompt_and_is_below_the_graphs():
    from gptviz.model.sizes import contributors_nbytes, graph_nbytes

    cfg = unit_model().config
    assert 0 < contributors_nbytes(cfg, 8) < contributors_nbytes(cfg, 64) < graph_nbytes(cfg, 64)
