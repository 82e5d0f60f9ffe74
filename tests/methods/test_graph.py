"""The attribution graph (issue 58): the frozen model equals the real one, its exact sums hold over every node and
edge, the ablation check's actuals equal an independent edited forward pass, an edge of a one-layer model equals a
hand computation, pruning keeps what it promises, and bad input is refused in words."""

from __future__ import annotations

import pytest
import torch

from gptviz import capture
from gptviz.methods.graph import attribution_graph, edges_total, nodes_total
from gptviz.methods.graph_ablation import ablation_actuals, removal_edits
from gptviz.methods.graph_frozen import FrozenModel
from gptviz.methods.graph_nodes import NodeRef, all_nodes, bias_names, bias_parts, edge_weights, metric_ref, node_values
from gptviz.model.sizes import graph_nbytes
from tests.support.graph_reference import WIRING_IDS, WIRINGS, prompt, reference_metric, unit_model
from tests.support.models import build

TARGET, OTHER = 5, 9


def _close(a: float, b: float, scale: float, rel: float = 1e-4) -> bool:
    return abs(a - b) <= rel * max(scale, 1e-3)


class Full:
    """Every node's numbers and the full edge matrix of a small model (targets: every node, then the metric)."""

    def __init__(self, model, ids, other=OTHER):
        fm = self.fm = FrozenModel(model, ids, TARGET, other)
        self.nodes = all_nodes(model.config, fm.T)
        influence, direct = node_values(fm, fm.grads), node_values(fm, fm.direct_grads())
        parts, self.metric_part = bias_parts(fm)
        self.influence = torch.tensor([influence.at(r) for r in self.nodes], dtype=torch.float64)
        self.direct = torch.tensor([direct.at(r) for r in self.nodes], dtype=torch.float64)
        self.bias_part = torch.tensor([parts.at(r) for r in self.nodes], dtype=torch.float64)
        found = edge_weights(fm, self.nodes, self.nodes + [metric_ref(fm.T)], rows=4096)
        self.weights, self.incoming = found.weights.double(), found.incoming.double()
        self.scale = float(self.influence.abs().max())


@pytest.fixture(scope="module", params=range(len(WIRINGS)), ids=WIRING_IDS)
def full(request):
    return Full(unit_model(**WIRINGS[request.param]), prompt())


@pytest.mark.parametrize("kw", WIRINGS, ids=WIRING_IDS)
def test_the_frozen_model_gives_the_real_models_metric(kw):
    model = unit_model(**kw)
    ids = prompt()
    logits, _ = capture(model, [ids], ())
    real = float(logits[0, -1, TARGET] - logits[0, -1, OTHER])
    assert FrozenModel(model, ids, TARGET, OTHER).metric == pytest.approx(real, abs=1e-5)
    alone = FrozenModel(model, ids, TARGET)  # no rival: logit(target) itself
    assert alone.metric == pytest.approx(float(logits[0, -1, TARGET]), abs=1e-5)
    assert reference_metric(model, ids, TARGET, OTHER) == pytest.approx(real, abs=1e-5)


@pytest.mark.slow
def test_sources_and_bias_parts_sum_to_the_metric(full):
    """Embeddings + bias nodes (their influences) + every node's bias part (the metric's too) == the metric."""
    sources = [i for i, r in enumerate(full.nodes) if r.kind in ("embeddings", "bias")]
    total = float(full.influence[sources].sum() + full.bias_part.sum()) + full.metric_part
    assert _close(total, full.fm.metric, full.scale)


@pytest.mark.slow
def test_influence_is_direct_plus_outgoing_and_incoming_plus_bias_part(full):
    """Over every node and every edge, before pruning: influence = direct + the edges into heads and neurons (the
    edge into the metric is the direct effect itself), and for a node with an input, influence = the sum of its
    incoming edges + its bias part."""
    into_metric = full.weights[-1]
    assert torch.allclose(into_metric, full.direct, atol=1e-5 * full.scale)
    outgoing = full.weights[:-1].sum(0)
    assert (full.influence - full.direct - outgoing).abs().max() <= 1e-4 * full.scale
    readers = torch.tensor([r.reads is not None for r in full.nodes])
    incoming = full.weights[:-1].sum(1)
    assert (full.influence - full.bias_part - incoming)[readers].abs().max() <= 1e-4 * full.scale
    assert (incoming - full.incoming[:-1])[readers].abs().max() <= 1e-4 * full.scale  # the walk's own sum
    assert float(into_metric.sum()) + full.metric_part == pytest.approx(full.fm.metric, abs=1e-4 * full.scale)
    assert (full.weights[:-1][~readers] == 0).all()  # embeddings and bias nodes have no input


def _joined(steps, sources: list[NodeRef], targets: list[NodeRef]) -> torch.Tensor:
    """[targets, sources]: whether a direct path joins them: the source writes before the target reads, at a position
    the target reads (a head: its query's and earlier ones; a neuron: its own; the metric: the last)."""
    order = {(s.op, s.point): i for i, s in enumerate(steps)}
    writes = torch.tensor([order[("write", s.point)] for s in sources])
    reads = torch.tensor([order[("read", t.reads)] if t.reads else -1 for t in targets])
    src_pos = torch.tensor([s.position for s in sources])
    tgt_pos = torch.tensor([t.position for t in targets])[:, None]
    is_head = torch.tensor([t.kind == "head" for t in targets])[:, None]
    where = torch.where(is_head, src_pos <= tgt_pos, src_pos == tgt_pos)
    return (writes[None] < reads[:, None]) & where


@pytest.mark.slow
def test_the_counts_are_every_node_and_every_direct_path(full):
    """nodes_total and edges_total count the graph before pruning: every node, and every pair a direct path joins
    (whether or not it carries weight on this prompt: a last-layer neuron before the last position reaches nothing).
    Every edge with weight is such a pair."""
    cfg, T = full.fm.config, full.fm.T
    assert nodes_total(cfg, T) == len(full.nodes) + 1
    targets = full.nodes + [metric_ref(T)]
    joined = _joined(full.fm.steps, full.nodes, targets)
    assert int(joined.sum()) == edges_total(cfg, T)
    assert not (full.weights[~joined] != 0).any()


@pytest.mark.slow
def test_a_model_without_a_rival_explains_the_target_logit():
    model = unit_model()
    full = Full(model, prompt(5), other=None)
    sources = [i for i, r in enumerate(full.nodes) if r.kind in ("embeddings", "bias")]
    total = float(full.influence[sources].sum() + full.bias_part.sum()) + full.metric_part
    assert _close(total, full.fm.metric, full.scale)


# ---- the ablation check ---------------------------------------------------------------------------------------


def _removable(config, T: int) -> list[NodeRef]:
    nodes = [
        NodeRef("head", 1, 2, T - 1),
        NodeRef("head", 0, 3, 2),
        NodeRef("head", 0, 1, 0),
        NodeRef("neuron", 0, 17, T - 1),
        NodeRef("neuron", 1, 5, T - 1),
        NodeRef("neuron", 1, 9, 4),
        NodeRef("embeddings", None, None, 3),
        NodeRef("embeddings", None, None, 0),
        NodeRef("embeddings", None, None, T - 1),
    ]
    return (
        nodes
        + [NodeRef("bias", 0, None, 2, name) for name in bias_names(config)]
        + [NodeRef("bias", 1, None, T - 1, name) for name in bias_names(config)]
    )


@pytest.mark.parametrize("kw", WIRINGS, ids=WIRING_IDS)
def test_ablation_actuals_equal_an_independent_edited_forward(kw):
    model, ids = unit_model(**kw), prompt()
    refs = _removable(model.config, len(ids))
    base, actual = ablation_actuals(model, ids, refs, TARGET, OTHER)
    assert base == pytest.approx(reference_metric(model, ids, TARGET, OTHER), abs=1e-5)
    for ref, value in zip(refs, actual, strict=True):
        expected = (
            reference_metric(model, ids, TARGET, OTHER, (ref.kind, ref.layer, ref.index, ref.position, ref.bias)) - base
        )
        assert value == pytest.approx(expected, abs=2e-5), ref.id
    assert sum(abs(v) > 1e-3 for v in actual) >= len(actual) // 2  # the removals do something


@pytest.mark.slow
@pytest.mark.parametrize("kw", WIRINGS[:4], ids=WIRING_IDS[:4])
def test_the_graphs_ablation_check_is_predicted_and_real(kw):
    model, ids = unit_model(**kw), prompt()
    graph = attribution_graph(model, ids, TARGET, OTHER, max_nodes=40)
    checked = [n for n in graph.nodes if n.ablation is not None]
    assert len(checked) == 10 and all(n.kind != "metric" for n in checked)
    top = sorted((abs(n.influence) for n in graph.nodes if n.kind != "metric"), reverse=True)[:10]
    assert sorted((abs(n.influence) for n in checked), reverse=True) == top
    for n in checked:
        assert n.ablation.predicted == -n.influence
        ref = (n.kind, n.layer, n.index, n.position, n.id.split(".", 1)[1].split("@")[0] if n.kind == "bias" else None)
        expected = reference_metric(model, ids, TARGET, OTHER, ref) - graph.real_metric
        assert n.ablation.actual == pytest.approx(expected, abs=2e-5), n.id
    assert graph.real_metric == pytest.approx(graph.metric, abs=1e-5)


def test_a_removal_edit_names_the_node_and_touches_one_row():
    model = unit_model()
    edits = removal_edits(model, NodeRef("neuron", 1, 4, 2), row=1)
    assert [e.hook for e in edits] == ["blocks.1.mlp.hook_post"] and "L1N4@2" in edits[0].label
    value = torch.ones(2, 5, model.config.d_ff)
    out = edits[0].fn(value, 0)
    assert out[1, 2, 4] == 0 and out.sum() == value.sum() - 1 and value.sum() == value.numel()


# ---- one layer by hand ------------------------------------------------------------------------------------------


def _scale(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps)


def _ln(x: torch.Tensor, s: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """LayerNorm's linear part at a frozen scale s."""
    return (x - x.mean(-1, keepdim=True)) * s * gamma


# what the hand computations of a one-block model read
ONE_BLOCK = ["hook_embed", "hook_pos_embed"] + [
    f"blocks.0.{name}"
    for name in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
    + ("mlp.hook_pre", "mlp.hook_post", "attn.hook_pattern")
]


@torch.no_grad()
def test_edges_of_a_one_layer_pre_norm_model_equal_a_hand_computation():
    """E@j -> L0N{n}@last and E@j -> L0H{h}@last, from captured activations and the weights alone."""
    model, ids = unit_model(n_layers=1), prompt(6)
    cfg, T, eps = model.config, 6, model.config.ln_eps
    _, c = capture(model, [ids], ONE_BLOCK)
    emb = (c["hook_embed"] + c["hook_pos_embed"])[0]
    x0, mid, final = c["blocks.0.hook_resid_pre"][0], c["blocks.0.hook_resid_mid"][0], c["blocks.0.hook_resid_post"][0]
    block, last = model.blocks[0], T - 1
    u = model.lm_head.weight[TARGET] - model.lm_head.weight[OTHER]
    g_direct = _scale(final[last], eps) * (u * model.ln_f.weight)  # the metric's gradient, direct path
    g_direct = g_direct - g_direct.mean()
    pre, post = c["blocks.0.mlp.hook_pre"][0, last], c["blocks.0.mlp.hook_post"][0, last]
    ratio = torch.where(pre != 0, post / pre, torch.zeros(()))
    s1, s2 = _scale(x0, eps), _scale(mid, eps)
    Wfc, Wout = block.mlp.c_fc.weight, block.mlp.c_proj.weight
    n, j, h = 11, 2, 1
    neuron_edge = ratio[n] * (g_direct @ Wout[:, n]) * (Wfc[n] @ _ln(emb[last], s2[last], block.ln_2.weight))
    # the head's output at `last` reaches the metric directly and through every neuron at `last`
    per_neuron = ratio * (Wout.T @ g_direct)  # d metric / d pre, [d_ff]
    through = _scale(mid[last], eps) * ((per_neuron @ Wfc) * block.ln_2.weight)
    g_attn = g_direct + through - through.mean()
    dh, d = cfg.d_head, cfg.d_model
    Wv = block.attn.c_attn.weight[2 * d + h * dh : 2 * d + (h + 1) * dh]  # [dh, d]
    Wo = block.attn.c_proj.weight[:, h * dh : (h + 1) * dh]  # [d, dh]
    pattern = c["blocks.0.attn.hook_pattern"][0, h, last, j]
    head_edge = pattern * ((Wo.T @ g_attn) @ (Wv @ _ln(emb[j], s1[j], block.ln_1.weight)))
    fm = FrozenModel(model, ids, TARGET, OTHER)
    found = edge_weights(
        fm,
        [NodeRef("embeddings", None, None, last), NodeRef("embeddings", None, None, j)],
        [NodeRef("neuron", 0, n, last), NodeRef("head", 0, h, last)],
    )
    assert float(found.weights[0, 0]) == pytest.approx(float(neuron_edge), rel=1e-4, abs=1e-6)
    assert float(found.weights[1, 1]) == pytest.approx(float(head_edge), rel=1e-4, abs=1e-6)
    assert found.weights[0, 1] == 0  # a neuron reads its own position only


@torch.no_grad()
def test_an_edge_of_a_one_layer_post_norm_model_goes_through_the_frozen_norm_between():
    """Post-norm: E@last reaches the neuron's input through ln_1 (frozen scale, no beta: the beta is a node)."""
    model, ids = unit_model(n_layers=1, norm="post"), prompt(6)
    eps, last, n = model.config.ln_eps, 5, 7
    _, c = capture(
        model,
        [ids],
        [
            "hook_embed",
            "hook_pos_embed",
            "blocks.0.hook_resid_pre",
            "blocks.0.hook_attn_out",
            "blocks.0.hook_resid_mid",
            "blocks.0.hook_mlp_out",
            "blocks.0.mlp.hook_pre",
            "blocks.0.mlp.hook_post",
            "blocks.0.hook_resid_post",
        ],
    )
    block = model.blocks[0]
    emb = (c["hook_embed"] + c["hook_pos_embed"])[0, last]
    y1 = (c["blocks.0.hook_resid_pre"] + c["blocks.0.hook_attn_out"])[0, last]
    y2 = (c["blocks.0.hook_resid_mid"] + c["blocks.0.hook_mlp_out"])[0, last]
    final = c["blocks.0.hook_resid_post"][0, last]
    u = model.lm_head.weight[TARGET] - model.lm_head.weight[OTHER]
    g = _scale(final, eps) * (u * model.ln_f.weight)
    g = _scale(y2, eps) * ((g - g.mean()) * block.ln_2.weight)  # back through ln_2, frozen
    g = g - g.mean()
    pre, post = c["blocks.0.mlp.hook_pre"][0, last, n], c["blocks.0.mlp.hook_post"][0, last, n]
    expected = (
        (post / pre)
        * (g @ block.mlp.c_proj.weight[:, n])
        * (block.mlp.c_fc.weight[n] @ _ln(emb, _scale(y1, eps), block.ln_1.weight))
    )
    fm = FrozenModel(model, ids, TARGET, OTHER)
    found = edge_weights(fm, [NodeRef("embeddings", None, None, last)], [NodeRef("neuron", 0, n, last)])
    assert float(found.weights[0, 0]) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


# ---- pruning --------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings",
    [dict(), dict(node_threshold=0.5, edge_threshold=0.9, max_nodes=500), dict(max_nodes=20), dict(max_nodes=3)],
)
def test_pruning_keeps_the_metric_and_embeddings_covers_the_threshold_and_respects_the_cap(settings):
    model, ids = unit_model(norm="post"), prompt()
    T = len(ids)
    full = Full(model, ids)
    graph = attribution_graph(model, ids, TARGET, OTHER, **settings)
    p = graph.pruning
    kept = {n.id for n in graph.nodes}
    assert "metric" in kept and {f"E@{i}" for i in range(T)} <= kept
    assert p.nodes_kept == len(graph.nodes) <= max(p.max_nodes, T + 1)
    total = float(full.influence.abs().sum())
    covered = sum(abs(n.influence) for n in graph.nodes if n.kind != "metric")
    assert p.node_share == pytest.approx(covered / total, rel=1e-5)
    if p.nodes_kept < p.max_nodes:
        assert p.node_share >= p.node_threshold - 1e-6
        smaller = covered - min(abs(n.influence) for n in graph.nodes if n.kind not in ("metric", "embeddings"))
        assert smaller / total < p.node_threshold  # and none of them could go: the smallest such set
    # the edges: the fewest, largest first, covering the threshold of every edge among the kept nodes
    index = {r.id: i for i, r in enumerate(full.nodes)}
    rows = [index.get(i, len(full.nodes)) for i in kept]
    cols = [index[i] for i in kept if i != "metric"]
    among = full.weights[rows][:, cols].abs()
    weights = sorted((abs(e.weight) for e in graph.edges), reverse=True)
    assert p.edges_kept == len(graph.edges) and sum(weights) >= p.edge_threshold * float(among.sum()) - 1e-6
    assert sum(weights[:-1]) < p.edge_threshold * float(among.sum())
    assert all(e.source in kept and e.target in kept for e in graph.edges)
    assert p.nodes_total == nodes_total(model.config, T) and p.edges_total == edges_total(model.config, T)


def test_embeddings_that_cover_the_threshold_alone_are_all_that_is_kept():
    from gptviz.methods.graph import select_nodes
    from gptviz.methods.graph_nodes import Values

    influence = Values(
        torch.tensor([5.0, -4.0]),
        torch.tensor([[[1.0], [0.5]]]),
        torch.zeros(1, 2, 3),
        {"attn.out-bias": torch.tensor([[0.0, -0.25]])},
    )
    kept, share = select_nodes(influence, 2, 0.8, 200)
    assert [r.id for r in kept] == ["E@0", "E@1", "metric"] and share == pytest.approx(9 / 10.75)
    kept, share = select_nodes(influence, 2, 0.95, 200)
    assert [r.id for r in kept] == ["E@0", "E@1", "L0H0@0", "L0H0@1", "metric"] and share == pytest.approx(10.5 / 10.75)
    kept, _ = select_nodes(influence, 2, 1.0, 4)  # the cap counts the embeddings and the metric
    assert [r.id for r in kept] == ["E@0", "E@1", "L0H0@0", "metric"]
    kept, _ = select_nodes(influence, 2, 1.0, 200)  # zero influence is never added
    assert len(kept) == 2 + 3 + 1


@pytest.mark.slow
def test_kept_nodes_carry_the_full_graphs_numbers():
    model, ids = unit_model(), prompt()
    full = Full(model, ids)
    graph = attribution_graph(model, ids, TARGET, OTHER, max_nodes=60)
    index = {r.id: i for i, r in enumerate(full.nodes)}
    for n in graph.nodes:
        if n.kind == "metric":
            assert n.influence == n.direct == pytest.approx(full.fm.metric)
            assert n.incoming_sum + n.bias_part == pytest.approx(n.influence, abs=1e-4 * full.scale)
            continue
        i = index[n.id]
        assert n.influence == pytest.approx(float(full.influence[i]), abs=1e-6)
        assert n.direct == pytest.approx(float(full.direct[i]), abs=1e-6)
        assert n.bias_part == pytest.approx(float(full.bias_part[i]), abs=1e-6)
        assert n.incoming_sum == pytest.approx(float(full.weights[:-1,].sum(1)[i]), abs=1e-4 * full.scale)
    for e in graph.edges:
        t = index.get(e.target, len(full.nodes))
        assert e.weight == pytest.approx(float(full.weights[t, index[e.source]]), abs=1e-6)


# ---- bounds and bad input --------------------------------------------------------------------------------------


def test_bad_input_is_refused_in_words():
    model = build()
    with pytest.raises(ValueError, match=r"target token 101 is outside the vocabulary \[0, 101\)"):
        attribution_graph(model, [1, 2, 3], 101)
    with pytest.raises(ValueError, match="other token -1 is outside the vocabulary"):
        attribution_graph(model, [1, 2, 3], 4, -1)
    with pytest.raises(ValueError, match="empty"):
        attribution_graph(model, [], 4)
    with pytest.raises(ValueError, match="node_threshold must be in"):
        attribution_graph(model, [1, 2, 3], 4, node_threshold=0)
    with pytest.raises(ValueError, match="max_nodes must be a whole number"):
        attribution_graph(model, [1, 2, 3], 4, max_nodes=0)
    with pytest.raises(ValueError, match="longer than the context"):
        attribution_graph(model, list(range(17)), 4)
    with pytest.raises(ValueError, match="eval mode"):
        attribution_graph(build().train(), [1, 2], 4)


def test_a_memory_budget_below_the_estimate_is_refused_saying_the_limit():
    model = build()
    need = graph_nbytes(model.config, 5)
    with pytest.raises(ValueError, match=r"needs about [0-9.]+ MiB, more than the limit of [0-9.]+ MiB"):
        attribution_graph(model, prompt(5), 4, memory_budget=need - 1)
    attribution_graph(model, prompt(5), 4, memory_budget=need)


def test_the_estimate_grows_with_the_prompt_and_the_model():
    from gptviz import PRESETS

    small, big = PRESETS["gpt2-small"], PRESETS["gpt2-xl"]
    assert graph_nbytes(small, 64) < graph_nbytes(small, 1024) < graph_nbytes(big, 1024)
    assert 20 * 2**20 < graph_nbytes(small, 64) < 2**30  # tens to hundreds of MiB, not GiB, for 64 tokens


def test_a_work_clock_stops_the_graph():
    class Stopped(Exception):
        pass

    class Clock:
        def check(self):
            raise Stopped("time is up")

    with pytest.raises(Stopped):
        attribution_graph(build(), prompt(5), 4, clock=Clock())


# ---- the worked example (docs/attribution-graph.md) --------------------------------------------------------------

EXAMPLE = "JULIET:\nGood morrow, sweet Romeo, good morrow to thee.\nROMEO:\nGood morrow, sweet"


@pytest.mark.slow
def test_the_worked_example_puts_the_induction_heads_among_the_top_nodes():
    """On the bundled model, " Romeo" against " lady" after the second "sweet": heads the induction detector ranks in
    its top three are among the top nodes at the last position, reading the first " Romeo", and removing them moves
    the real metric the way the frozen model predicts (same sign, at least half as far)."""
    from gptviz import get_tokenizer, load_pretrained
    from gptviz.methods import head_ranking, induction_test
    from gptviz.model.weights import bundled_models, training_vocab

    model, enc = load_pretrained("shakespeare-pre"), get_tokenizer()
    ids = enc.encode(EXAMPLE)
    last, first_romeo = len(ids) - 1, ids.index(enc.encode(" Romeo")[0])
    graph = attribution_graph(model, ids, enc.encode(" Romeo")[0], enc.encode(" lady")[0])
    induction = induction_test(model, 50, ids=training_vocab(bundled_models()["shakespeare-pre"])).scores
    top_heads = {f"L{layer}H{head}@{last}" for layer, head, _ in head_ranking(induction, 3)}
    ranked = [n for n in sorted(graph.nodes, key=lambda n: -abs(n.influence)) if n.kind != "metric"]
    found = [n for n in ranked[:8] if n.id in top_heads]
    assert len(found) >= 2 and ranked[0].id == f"E@{first_romeo}"
    for n in found:
        assert n.influence > 0 and 0.5 * n.influence <= -n.ablation.actual <= 1.5 * n.influence, n
        strongest = max((e for e in graph.edges if e.target == n.id), key=lambda e: abs(e.weight))
        assert strongest.source.endswith(f"@{first_romeo}")
