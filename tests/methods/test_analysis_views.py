"""Analysis behind the Embeddings/Activations/Explainers pages, and the export helpers, each checked
against an independent computation."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from gptviz import capture
from gptviz import methods as analysis
from gptviz.export import (
    capture_arrays,
    capture_npz,
    csv_bytes,
    load_npz,
    matrix_frame,
    prompt_capture_npz,
)
from gptviz.model.sizes import export_nbytes
from tests.support.models import SMALL, build, random_ids

L, D, FF, V = SMALL.n_layers, SMALL.d_model, SMALL.d_ff, SMALL.vocab_size
T = 9


def unbatched(model, ids):
    """(logits [T, V], cache of [T, ...] tensors): the one prompt of a batched capture, as the pages read theirs
    (ActivationCache.prompt(0))."""
    logits, cache = capture(model, ids[None])
    return logits[0], cache.prompt(0)


@pytest.fixture(
    params=[("pre", "layernorm"), ("post", "layernorm"), ("pre", "rmsnorm"), ("post", "rmsnorm")],
    ids=lambda p: "-".join(p),
)
def wired(request):
    norm, norm_type = request.param
    model = build(seed=3, norm=norm, norm_type=norm_type)
    ids = random_ids(T, seed=4)
    logits, cache = unbatched(model, ids)
    return model, ids, logits, cache


# ---- residual stream ------------------------------------------------------------------------------------


def test_residual_norms_are_norms_of_the_captured_stream(wired):
    model, _, _, cache = wired
    norms = analysis.residual_norms(cache)
    assert norms.shape == (L + 1, T)
    for i in range(L):
        np.testing.assert_allclose(
            norms[i].numpy(), np.linalg.norm(cache[f"blocks.{i}.hook_resid_pre"].numpy(), axis=-1), rtol=1e-5
        )
    np.testing.assert_allclose(
        norms[L].numpy(), torch.linalg.norm(cache[f"blocks.{L - 1}.hook_resid_post"], dim=-1).numpy(), rtol=1e-6
    )


@pytest.mark.slow
def test_branch_norms_match_attn_and_mlp_outputs(wired):
    _, _, _, cache = wired
    for suffix in ("hook_attn_out", "hook_mlp_out"):
        got = analysis.branch_norms(cache, suffix)
        assert got.shape == (L, T)
        for i in range(L):
            expected = torch.sqrt((cache[f"blocks.{i}.{suffix}"] ** 2).sum(-1))
            torch.testing.assert_close(got[i], expected, rtol=1e-5, atol=1e-7)


# ---- norm inputs: fed to the model's own norm modules they must give what the model produced ----------


def test_norm_inputs_reproduce_every_norm_output(wired):
    model, _, _, cache = wired
    inputs = analysis.norm_inputs(cache, model.config)
    assert list(inputs) == [f"blocks.{i}.ln_{j}" for i in range(L) for j in (1, 2)] + ["ln_f"]
    with torch.no_grad():
        for i, block in enumerate(model.blocks):
            b = f"blocks.{i}"
            torch.testing.assert_close(block.ln_1(inputs[f"{b}.ln_1"]), cache[f"{b}.ln_1.hook_normalized"])
            torch.testing.assert_close(block.ln_2(inputs[f"{b}.ln_2"]), cache[f"{b}.ln_2.hook_normalized"])
            if model.config.norm == "post":  # the normalised sums are the stream itself
                torch.testing.assert_close(block.ln_1(inputs[f"{b}.ln_1"]), cache[f"{b}.hook_resid_mid"])
                torch.testing.assert_close(block.ln_2(inputs[f"{b}.ln_2"]), cache[f"{b}.hook_resid_post"])
        torch.testing.assert_close(model.ln_f(inputs["ln_f"]), cache["ln_f.hook_normalized"])


def test_norm_input_stats_by_hand(wired):
    model, _, _, cache = wired
    stats = analysis.norm_input_stats(cache, model.config)
    inputs = analysis.norm_inputs(cache, model.config)
    assert stats.names == list(inputs) and stats.mean.shape == (2 * L + 1, T)
    for k, x in enumerate(inputs.values()):
        x = x.numpy().astype(np.float64)
        np.testing.assert_allclose(stats.mean[k].numpy(), x.mean(-1), rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(stats.var[k].numpy(), x.var(-1), rtol=1e-5)  # numpy: ddof=0
        np.testing.assert_allclose(stats.mean_square[k].numpy(), (x**2).mean(-1), rtol=1e-5)
    if model.config.norm_type == "layernorm":  # LayerNorm's output rebuilt from these statistics
        ln = model.blocks[0].ln_1
        x = inputs["blocks.0.ln_1"]
        rebuilt = (
            (x - stats.mean[0, :, None]) / torch.sqrt(stats.var[0, :, None] + ln.eps) * ln.weight + ln.bias
        ).detach()
        torch.testing.assert_close(rebuilt, cache["blocks.0.ln_1.hook_normalized"], rtol=1e-4, atol=1e-5)


# ---- logit lens -----------------------------------------------------------------------------------------


def test_logit_lens_last_layer_is_the_models_output(wired):
    model, _, logits, cache = wired
    lens = analysis.logit_lens(model, cache)
    assert lens.top_ids.shape == lens.top_probs.shape == lens.target_probs.shape == (L + 1, T)
    probs = logits.softmax(-1)
    torch.testing.assert_close(lens.top_ids[-1], logits.argmax(-1))
    torch.testing.assert_close(lens.target_ids, logits.argmax(-1))
    torch.testing.assert_close(lens.top_probs[-1], probs.max(-1).values, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(lens.target_probs[-1], probs.max(-1).values, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(
        analysis.lens_logits(model, cache[f"blocks.{L - 1}.hook_resid_post"]), logits, rtol=1e-5, atol=1e-5
    )


def test_logit_lens_first_layer_decodes_the_embeddings():
    model = build(seed=5)
    ids = random_ids(T, seed=6)
    _, cache = unbatched(model, ids)
    lens = analysis.logit_lens(model, cache)
    x = model.wte.weight[ids] + model.wpe.weight[:T]
    by_hand = F.layer_norm(x, (D,), model.ln_f.weight, model.ln_f.bias, model.ln_f.eps) @ model.wte.weight.T
    probs = by_hand.softmax(-1).detach()
    torch.testing.assert_close(lens.top_ids[0], probs.argmax(-1))
    torch.testing.assert_close(lens.top_probs[0], probs.max(-1).values, rtol=1e-5, atol=1e-7)
    final = lens.target_ids
    torch.testing.assert_close(lens.target_probs[0], probs[torch.arange(T), final], rtol=1e-5, atol=1e-8)
    assert not torch.is_grad_enabled() or lens.top_probs.grad_fn is None


def _lens_by_hand(model, cache_batched, ids):
    """target_probs recomputed state by state: ln_f then lm_head on each residual state [T, d], softmax, and the
    probability of the model's own final prediction at each position."""
    states = [cache_batched[f"blocks.{i}.hook_resid_pre"][0] for i in range(L)]
    states.append(cache_batched[f"blocks.{L - 1}.hook_resid_post"][0])
    with torch.no_grad():
        final = model(ids[None])[0].argmax(-1)
        rows = [model.lm_head(model.ln_f(s)).softmax(-1)[torch.arange(T), final] for s in states]
    return final, torch.stack(rows)


def test_logit_lens_reads_each_positions_own_distribution_on_a_capture_with_its_batch_axis():
    """`logits, cache = capture(model, [ids])` (the README's call) keeps a batch axis of 1: each position's target
    probability must come from that position's distribution, as from the unbatched cache the pages pass."""
    model = build(seed=11)
    ids = random_ids(T, seed=12)
    _, cache = capture(model, ids[None])
    final, by_hand = _lens_by_hand(model, cache, ids)
    for c in (cache, unbatched(model, ids)[1]):
        lens = analysis.logit_lens(model, c)
        torch.testing.assert_close(lens.target_probs.reshape(L + 1, T), by_hand, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(lens.target_ids.reshape(T), final)
        assert lens.target_probs.shape == lens.top_ids.shape == (L + 1, T) and lens.target_ids.shape == (T,)


def test_logit_lens_refuses_a_batch_of_two_clearly():
    model = build(seed=11)
    _, cache = capture(model, random_ids(T, batch=2, seed=12))
    with pytest.raises(ValueError, match="one prompt.*batch of 2"):
        analysis.logit_lens(model, cache)


# ---- MLP neurons ------------------------------------------------------------------------------------------


def test_top_neurons_are_the_largest_activations(model):
    _, cache = unbatched(model, random_ids(T, seed=7))
    post = cache.stack("mlp.hook_post")
    assert post.shape == (L, T, FF)
    rows = analysis.top_neurons(post, position=4, k=7)
    flat = post[:, 4].numpy().ravel()
    order = np.argsort(-flat)[:7]
    assert [(layer, neuron) for layer, neuron, _ in rows] == [(int(i) // FF, int(i) % FF) for i in order]
    for layer, neuron, value in rows:
        assert value == pytest.approx(float(post[layer, 4, neuron]))


def test_activation_histograms_match_numpy(model):
    _, cache = unbatched(model, random_ids(T, seed=8))
    post = cache.stack("mlp.hook_post")
    counts, edges = analysis.activation_histograms(post, bins=25)
    assert counts.shape == (L, 25) and edges.shape == (26,)
    assert float(edges[0]) == pytest.approx(float(post.min())) and float(edges[-1]) == pytest.approx(float(post.max()))
    for i in range(L):
        expected, _ = np.histogram(post[i].numpy().ravel(), bins=edges.numpy())
        np.testing.assert_array_equal(counts[i].numpy(), expected)
        assert counts[i].sum() == T * FF


def test_activation_histograms_of_constant_values():
    counts, edges = analysis.activation_histograms(torch.zeros(2, 3, 4), bins=4)
    assert edges[0] < 0 < edges[-1]
    assert counts.sum(1).tolist() == [12.0, 12.0]


# ---- embeddings --------------------------------------------------------------------------------------------


def test_cosine_similarity_matrix_against_pairwise_torch():
    x = torch.randn(6, 10, generator=torch.Generator().manual_seed(0))
    x[3] = x[1] * 2.5  # same direction: cosine 1
    sim = analysis.cosine_similarity_matrix(x)
    expected = F.cosine_similarity(x[:, None, :], x[None, :, :], dim=-1)
    torch.testing.assert_close(sim, expected, rtol=1e-5, atol=1e-6)
    assert sim[1, 3] == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(sim.diagonal(), torch.ones(6))


def test_pca_against_the_covariance_eigendecomposition():
    g = torch.Generator().manual_seed(1)
    scales = torch.tensor([5.0, 2.0, 1.0, 0.5, 0.1])
    x = torch.randn(400, 5, generator=g) * scales + torch.tensor([3.0, -1.0, 0.0, 2.0, 1.0])
    fit = analysis.pca(x, k=3)
    ratio = fit.explained_variance_ratio.numpy()
    assert ratio.shape == (3,) and np.all(np.diff(ratio) <= 0)  # largest first
    cov = np.cov(x.numpy().astype(np.float64), rowvar=False)
    eig = np.sort(np.linalg.eigvalsh(cov))[::-1]
    np.testing.assert_allclose(ratio, eig[:3] / eig.sum(), rtol=1e-4)
    np.testing.assert_allclose(fit.coords.numpy().var(0, ddof=1), eig[:3], rtol=1e-4)  # projected variance
    np.testing.assert_allclose(fit.mean.numpy(), x.numpy().mean(0), rtol=1e-5)
    # the first direction is the widest axis (±)
    assert abs(float(fit.components[0, 0])) > 0.99
    np.testing.assert_allclose(fit.components.numpy() @ fit.components.numpy().T, np.eye(3), atol=1e-5)


def test_vocab_sample_is_distinct_sorted_and_fixed():
    a = analysis.vocab_sample(1000, 200, seed=2)
    assert len(a) == 200 and len(set(a.tolist())) == 200 and a.tolist() == sorted(a.tolist())
    assert 0 <= int(a.min()) and int(a.max()) < 1000
    assert torch.equal(a, analysis.vocab_sample(1000, 200, seed=2))
    assert not torch.equal(a, analysis.vocab_sample(1000, 200, seed=3))
    assert len(analysis.vocab_sample(50, 500)) == 50  # never more than the vocabulary


# ---- explainers ----------------------------------------------------------------------------------------------


def test_causal_mask_is_what_the_attention_applies(model):
    mask = analysis.causal_mask(7)
    assert torch.equal(mask, torch.ones(7, 7, dtype=torch.bool).tril())
    _, cache = unbatched(model, random_ids(7, seed=9))
    pattern = cache["blocks.0.attn.hook_pattern"]  # [heads, T, T]
    assert torch.all(pattern[:, ~mask] == 0) and torch.all(pattern[:, mask] > 0)


def test_activation_curves_values_and_autograd_derivatives():
    x = torch.linspace(-5, 5, 201, dtype=torch.float64)
    curves = analysis.activation_curves(x)
    assert set(curves) == {"gelu", "gelu_tanh", "relu"}
    phi = torch.exp(-(x**2) / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    torch.testing.assert_close(curves["gelu"][0], x * cdf)
    torch.testing.assert_close(curves["gelu"][1], cdf + x * phi)  # closed form
    c = math.sqrt(2 / math.pi)
    u = c * (x + 0.044715 * x**3)
    th = torch.tanh(u)
    torch.testing.assert_close(curves["gelu_tanh"][0], 0.5 * x * (1 + th))
    torch.testing.assert_close(
        curves["gelu_tanh"][1], 0.5 * (1 + th) + 0.5 * x * (1 - th**2) * c * (1 + 3 * 0.044715 * x**2)
    )
    torch.testing.assert_close(curves["relu"][0], x.clamp(min=0))
    nonzero = x != 0
    torch.testing.assert_close(curves["relu"][1][nonzero], (x[nonzero] > 0).double())


def test_regions_where():
    x = torch.arange(10.0)
    mask = torch.tensor([0, 1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=torch.bool)
    assert analysis.regions_where(mask, x) == [(1.0, 2.0), (5.0, 5.0), (7.0, 9.0)]
    assert analysis.regions_where(torch.zeros(4, dtype=torch.bool), x[:4]) == []


def test_gelu_and_relu_differ_only_near_zero():
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    curves = analysis.activation_curves(x)
    ys = torch.stack([y for y, _ in curves.values()])
    regions = analysis.regions_where(ys.max(0).values - ys.min(0).values > 0.01, x)
    # |GELU - ReLU| = |x|·Φ(-|x|): above 0.01 for |x| from about 0.025 to 2.6 (both are 0 at x = 0)
    assert len(regions) == 2
    (a, b), (c, d) = regions
    assert -3 < a < -2 and -0.1 < b < 0 < c < 0.1 and 2 < d < 3
    assert a == pytest.approx(-d) and b == pytest.approx(-c)


# ---- export ---------------------------------------------------------------------------------------------------


def test_capture_npz_round_trip(model):
    ids = random_ids(T, seed=10)
    _, cache = unbatched(model, ids)
    data = capture_npz(ids.tolist(), cache)
    loaded = load_npz(data)
    assert set(loaded) == set(cache) | {"ids", "tokens"}
    for name, tensor in cache.items():
        np.testing.assert_array_equal(loaded[name], tensor.numpy())
        assert loaded[name].dtype == np.float32
    np.testing.assert_array_equal(loaded["ids"], ids.numpy())
    assert loaded["tokens"].shape == (T,)
    # a plain numpy.load reads it, with keys equal to hook names
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        assert npz["blocks.1.attn.hook_pattern"].shape == (SMALL.n_heads, T, T)


@pytest.mark.parametrize("include_attention", [True, False])
def test_prompt_capture_npz_holds_every_hook(model, include_attention):
    ids = random_ids(T, seed=11).tolist()
    loaded = load_npz(prompt_capture_npz(model, ids, include_attention=include_attention))
    _, cache = unbatched(model, torch.tensor(ids))
    attention = {n for n in cache if n.endswith(("hook_attn_scores", "hook_pattern"))}
    expected = set(cache) - (set() if include_attention else attention)
    assert set(loaded) == expected | {"ids", "tokens"}
    assert loaded["hook_pos_embed"].shape == (T, D)  # every position kept
    for name in expected:  # without the patterns the export runs the fused attention kernel: rounding apart
        np.testing.assert_allclose(loaded[name], cache[name].numpy(), rtol=1e-5, atol=1e-6)
    nbytes = sum(loaded[n].nbytes for n in expected)
    assert export_nbytes(model.config, T, include_attention) == nbytes


def test_capture_arrays_with_logits_and_reserved_names():
    arrays = capture_arrays([1, 2], {"hook_embed": torch.ones(2, 3)}, logits=torch.zeros(2, 5))
    assert arrays["logits"].shape == (2, 5) and arrays["ids"].tolist() == [1, 2]
    with pytest.raises(ValueError, match="reserved"):
        capture_arrays([1], {"ids": torch.ones(1)})


def test_matrix_frame_and_csv_round_trip():
    values = np.arange(6, dtype=float).reshape(2, 3)
    frame = matrix_frame(values, ["a", "a"], ["x", "y", "z"], "query", "key", "weight")
    assert list(frame.columns) == ["query_index", "query", "key_index", "key", "weight"]
    assert len(frame) == 6
    assert frame.loc[(frame.query_index == 1) & (frame.key == "z"), "weight"].item() == 5.0
    back = pd.read_csv(io.BytesIO(csv_bytes(frame)))
    pd.testing.assert_frame_equal(back, frame, check_dtype=False)


def test_csv_text_cells_that_a_spreadsheet_would_run_as_formulas_are_neutralised():
    frame = pd.DataFrame(
        {
            "token": ["=1+1", "+SUM(A1)", "-cmd", "@x", "\tx", "plain", " =lead-space"],
            "weight": [-0.5, 0.25, -1.0, 2.0, 0.0, 1.0, -3.0],
            "=head": range(7),
        }
    )
    back = pd.read_csv(io.BytesIO(csv_bytes(frame)), keep_default_na=False)
    assert list(back["token"]) == ["'=1+1", "'+SUM(A1)", "'-cmd", "'@x", "'\tx", "plain", " =lead-space"]
    assert list(back["weight"]) == [-0.5, 0.25, -1.0, 2.0, 0.0, 1.0, -3.0]  # numbers keep their sign
    assert list(back.columns) == ["token", "weight", "'=head"]
    assert list(frame["token"])[0] == "=1+1"  # the caller's frame is untouched
