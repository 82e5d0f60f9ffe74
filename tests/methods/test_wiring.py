"""gptviz.methods.wiring: one set of weights run pre- and post-norm, measured per layer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gptviz import GPTConfig, capture
from gptviz.methods import wiring

CFG = GPTConfig(vocab_size=211, n_ctx=32, d_model=32, n_layers=3, n_heads=4, name="wiring-test")
IDS = tuple(int(i) for i in torch.randint(0, 211, (12,), generator=torch.Generator().manual_seed(3)))


@pytest.fixture(scope="module")
def twins():
    return wiring.twin_models(CFG, seed=5)


def test_twins_share_one_state_dict(twins):
    pre, post = twins["pre"], twins["post"]
    assert (pre.config.norm, post.config.norm) == ("pre", "post")
    assert pre.config.replace(norm="post") == post.config
    a, b = pre.state_dict(), post.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert post.lm_head.weight is post.wte.weight  # still tied after assign=True
    # Only the wiring differs, and it changes the output.
    x = torch.tensor([IDS])
    assert not torch.allclose(pre(x), post(x))


def test_twins_are_reproducible_from_the_seed():
    again = wiring.twin_models(CFG, seed=5)["pre"].state_dict()
    other = wiring.twin_models(CFG, seed=6)["pre"].state_dict()
    first = wiring.twin_models(CFG, seed=5)["pre"].state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["blocks.0.mlp.c_fc.weight"], other["blocks.0.mlp.c_fc.weight"])


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_gradient_norms_match_manual_autograd(twins, norm):
    model = twins[norm]
    stats = wiring.measure_wiring(model, IDS)
    ids = torch.tensor([IDS])
    logits = model(ids)
    loss = F.cross_entropy(logits[0, :-1], ids[0, 1:])
    assert stats.loss == pytest.approx(float(loss.detach()), rel=1e-6)
    for i, block in enumerate(model.blocks):
        names, params = zip(*block.named_parameters(), strict=True)
        grads = torch.autograd.grad(loss, params, retain_graph=True)
        manual = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        assert stats.grad_norm[i] == pytest.approx(manual, rel=1e-5)
        by_name = dict(zip(names, grads, strict=True))
        assert stats.grad_by_param["mlp.c_fc.weight"][i] == pytest.approx(
            float(by_name["mlp.c_fc.weight"].norm()), rel=1e-5
        )
        ffn = math.sqrt(sum(float(by_name[p].pow(2).sum()) for p in wiring.FFN_WEIGHTS))
        assert stats.grad("ffn")[i] == pytest.approx(ffn, rel=1e-5)
        attn = math.sqrt(sum(float(g.pow(2).sum()) for n, g in by_name.items() if n.startswith("attn.")))
        assert stats.grad("attention")[i] == pytest.approx(attn, rel=1e-5)
    # the groups partition the block
    groups = np.sqrt(sum(v**2 for v in stats.grad_by_group.values()))
    np.testing.assert_allclose(groups, stats.grad_norm, rtol=1e-6)
    assert all(p.grad is None for p in model.parameters())  # nothing written on a possibly shared model


def test_activation_measurements_match_a_capture(twins):
    for norm in ("pre", "post"):
        model = twins[norm]
        stats = wiring.measure_wiring(model, IDS)
        _, cache = capture(model, torch.tensor([IDS]))
        resid = cache.resid_stream()[:, 0]  # [L + 1, T, d]
        np.testing.assert_allclose(stats.resid_norm, resid.norm(dim=-1).mean(-1).numpy(), rtol=1e-5)
        np.testing.assert_allclose(stats.resid_std, resid.flatten(1).std(-1).numpy(), rtol=1e-5)
        np.testing.assert_allclose(
            stats.mlp_out_std, cache.stack("hook_mlp_out")[:, 0].flatten(1).std(-1).numpy(), rtol=1e-5
        )
        np.testing.assert_allclose(stats.patterns, cache.patterns()[:, 0].numpy(), atol=1e-6)
    post = wiring.measure_wiring(twins["post"], IDS)
    # post-norm's LayerNorm (gain 1, bias 0 at init) leaves each position with norm sqrt(d_model)
    np.testing.assert_allclose(post.resid_norm[1:], math.sqrt(CFG.d_model), rtol=1e-3)


def test_compare_wirings_reports_progress_and_equal_weights():
    messages = []
    out = wiring.compare_wirings(CFG, IDS, seed=1, init="xavier", progress=messages.append)
    assert set(out) == {"pre", "post"} and len(messages) == 3
    assert out["pre"].weights_checksum == out["post"].weights_checksum
    assert out["pre"].n_tokens == len(IDS) and out["pre"].patterns.shape == (3, 4, len(IDS), len(IDS))


def test_measure_rejects_one_token_and_bad_ids(twins):
    with pytest.raises(ValueError, match="at least two tokens"):
        wiring.measure_wiring(twins["pre"], [5])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        wiring.measure_wiring(twins["pre"], [5, 999])


@pytest.mark.slow
@pytest.mark.parametrize("init", ["gpt2", "xavier"])
def test_xiong_direction_post_over_pre_ratio_rises_toward_the_output(init):
    """The relation that holds on decoder-only GPTs at init: post/pre gradient norm (the FFN matrices
    Xiong et al. plot) is larger at the last layer than at the first, on a 12-layer model."""
    cfg = GPTConfig(vocab_size=50257, n_ctx=64, d_model=96, n_layers=12, n_heads=4, name="xiong")
    for seed in (0, 1):
        ids = wiring.random_tokens(48, cfg.vocab_size, seed)
        stats = wiring.compare_wirings(cfg, ids, seed=seed, init=init)
        ratio = stats["post"].grad("ffn") / stats["pre"].grad("ffn")
        assert ratio[-1] > ratio[0], (init, seed, ratio)
        reading = wiring.describe_gradients(stats["pre"].grad("ffn"), stats["post"].grad("ffn"))
        assert reading.ratio.ratio == pytest.approx(ratio[-1] / ratio[0])


def test_trend_words_follow_the_numbers():
    layers = np.arange(12)
    assert wiring.trend(2.0 * 0.9**layers).word == "shrinks"
    assert wiring.trend(0.5 * 1.1**layers).word == "grows"
    assert wiring.trend(np.ones(12) + 0.01 * np.sin(layers)).word == "stays roughly level"
    dip = 1.1**layers
    dip[-1] = 0.5  # the endpoints say x0.5 while the fitted line rises: no clear trend
    t = wiring.trend(dip)
    assert t.word == "has no clear trend" and t.outlier == 11 and t.ratio == pytest.approx(0.5)
    assert t.per_layer > 1
    assert wiring.trend(2.0 * 0.9**layers).per_layer == pytest.approx(0.9)
    with pytest.raises(ValueError):
        wiring.trend([1.0, 0.0])


def test_describe_gradients_states_what_the_numbers_show():
    layers = np.arange(12)
    pre, post = 4.0 * 0.93**layers, np.full(12, 0.15)
    reading = wiring.describe_gradients(pre, post)
    assert reading.pre.word == "shrinks" and reading.post.word == "stays roughly level"
    assert reading.ratio.word == "grows"
    assert reading.statements[0].startswith("Pre-norm gradient norms shrink from the first layer to the last: 4 → ")
    assert f"×{(post[-1] / pre[-1]) / (post[0] / pre[0]):.2f}" in reading.statements[2]
    claims = dict(reading.paper)
    assert list(claims.values()) == [False, True, False, False]
    # Figure 3 as drawn: post grows toward the output, pre level
    fig3 = wiring.describe_gradients(np.full(12, 1.0), 0.5 * 1.2**layers)
    assert [ok for _, ok in fig3.paper] == [True, True, True, True]
    with pytest.raises(ValueError):
        wiring.describe_gradients([1.0], [2.0])


def test_depth_exponent_and_sweep():
    depths = np.array([2, 4, 8, 16, 32])
    assert wiring.depth_exponent(depths, 3.0 / np.sqrt(depths)) == pytest.approx(-0.5)
    assert wiring.depth_exponent(depths, np.full(5, 0.2)) == pytest.approx(0.0, abs=1e-12)
    sweep = wiring.depth_sweep(CFG, [1, 2], IDS, seed=0)
    assert list(sweep["depth"]) == [1, 2] and np.all(sweep["pre"] > 0) and np.all(sweep["post"] > 0)
    direct = wiring.compare_wirings(CFG.replace(n_layers=2), IDS, seed=0)
    assert sweep["pre"][1] == pytest.approx(direct["pre"].grad("ffn")[-1])


def test_attention_tv_distance():
    T = 4
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    diag = np.eye(T)
    pats = np.broadcast_to(uniform, (2, 3, T, T))
    assert np.allclose(wiring.attention_tv_distance(pats, pats), 0.0)
    tv = wiring.attention_tv_distance(uniform[None, None], diag[None, None])
    # row i: 0.5 * (|1/(i+1) - 1| + i/(i+1)) = i/(i+1)
    assert tv[0, 0] == pytest.approx(np.mean([i / (i + 1) for i in range(T)]))


def test_relative_entropy():
    T = 5
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    assert wiring.relative_entropy(uniform[None, None])[0, 0] == pytest.approx(1.0)
    assert wiring.relative_entropy(np.eye(T)[None, None])[0, 0] == pytest.approx(0.0)
    half = np.eye(T)
    half[1] = [0.5, 0.5, 0, 0, 0]  # row 1 uniform over its two keys, the others one-hot
    assert wiring.relative_entropy(half[None, None])[0, 0] == pytest.approx(1 / (T - 1))


def test_trained_twins_and_history(tmp_path):
    pairs = wiring.trained_twins(["a-pre", "a-post", "b-pre", "c-post", "gpt2"])
    assert [(p.stem, p.pre, p.post) for p in pairs] == [("a", "a-pre", "a-post")]
    assert wiring.load_history(tmp_path) is None
    (tmp_path / "history.json").write_text("{not json")
    assert wiring.load_history(tmp_path) is None
    record = {"step": 1, "lr": 0.1, "train_loss": 3.0, "grad_norm": 1.0, "val_loss": None, "elapsed_s": 0.1}
    (tmp_path / "history.json").write_text(json.dumps({"settings": {}, "final": {}, "history": [record]}))
    assert wiring.load_history(tmp_path)["history"] == [record]


def test_differing_settings_names_only_what_differs():
    same = {"lr": 0.005, "steps": 5000, "nested": {"a": 1}}
    assert wiring.differing_settings({"pre": same, "post": dict(same)}) == {}
    diff = wiring.differing_settings(
        {
            "pre": {**same, "warmup": 100},
            "post": {**same, "warmup": 1000},
            "other": {**same, "warmup": 100, "nested": {"a": 2}},
        }
    )
    assert diff == {
        "nested": {"pre": {"a": 1}, "post": {"a": 1}, "other": {"a": 2}},
        "warmup": {"pre": 100, "post": 1000, "other": 100},
    }
    # a setting only one run has counts as different (None for the others)
    assert wiring.differing_settings({"a": {"x": 1}, "b": {}}) == {"x": {"a": 1, "b": None}}
    # values compare as the JSON data the records are: a tuple like a list, 1 like 1.0
    assert wiring.differing_settings({"a": {"x": (1, 2), "y": 1}, "b": {"x": [1, 2], "y": 1.0}}) == {}


def test_recipe_differences_reads_settings_through_differing_settings():
    from gptviz.training.evaluate import recipe_differences

    pre = {"data": "tiny", "settings": {"lr": 0.003, "grad_clip": 1, "warmup": 100, "nested": {"a": 1}}}
    post = {"data": "tiny", "settings": {"lr": 0.003, "grad_clip": 1.0, "warmup": 900, "nested": {"a": 2}}}
    assert list(wiring.differing_settings({"pre": pre["settings"], "post": post["settings"]})) == ["nested", "warmup"]
    # the same comparison, less warmup (which twins may differ in), as the Norms page's phrases
    assert recipe_differences(pre, post) == ["stage 1: nested {'a': 1} against {'a': 2}"]
