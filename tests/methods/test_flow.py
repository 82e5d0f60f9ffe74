"""The information-flow graph (gptviz.methods.flow): contributions that sum to the captured stream, shares that sum to
1, a graph whose every edge reaches the threshold and leads to the output, and the induction route on the bundled
model."""

from __future__ import annotations

import pytest
import torch

from gptviz import GPT, capture, load_pretrained
from gptviz.figures.flow import flow_figure
from gptviz.methods.flow import (
    attention_contributions,
    attention_shares,
    folded_output_bias,
    head_writes,
    information_flow,
    mlp_shares,
    proximity,
)
from gptviz.model.tokenizer import encode, token_labels
from tests.support.models import SMALL, random_ids


@pytest.fixture
def mixing() -> GPT:
    """Xavier-uniform weights: sub-layers write as much as the skip carries (GPT-2's 0.02 init leaves the graph
    nearly all skip), so the graphs below have attention and MLP edges to check."""
    return GPT(SMALL, init="xavier", seed=0).eval()


def test_attention_contributions_and_skip_sum_to_the_captured_stream(biased):
    """resid_mid[i] = resid_pre[i] + sum_j c[i, j] + b, for every layer and query: the split is exact. The value
    biases are folded out of the parts into b = b_O + sum_h b_V[h] @ W_O[h] (random biases here, so it shows)."""
    model = biased
    ids = random_ids(10, seed=4)
    names = [
        f"blocks.{layer}.{n}"
        for layer in range(SMALL.n_layers)
        for n in ("hook_resid_pre", "hook_resid_mid", "attn.hook_pattern", "attn.hook_v")
    ]
    _, cache = capture(model, ids, names)
    for layer in range(SMALL.n_layers):
        writes = head_writes(model, layer, cache[f"blocks.{layer}.attn.hook_v"][0])
        contrib = attention_contributions(cache[f"blocks.{layer}.attn.hook_pattern"][0], writes, list(range(10)))
        rebuilt = cache[f"blocks.{layer}.hook_resid_pre"][0] + contrib.sum(1) + folded_output_bias(model, layer)
        torch.testing.assert_close(rebuilt, cache[f"blocks.{layer}.hook_resid_mid"][0], atol=1e-5, rtol=1e-5)
        # causal: a query gets nothing from later keys
        assert contrib[2, 3:].abs().max() == 0


def test_proximity_shares_are_normalised_and_favour_the_part_closest_to_the_sum():
    total = torch.tensor([1.0, 1.0])
    parts = torch.tensor([[0.9, 1.0], [0.1, 0.0], [-1.0, 0.0]])  # a part pointing away gets only the floor
    shares = proximity(parts, total)
    assert float(shares.sum()) == pytest.approx(1.0)
    assert shares[0] > shares[1] > shares[2] > 0
    # |y|_1 = 2; |y - c|_1 = 0.1, 1.9, 3.0 -> proximities 1.9, 0.1, -1 floored at 1e-5 (the tool's EPS)
    # -> shares 1.9 / 2.00001, 0.1 / 2.00001, 1e-5 / 2.00001 (torch's pairwise_distance eps moves them by ~1e-6)
    torch.testing.assert_close(shares, torch.tensor([1.9, 0.1, 1e-5]) / 2.00001, rtol=0, atol=2e-6)
    assert float(shares[2]) == pytest.approx(1e-5 / 2.00001, rel=1e-3)


@pytest.mark.parametrize("threshold", [0.02, 0.1, 0.3])
def test_every_kept_edge_reaches_the_threshold_and_leads_to_the_output(mixing, threshold):
    ids = random_ids(12, seed=7)
    graph = information_flow(mixing, ids, threshold)
    assert graph.edges and all(threshold < e.importance <= 1 + 1e-6 for e in graph.edges)
    if threshold < 0.1:
        assert len({e.source for e in graph.edges if e.kind == "attention"}) > 2  # the graph spreads
    assert all(e.source <= e.target for e in graph.edges)  # causal
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
    # the output's attention sum: the skip merged with self-attention, and every earlier key (the bias is no part,
    # and the last position has no later keys, whose floor shares are never edges): exactly 1 as well
    last_attn = [
        e for e in graph.edges if e.layer == SMALL.n_layers - 1 and e.sublayer == "attn" and e.target == graph.position
    ]
    assert sum(e.importance for e in last_attn) == pytest.approx(1.0, abs=1e-5)
    assert [e.kind for e in last_attn if e.source == e.target] == ["residual"]  # one edge: skip + self-attention


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
    assert attention[(1, 3, 10)] > 0.5  # the last ' C' reads ' D', after the earlier ' C'
    assert attention[(0, 2, 3)] > 0.3  # ' D' reads the ' C' before it
    assert max(attention, key=attention.get) == (1, 3, 10)
    fig = flow_figure(graph, token_labels(ids), n_heads=model.config.n_heads, title="flow")
    hover = [
        row
        for trace in fig.data
        if trace.customdata is not None and trace.mode == "markers" and trace.legendgroup == "attention"
        for row in trace.customdata
    ]
    assert [1, "attention", "'␣D'", 3, "'␣C'", 10] in [list(r[:6]) for r in hover]


def test_an_attention_edges_largest_head_is_recomputed_from_the_weight_slices(biased):
    """Each head's write along an edge, pattern[h, i, j] * (v[j, h] - b_V[h]) @ W_O[:, h's slice], recomputed here: the
    heads' writes sum to the edge's contribution, and the edge names the head with the largest proximity to the query's
    resid_mid (the tool's per-head contribution, whose argmax its head selector preselects) and that head's part of
    the edge's share."""
    ids = random_ids(10, seed=3)
    graph = information_flow(biased, ids, 0.02)
    names = [
        f"blocks.{layer}.{n}"
        for layer in range(SMALL.n_layers)
        for n in ("attn.hook_pattern", "attn.hook_v", "hook_resid_mid", "hook_resid_pre")
    ]
    _, cache = capture(biased, ids, names)
    dh, d = SMALL.d_head, SMALL.d_model
    checked = 0
    for e in (e for e in graph.edges if e.kind == "attention"):
        attn = biased.blocks[e.layer].attn
        w = attn.c_proj.weight.detach()
        b_V = attn.c_attn.bias.detach()[2 * d :]
        v = cache[f"blocks.{e.layer}.attn.hook_v"][0, e.source]  # [heads, d_head]
        p = cache[f"blocks.{e.layer}.attn.hook_pattern"][0, :, e.target, e.source]  # [heads]
        per_head = torch.stack(
            [
                p[h] * ((v[h] - b_V[h * dh : (h + 1) * dh]) @ w[:, h * dh : (h + 1) * dh].t())
                for h in range(SMALL.n_heads)
            ]
        )
        y = cache[f"blocks.{e.layer}.hook_resid_mid"][0, e.target]
        prox = (y.abs().sum() - (per_head - y + 1e-6).abs().sum(-1)).clamp_min(1e-5)
        assert e.head == int(prox.argmax()) and e.head_share == pytest.approx(float(prox.max() / prox.sum()), rel=1e-4)
        pattern = cache[f"blocks.{e.layer}.attn.hook_pattern"][0]
        writes = head_writes(biased, e.layer, cache[f"blocks.{e.layer}.attn.hook_v"][0])
        edge = attention_contributions(pattern, writes, [e.target])[0, e.source]
        torch.testing.assert_close(per_head.sum(0), edge, atol=1e-5, rtol=1e-5)
        shares, _ = attention_shares(
            pattern,
            writes,
            cache[f"blocks.{e.layer}.hook_resid_pre"][0],
            cache[f"blocks.{e.layer}.hook_resid_mid"][0],
            [e.target],
        )
        assert float(shares[0, e.source].sum()) == pytest.approx(e.importance, rel=1e-5)
        checked += 1
    assert checked > 5
    assert all(e.head == -1 for e in graph.edges if e.kind != "attention")


# ---- the LLM Transparency Tool's formula, transcribed ---------------------------------------------------------
# From facebookresearch/llm-transparency-tool (commit f1340f0757b959c75c139f7aa91aef16eddced67):
#   llm_transparency_tool/routes/contributions.py: get_contributions, get_contributions_with_one_off_part,
#       get_attention_contributions, get_mlp_contributions
#   llm_transparency_tool/models/tlens_model.py: TransformerLensTransparentLlm.decomposed_attn (on a HookedTransformer
#       loaded by from_pretrained, whose default fold_value_biases=True leaves b_V = 0 and b_O holding the value biases)
#   llm_transparency_tool/routes/graph.py: build_full_graph (no renormalizing threshold), GraphBuilder,
#       build_paths_to_predictions
# Written out here without their dependencies (einops, networkx), loop for loop where it matters.


def _tool_get_contributions(parts, whole, distance_norm=1):
    EPS = 1e-5
    k = len(parts.shape) - len(whole.shape)
    bc_whole = whole.expand(parts.shape)
    distance = torch.nn.functional.pairwise_distance(parts, bc_whole, p=distance_norm)
    whole_norm = torch.norm(whole, p=distance_norm, dim=-1)
    distance = (whole_norm - distance).clip(min=EPS)
    return distance / distance.sum(dim=tuple(range(k)), keepdim=True)


def _tool_get_contributions_with_one_off_part(parts, one_off, whole):
    k = len(parts.shape) - len(whole.shape)
    flat = parts.flatten(start_dim=0, end_dim=k - 1)
    flat = torch.cat([flat, one_off.unsqueeze(0)])
    contributions = _tool_get_contributions(flat, whole)
    parts_c, one_off_c = torch.split(contributions, flat.shape[0] - 1)
    return parts_c.unflatten(0, parts.shape[0:k]), one_off_c[0]


def _tool_decomposed_attn(model, cache, layer):
    """[pos, key_pos, head, d_model] with the value bias folded out of v (fold_value_biases)."""
    cfg = model.config
    attn = model.blocks[layer].attn
    v = cache[f"blocks.{layer}.attn.hook_v"][0] - attn.c_attn.bias.detach()[2 * cfg.d_model :].view(cfg.n_heads, -1)
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]
    z = torch.einsum("khd,hqk->qkhd", v, pattern)
    W_O = attn.c_proj.weight.detach().T.reshape(cfg.n_heads, cfg.d_head, cfg.d_model)  # TransformerLens's W_O
    return torch.einsum("qkhd,hdm->qkhm", z, W_O)


def _tool_attention_contributions(model, cache, layer):
    """([pos, key_pos, head], [pos]), batch of one dropped."""
    decomposed = _tool_decomposed_attn(model, cache, layer)
    parts = decomposed.permute(1, 2, 0, 3)  # key_pos head pos d_model
    c_attn, c_resid = _tool_get_contributions_with_one_off_part(
        parts, cache[f"blocks.{layer}.hook_resid_pre"][0], cache[f"blocks.{layer}.hook_resid_mid"][0]
    )
    return c_attn.permute(2, 0, 1), c_resid


def _tool_mlp_contributions(cache, layer):
    c = _tool_get_contributions(
        torch.stack((cache[f"blocks.{layer}.hook_mlp_out"][0], cache[f"blocks.{layer}.hook_resid_mid"][0])),
        cache[f"blocks.{layer}.hook_resid_post"][0],
    )
    return c[0], c[1]


def _tool_paths(model, cache, n_tokens, start, threshold):
    """build_full_graph then build_paths_to_predictions: {(u, v): weight} of the edges the DFS from the output node
    walks over, through edges of weight > threshold. Node names as GraphBuilder's."""
    weights: dict[tuple[str, str], float] = {}

    def add(u, v, w):  # GraphBuilder._add_edge sums multi-edges
        weights[(u, v)] = weights.get((u, v), 0.0) + w

    for layer in range(model.config.n_layers):
        below = (lambda t, layer=layer: f"I{layer - 1}_{t}") if layer > 0 else (lambda t: f"X0_{t}")
        c_attn, c_resid_attn = _tool_attention_contributions(model, cache, layer)
        for token_from in range(n_tokens):
            for token_to in range(n_tokens):
                add(below(token_from), f"A{layer}_{token_to}", c_attn[token_to, token_from].sum().item())
        for token in range(n_tokens):
            add(below(token), f"A{layer}_{token}", c_resid_attn[token].item())
        c_ffn, c_resid_ffn = _tool_mlp_contributions(cache, layer)
        for token in range(n_tokens):
            add(f"A{layer}_{token}", f"M{layer}_{token}", c_ffn[token].item())
            add(f"M{layer}_{token}", f"I{layer}_{token}", c_ffn[token].item())
            add(f"A{layer}_{token}", f"I{layer}_{token}", c_resid_ffn[token].item())
    into: dict[str, list[str]] = {}
    for (u, v), w in weights.items():
        if w > threshold:
            into.setdefault(v, []).append(u)
    kept, stack, seen = {}, [f"I{model.config.n_layers - 1}_{start}"], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for u in into.get(node, []):
            kept[(u, node)] = weights[(u, node)]
            stack.append(u)
    return kept


def _as_tool_edges(graph):
    """gptviz's edges in the tool's node names."""
    out = {}
    for e in graph.edges:
        below = f"I{e.layer - 1}_{e.source}" if e.layer > 0 else f"X0_{e.source}"
        if e.sublayer == "attn":
            out[(below, f"A{e.layer}_{e.target}")] = e.importance
        elif e.kind == "mlp":
            out[(f"A{e.layer}_{e.source}", f"M{e.layer}_{e.target}")] = e.importance
            out[(f"M{e.layer}_{e.source}", f"I{e.layer}_{e.target}")] = e.importance
        else:
            out[(f"A{e.layer}_{e.source}", f"I{e.layer}_{e.target}")] = e.importance
    return out


@pytest.fixture
def biased() -> GPT:
    """The mixing model with random q/k/v and output biases, so folding the value biases matters."""
    m = GPT(SMALL, init="xavier", seed=0).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for block in m.blocks:
            for lin in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                lin.bias.copy_(0.5 * torch.randn(lin.bias.shape, generator=g))
    return m


@pytest.mark.parametrize("threshold, position", [(0.01, -1), (0.04, -1), (0.04, 6), (0.1, -1)])
def test_the_graph_is_the_llm_transparency_tools_graph(biased, threshold, position):
    """Same edges, same weights as the tool's build_full_graph + build_paths_to_predictions on the same capture."""
    T = 10
    ids = random_ids(T, seed=13)
    _, cache = capture(biased, ids)
    expected = _tool_paths(biased, cache, T, position % T, threshold)
    got = _as_tool_edges(information_flow(biased, ids, threshold, position))
    assert expected and any(u[0] != "A" and int(u.split("_")[1]) != int(v.split("_")[1]) for u, v in expected)
    assert sorted(got) == sorted(expected)
    for key, w in expected.items():
        assert got[key] == pytest.approx(w, rel=1e-4, abs=1e-6), key


def test_the_shares_are_the_tools_contributions_for_every_query_key_and_head(biased):
    """attention_shares and mlp_shares against the transcription, on every row (not only the graph's)."""
    T = 9
    _, cache = capture(biased, random_ids(T, seed=2))
    for layer in range(SMALL.n_layers):
        c_attn, c_resid = _tool_attention_contributions(biased, cache, layer)
        writes = head_writes(biased, layer, cache[f"blocks.{layer}.attn.hook_v"][0])
        shares, skip = attention_shares(
            cache[f"blocks.{layer}.attn.hook_pattern"][0],
            writes,
            cache[f"blocks.{layer}.hook_resid_pre"][0],
            cache[f"blocks.{layer}.hook_resid_mid"][0],
            range(T),
        )
        torch.testing.assert_close(shares, c_attn, rtol=1e-4, atol=2e-6)  # |y| - distance cancels: ~1e-6 off
        torch.testing.assert_close(skip, c_resid, rtol=1e-4, atol=2e-6)
        c_ffn, c_resid_ffn = _tool_mlp_contributions(cache, layer)
        mlp = mlp_shares(cache[f"blocks.{layer}.hook_resid_mid"][0], cache[f"blocks.{layer}.hook_mlp_out"][0])
        torch.testing.assert_close(mlp, torch.stack([c_ffn, c_resid_ffn], -1), rtol=1e-4, atol=2e-6)
