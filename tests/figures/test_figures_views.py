"""Figure factories of the Embeddings, Activations, Parameters and Explainers pages: traces carry the
values they were given (from a real capture or parameter table), in the right number and layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gptviz import PRESETS, capture
from gptviz import methods as analysis
from gptviz.figures import activations as fa
from gptviz.figures import embeddings as fe
from gptviz.figures import explainers as fx
from gptviz.figures import params as fp
from gptviz.model.hooks import ActivationCache
from gptviz.model.params import by_component, by_layer, param_table, total_params
from tests.support.models import SMALL, build, random_ids

L, H, D, FF = SMALL.n_layers, SMALL.n_heads, SMALL.d_model, SMALL.d_ff
T = 8


@pytest.fixture(scope="module")
def run():
    model = build(seed=12)
    ids = random_ids(T, seed=13)
    ids[5] = ids[2]  # a repeated token
    logits, cache = capture(model, ids[None])
    store = {k: v[0] for k, v in cache.items()}
    return model, ids, logits[0], ActivationCache(store, L)


def labels_for(ids):
    return [f"tok{int(i)}" for i in ids]


# ---- embeddings ---------------------------------------------------------------------------------------------


def test_embedding_panels_show_the_capture_on_one_scale(run):
    _, ids, _, cache = run
    tok, pos, total = cache["hook_embed"], cache["hook_pos_embed"], cache["blocks.0.hook_resid_pre"]
    fig = fe.embedding_panels(tok, pos, total, labels_for(ids), range(4, 20))
    assert len(fig.data) == 3
    for trace, tensor in zip(fig.data, (tok, pos, total), strict=True):
        np.testing.assert_array_equal(trace.z, tensor[:, 4:20].numpy())
        assert list(trace.x) == list(range(4, 20)) and trace.coloraxis == "coloraxis"
        assert trace.customdata[5][0] == labels_for(ids)[5]
    bound = max(float(t[:, 4:20].abs().max()) for t in (tok, pos, total))
    assert fig.layout.coloraxis.cmin == pytest.approx(-bound) and fig.layout.coloraxis.cmax == pytest.approx(bound)
    np.testing.assert_allclose(fig.data[2].z, fig.data[0].z + fig.data[1].z, rtol=1e-5, atol=1e-7)


def test_token_similarity_hover_names_both_tokens(run):
    _, ids, _, cache = run
    sim = analysis.cosine_similarity_matrix(cache["hook_embed"])
    labels = labels_for(ids)
    fig = fe.token_similarity(sim, labels)
    assert len(fig.data) == 1
    np.testing.assert_array_equal(fig.data[0].z, sim.numpy())
    assert fig.data[0].z[2][5] == pytest.approx(1.0, abs=1e-6)  # the repeated token
    assert list(fig.data[0].customdata[1][6]) == [1, labels[1], 6, labels[6]]
    assert fig.data[0].hovertemplate.endswith("<extra></extra>")
    # token tick labels make %{x}/%{y} show the token, so a hover reading them repeated it ("␣because: ␣because")
    assert "%{x}" not in fig.data[0].hovertemplate and "%{y}" not in fig.data[0].hovertemplate
    assert len(set(fig.layout.xaxis.categoryarray)) == T  # repeats keep their own column


def test_token_similarity_thins_its_labels_across_and_down():
    labels = [f"t{i}" for i in range(64)]
    fig = fe.token_similarity(np.eye(64), labels)
    for axis in (fig.layout.xaxis, fig.layout.yaxis):  # Plotly keeps about one label per 15 px of the size drawn
        assert axis.type == "category" and axis.tickmode == "auto" and list(axis.categoryarray) == labels
    assert np.asarray(fig.data[0].z).shape == (64, 64)


def test_position_similarity_covers_every_position(run):
    model = run[0]
    sim = analysis.cosine_similarity_matrix(model.wpe.weight.detach())
    fig = fe.position_similarity(sim)
    assert np.asarray(fig.data[0].z).shape == (SMALL.n_ctx, SMALL.n_ctx)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), sim.numpy(), rtol=1e-6)
    assert str(SMALL.n_ctx) in fig.layout.title.text


def test_pca_scatter_traces():
    vocab, prompt = np.random.default_rng(0).normal(size=(30, 2)), np.array([[0.5, 1.0], [2.0, -1.0]])
    fig = fe.pca_scatter(vocab, [f"v{i}" for i in range(30)], prompt, ["a", "b"], (0.31, 0.12))
    assert [len(t.x) for t in fig.data] == [30, 2]
    np.testing.assert_array_equal(fig.data[1].y, prompt[:, 1])
    assert list(fig.data[1].customdata) == ["a", "b"]
    assert "31.0%" in fig.layout.xaxis.title.text and "12.0%" in fig.layout.yaxis.title.text


# ---- activations -----------------------------------------------------------------------------------------


def test_residual_norm_figures(run):
    _, ids, _, cache = run
    norms = analysis.residual_norms(cache)
    heat = fa.residual_norm_heatmap(norms, labels_for(ids))
    np.testing.assert_array_equal(heat.data[0].z, norms.numpy())
    assert list(heat.layout.yaxis.ticktext) == ["into block 0", "into block 1", "output"]
    attn, mlp = analysis.branch_norms(cache, "hook_attn_out"), analysis.branch_norms(cache, "hook_mlp_out")
    lines = fa.residual_norm_lines(norms[:, 3], attn[:, 3], mlp[:, 3], "at 3")
    assert [len(t.y) for t in lines.data] == [L + 1, L, L]
    np.testing.assert_array_equal(lines.data[1].y, attn[:, 3].numpy())
    np.testing.assert_array_equal(lines.data[2].y, mlp[:, 3].numpy())


def test_mlp_histograms_and_top_neurons(run):
    _, _, _, cache = run
    post = cache.stack("mlp.hook_post")
    counts, edges = analysis.activation_histograms(post, bins=20)
    fig = fa.mlp_histograms(counts, edges)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (L, 20)
    custom = np.asarray(fig.data[0].customdata, dtype=float)
    np.testing.assert_array_equal(custom[..., 2], counts.numpy())  # counts shown on hover
    np.testing.assert_allclose(custom[..., 3].sum(1), np.ones(L))  # shares per layer sum to 1
    filled = counts.numpy() > 0
    np.testing.assert_allclose(z[filled], np.log10(custom[..., 3][filled]))
    assert np.isnan(z[~filled]).all()
    rows = analysis.top_neurons(post, 2, k=5)
    bar = fa.top_neurons_bar(rows, "tokX")
    assert list(bar.data[0].y) == [f"L{a} N{b}" for a, b, _ in rows]
    assert list(bar.data[0].x) == [v for _, _, v in rows]


def test_norm_stats_figure(run):
    model, _, _, cache = run
    stats = analysis.norm_input_stats(cache, model.config)
    fig = fa.norm_stats_figure(stats.names, stats.mean, stats.var, stats.mean_square)
    assert len(fig.data) == 2
    np.testing.assert_allclose(fig.data[0].y, stats.mean.numpy().mean(1), rtol=1e-6)
    np.testing.assert_allclose(fig.data[1].y, stats.var.numpy().mean(1), rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(fig.data[1].y) + np.asarray(fig.data[1].error_y.array), stats.var.numpy().max(1), rtol=1e-6
    )
    assert list(fig.layout.xaxis2.ticktext) == stats.names
    rms = fa.norm_stats_figure(stats.names, stats.mean, stats.var, stats.mean_square, rms=True)
    np.testing.assert_allclose(rms.data[1].y, stats.mean_square.numpy().mean(1), rtol=1e-6)


def test_logit_lens_figures(run):
    model, ids, logits, cache = run
    lens = analysis.logit_lens(model, cache)
    top_labels = [labels_for(r) for r in lens.top_ids.tolist()]
    target_labels = labels_for(lens.target_ids.tolist())
    heat = fa.logit_lens_heatmap(lens.top_probs, top_labels, labels_for(ids), target_labels, lens.target_probs)
    z = np.asarray(heat.data[0].z)
    assert z.shape == (L + 1, T)
    np.testing.assert_allclose(z[-1], logits.softmax(-1).max(-1).values.numpy(), rtol=1e-5)  # real output
    assert [list(r) for r in heat.data[0].text] == top_labels  # short prompt: names in the cells
    assert heat.data[0].zmax == pytest.approx(float(z.max()))
    assert "%{x}" not in heat.data[0].hovertemplate and list(heat.data[0].customdata[2][4])[5] == 4  # the position
    lines = fa.final_prediction_lines(lens.target_probs, 4, "4:x", "y")
    assert len(lines.data) == 2
    np.testing.assert_allclose(lines.data[0].y, lens.target_probs[:, 4].numpy())
    np.testing.assert_allclose(lines.data[1].y, lens.target_probs.mean(1).numpy(), rtol=1e-6)


def test_head_detector_heatmaps(run):
    _, ids, _, cache = run
    patterns = cache.patterns()
    scores = {
        "previous": analysis.previous_token_scores(patterns),
        "duplicate": analysis.duplicate_token_scores(patterns, ids.tolist()),
    }
    fig = fa.head_detector_heatmaps(scores)
    assert len(fig.data) == 2 and {t.coloraxis for t in fig.data} == {"coloraxis"}
    np.testing.assert_array_equal(fig.data[0].z, scores["previous"].numpy())
    assert np.asarray(fig.data[1].z).shape == (L, H)
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0, 1)


# ---- parameters ------------------------------------------------------------------------------------------


def test_component_bar_and_treemap_add_up():
    cfg = PRESETS["gpt2-small"]
    table = param_table(cfg)
    comp = by_component(table)
    bar = fp.component_shares(comp, "t", tied=True)
    assert sum(bar.data[0].x) == total_params(cfg) == 124_439_808  # horizontal bars: one row per label
    assert any("LM head: 0 (tied" in hover for hover, _ in bar.data[0].customdata)
    assert bar.layout.xaxis.range[1] == max(bar.data[0].x)  # the longest bar spans the width
    tree = fp.param_treemap(table, "t")
    values = dict(zip(tree.data[0].ids, tree.data[0].values, strict=True))
    assert values["model"] == total_params(cfg)
    assert values["block 0"] == int(table[table["layer"] == 0]["count"].sum())
    assert "outside/LM head" not in values  # tied: no area of its own
    assert sum(values[f"block {i}"] for i in range(12)) + values["outside"] == values["model"]
    blocks = [i for i in tree.data[0].ids if i.startswith("block ") and "/" not in i]
    assert blocks == [f"block {i}" for i in range(12)] and tree.data[0].sort is False  # drawn in order, not by size
    many = fp.param_treemap(param_table(cfg.replace(n_layers=120)), "t", max_blocks=96)
    assert "120 blocks" in many.data[0].ids


@pytest.mark.parametrize(
    "preset,columns",
    [
        ("gpt2-xl", ["blocks 0-7", "blocks 8-15", "blocks 16-23", "blocks 24-31", "blocks 32-39", "blocks 40-47"]),
        ("gpt2-small", ["blocks 0-3", "blocks 4-7", "blocks 8-11"]),
    ],
)
def test_the_treemap_lays_the_blocks_in_columns_in_their_order(preset, columns):
    """Squarified tiling scattered GPT-2 XL's equal blocks (0-5 down, 6-11 across, 12 down, 18 across...): the
    blocks now sit in columns of consecutive blocks, the columns side by side (slice-dice), each headed by its
    range, and the areas still add up."""
    tree = fp.param_treemap(param_table(PRESETS[preset]), "t").data[0]
    parent = dict(zip(tree.ids, tree.parents, strict=True))
    value = dict(zip(tree.ids, tree.values, strict=True))
    assert [i for i in tree.ids if parent[i] == "model"] == ["outside", *columns]
    per_column = PRESETS[preset].n_layers // len(columns)
    for c, column in enumerate(columns):
        inside = [i for i in tree.ids if parent[i] == column]
        assert inside == [f"block {b}" for b in range(c * per_column, (c + 1) * per_column)]
        assert value[column] == sum(value[b] for b in inside)
    assert value["outside"] + sum(value[c] for c in columns) == value["model"]
    assert tree.tiling.packing == "slice-dice" and tree.sort is False and tree.maxdepth == 4


def test_blocks_per_column_fills_every_column_where_it_can():
    assert [fp.blocks_per_column(n) for n in (1, 2, 4, 12, 24, 36, 48, 96)] == [1, 2, 2, 4, 6, 6, 8, 12]
    assert fp.blocks_per_column(7) == 3 and fp.blocks_per_column(13) == 4  # primes: a shorter last column
    seven = fp.param_treemap(param_table(PRESETS["tiny"].replace(n_layers=7)), "t").data[0]
    parent = dict(zip(seven.ids, seven.parents, strict=True))
    assert [i for i in seven.ids if parent[i] == "model"] == ["outside", "blocks 0-2", "blocks 3-5", "block 6"]


def test_untied_head_appears_in_the_treemap():
    cfg = PRESETS["gpt2-small-untied-noqkvbias"]
    values = dict(zip(*[fp.param_treemap(param_table(cfg), "t").data[0][k] for k in ("ids", "values")], strict=True))
    assert values["outside/LM head"] == 50257 * 768


def test_layer_stacked_bar():
    table = param_table(PRESETS["tiny"])
    layers = by_layer(table)
    fig = fp.layer_stacked_bar(layers)
    assert len(fig.data) == layers.shape[1]
    per_block = sum(np.asarray(t.y) for t in fig.data)
    assert list(per_block) == [int(table[table["layer"] == i]["count"].sum()) for i in range(2)]


def test_presets_stacked_totals():
    names = ["gpt1", "gpt2-small", "gpt2-xl"]
    counts = {n: fp.group_counts(param_table(PRESETS[n])) for n in names}
    fig = fp.presets_stacked(counts)
    assert [t.name for t in fig.data[:5]] == list(fp.GROUP_ORDER)
    stacked = sum(np.asarray(t.y, dtype=np.int64) for t in fig.data[:5])
    assert list(stacked) == [total_params(PRESETS[n]) for n in names]
    assert counts["gpt2-xl"]["LM head"] == 0 and counts["gpt1"]["MLP"] == 12 * (2 * 768 * 3072 + 3072 + 768)


# ---- explainers ----------------------------------------------------------------------------------------------


def test_activation_figure_highlights_the_models_activation():
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    curves = analysis.activation_curves(x)
    fig = fx.activation_figure(x, curves, "gelu_tanh", [(-2.5, 2.5)], 0.01)
    assert len(fig.data) == 7  # 3 functions, 3 derivatives, 1 difference
    own = [t for t in fig.data if t.name and "this model" in t.name]
    assert len(own) == 2 and all(t.line.width == 5 for t in own)
    np.testing.assert_allclose(fig.data[0].y, curves["gelu"][0].numpy())
    np.testing.assert_allclose(fig.data[-1].y, (curves["gelu"][0] - curves["gelu_tanh"][0]).numpy())
    assert len(fig.layout.shapes) == 2  # the shaded region on both upper panels
    assert fig.layout.shapes[0].x0 == -2.5 and fig.layout.shapes[0].x1 == 2.5


def test_causal_mask_figure():
    mask = analysis.causal_mask(5)
    fig = fx.causal_mask_figure(mask, list("abcde"))
    np.testing.assert_array_equal(fig.data[0].z, np.tril(np.ones((5, 5))))
    assert "15 of 25" in fig.layout.title.text
    assert list(fig.data[0].customdata[3][1]) == ["d", "b", 3, 1]  # query and key text, then positions
    assert fig.layout.xaxis.type == "category" and fig.layout.xaxis.tickmode == "auto"  # labels thin to the width
    # the key axis is on top: its title and tick labels get their own band above the plot, under the figure title
    assert fig.layout.xaxis.side == "top" and fig.layout.margin.t >= 110 and fig.layout.title.yanchor == "top"


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_diagrams_follow_the_wiring(norm):
    nodes, skips = fx.block_layout(norm)
    labels = [label for label, _, _ in nodes]
    attn, first_add, ln_1 = labels.index("causal self-attention"), labels.index("+"), labels.index("LayerNorm ln_1")
    if norm == "pre":
        assert ln_1 < attn < first_add  # normalise, then attend, then add
        assert skips[0] == (0, first_add)
    else:
        assert attn < first_add < ln_1  # attend, add, then normalise the sum
    assert all(nodes[end][1] == "add" for _, end in skips)
    # each skip leaves from the node below its sub-layer; the stream's hooks sit on what carries the stream on
    assert skips == ([(0, 3), (3, 6)] if norm == "pre" else [(0, 2), (3, 5)])
    hooks = {hook: label for label, _, hook in nodes if hook}
    stream = ("+", "+") if norm == "pre" else ("LayerNorm ln_1", "LayerNorm ln_2")
    assert (hooks["hook_resid_mid"], hooks["hook_resid_post"]) == stream
    assert hooks["hook_resid_pre"] == labels[0] and hooks["hook_mlp_out"] == "MLP" and len(nodes) == 8
    fig = fx.block_diagram(norm)
    texts = [a.text for a in fig.layout.annotations]
    for label in set(labels):
        assert label in texts
    assert sum(1 for s in fig.layout.shapes if s.type == "path") == 2  # two residual connections
    with pytest.raises(ValueError):
        fx.block_layout("middle")


def test_token_text_is_escaped_for_plotly(run):
    """Plotly reads <b>, <br>, <a> in any string it draws; token text must arrive as entities."""
    model, ids, _, cache = run
    labels = ["<b>", "a&b", "<br>", "x", "<a href=x>", "y", "z", "w"]
    figs = [
        fe.embedding_panels(
            cache["hook_embed"], cache["hook_pos_embed"], cache["blocks.0.hook_resid_pre"], labels, range(0, 4)
        ),
        fe.token_similarity(analysis.cosine_similarity_matrix(cache["hook_embed"]), labels),
        fe.pca_scatter(np.zeros((1, 2)), ["<i>"], np.zeros((8, 2)), labels, (0.5, 0.2)),
        fa.residual_norm_heatmap(analysis.residual_norms(cache), labels),
        fa.top_neurons_bar([(0, 1, 0.5)], "<b>"),
        fx.causal_mask_figure(analysis.causal_mask(8), labels),
    ]
    lens = analysis.logit_lens(model, cache)
    figs.append(fa.logit_lens_heatmap(lens.top_probs, [labels] * (L + 1), labels, labels, lens.target_probs))
    figs.append(fa.final_prediction_lines(lens.target_probs, 0, "<b>", "<br>"))
    for fig in figs:
        # ours: the panel titles' two lines, and the <br> a long title is broken with (between words only)
        title = fig.layout.title.text or ""
        drawn = [
            t.replace("<br>", " ") if t == title else t for t in strings(fig.to_dict()) if t not in fe.PANEL_TITLES
        ]
        assert not [t for t in drawn if "<" in t or ">" in t]
        assert any("&lt;b&gt;" in t or "&lt;i&gt;" in t for t in drawn)


def strings(node, key=""):
    """Every string Plotly draws from a figure dict (templates excluded: their tags are ours)."""
    if key in ("hovertemplate", "texttemplate", "template"):
        return
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from strings(v, k)
    elif isinstance(node, (list, tuple, np.ndarray)):
        for v in node.ravel() if isinstance(node, np.ndarray) and node.dtype == object else node:
            yield from strings(v, key)


def test_a_two_line_title_gets_room_above_the_plot():
    import numpy as np

    from gptviz.figures import norms_depth as fnd

    sweep = {"depth": np.array([1, 2, 4]), "pre": np.array([1.0, 0.8, 0.6]), "post": np.array([1.0, 0.9, 0.8])}
    fig = fnd.depth_sweep(sweep, "random tokens")
    from gptviz.figures.common import EXTRA_LINE_SHIFT, TOOLBAR_ROOM, title_room

    assert fig.layout.title.text.count("<br>") == 1
    assert fig.layout.margin.t == title_room(2) + EXTRA_LINE_SHIFT == title_room(1) + 20 + EXTRA_LINE_SHIFT
    # the title starts below the strip where the hover toolbar appears (padded for the line Plotly lifts a second
    # line's title by; tests/browser/test_browser.py measures it against the toolbar), and the margin holds both
    assert (fig.layout.title.yref, fig.layout.title.y, fig.layout.title.yanchor) == ("container", 1, "top")
    assert fig.layout.title.pad.t == TOOLBAR_ROOM + EXTRA_LINE_SHIFT
    assert fig.layout.margin.t >= fig.layout.title.pad.t + 2 * 20


def test_attribution_bars_colour_a_sign_as_the_layer_head_grid_beside_them_does():
    """A head pushing towards the target is red in the bars and red in the grid (RdBu_r puts red at the top)."""
    import plotly.colors as pc

    from gptviz.figures import why as fw

    bars = fw.attribution_bars(["L0H0", "L0H1"], [1.5, -1.5], title="t")
    grid = fw.layer_head_grid(np.array([[1.5, -1.5]]), title="t", colorbar="logit diff")
    scale = (
        pc.get_colorscale(grid.data[0].colorscale)
        if isinstance(grid.data[0].colorscale, str)
        else grid.data[0].colorscale
    )

    def rgb(colour):
        return pc.unlabel_rgb(pc.convert_colors_to_same_type(colour, "rgb")[0][0])

    top, bottom = rgb(scale[-1][1]), rgb(scale[0][1])  # the grid's colours for +1.5 and -1.5
    up, down = (rgb(c) for c in bars.data[0].marker.color)
    assert top[0] > top[2] and up[0] > up[2]  # positive: red in both
    assert bottom[2] > bottom[0] and down[2] > down[0]  # negative: blue in both
