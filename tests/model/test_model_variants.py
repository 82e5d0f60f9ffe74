"""The config's variants for models trained elsewhere: no biases at all (nanoGPT's bias=False) and no final norm
(GPT-1). Counts follow, and the views that read biases or the final norm work on such models."""

from __future__ import annotations

import pytest
import torch

from gptviz import ConfigError, GPTConfig, capture
from gptviz import methods as analysis
from gptviz.index.effects import direct_effect, head_direct_effect
from gptviz.methods.attribution import direct_logit_attribution
from gptviz.model.hooks import ActivationCache
from gptviz.model.params import format_table, meta_param_table, param_count, param_table, total_params
from gptviz.model.weights import load_checkpoint, save_checkpoint
from tests.support.models import SMALL, build, random_ids

NO_BIAS = dict(bias=False, qkv_bias=False)


def test_bias_false_needs_qkv_bias_false_and_names_it():
    with pytest.raises(ConfigError, match="qkv_bias=False"):
        SMALL.replace(bias=False)
    with pytest.raises(ConfigError, match="final_norm"):
        SMALL.replace(final_norm="no")


@pytest.mark.parametrize(
    "changes",
    [
        NO_BIAS,
        dict(final_norm=False),
        dict(final_norm=False, norm="post"),
        dict(NO_BIAS, final_norm=False, tie_weights=False, norm_type="rmsnorm"),
    ],
)
def test_counts_by_formula_equal_the_module_tree(changes):
    cfg = SMALL.replace(**changes)
    model = build(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert param_count(cfg) == total_params(cfg) == int(meta_param_table(cfg)["count"].sum()) == n
    names = set(param_table(cfg)["name"])
    assert names == {k for k, _ in model.named_parameters(remove_duplicate=False)}
    if not cfg.bias:
        assert not any(name.endswith("bias") for name in names)
    if not cfg.final_norm:
        assert not any(name.startswith("ln_f") for name in names)


def test_gpt2_small_without_biases_has_the_counts_nanogpt_prints():
    # nanoGPT's default GPT-2 small (vocab 50,304, bias=False) prints "number of parameters: 123.59M", a count
    # that leaves out the position embedding
    cfg = GPTConfig(vocab_size=50304, n_layers=12, n_heads=12, d_model=768, **NO_BIAS)
    assert param_count(cfg) == 124_373_760
    assert round((param_count(cfg) - 1024 * 768) / 1e6, 2) == 123.59
    assert "no biases" in format_table(cfg) and "no final norm" in format_table(cfg.replace(final_norm=False))


def test_without_biases_the_biases_are_fixed_zeros_that_no_state_dict_or_optimizer_sees(tmp_path):
    model = build(**NO_BIAS, seed=2)
    mlp = model.blocks[0].mlp
    assert torch.equal(mlp.c_fc.bias, torch.zeros_like(mlp.c_fc.bias)) and "bias" in dict(mlp.c_fc.named_buffers())
    assert model.blocks[0].attn.c_attn.bias is None and torch.count_nonzero(model.ln_f.bias) == 0
    assert not any("bias" in k for k in model.state_dict())
    loss = model(random_ids(8)).logsumexp(-1).mean()
    loss.backward()
    assert mlp.c_fc.bias.grad is None  # a buffer: training never moves it
    save_checkpoint(model, tmp_path / "nobias")
    loaded = load_checkpoint(tmp_path / "nobias")
    assert loaded.config == model.config
    ids = random_ids(10, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)
    half = build(**NO_BIAS).to(torch.bfloat16)
    assert half.blocks[0].mlp.c_proj.bias.dtype == torch.bfloat16


def test_without_a_final_norm_the_lm_head_reads_the_last_block_and_the_hook_still_fires():
    model = build(final_norm=False, norm="post", seed=4)
    ids = random_ids(9, seed=5)
    logits, cache = capture(model, ids)
    last = cache[f"blocks.{SMALL.n_layers - 1}.hook_resid_post"]
    torch.testing.assert_close(cache["ln_f.hook_normalized"], last)
    torch.testing.assert_close(logits, last @ model.lm_head.weight.detach().T, rtol=1e-5, atol=1e-5)
    assert model.ln_f.weight is None and model.ln_f.bias is None


def _unbatched(model, ids):
    logits, cache = capture(model, ids[None])
    return logits[0], ActivationCache({k: v[0] for k, v in cache.items()}, model.config.n_layers)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_lens_norm_statistics_and_direct_effects_without_a_final_norm(norm):
    model = build(final_norm=False, norm=norm, seed=6)
    ids = random_ids(9, seed=7)
    logits, cache = _unbatched(model, ids)
    lens = analysis.logit_lens(model, cache)
    torch.testing.assert_close(lens.top_ids[-1], logits.argmax(-1))
    x = cache["hook_embed"] + cache["hook_pos_embed"]  # the first row: the embeddings decoded with no norm
    torch.testing.assert_close(lens.top_ids[0], (x @ model.lm_head.weight.detach().T).argmax(-1))
    stats = analysis.norm_input_stats(cache, model.config)
    assert "ln_f" not in stats.names and len(stats.names) == 2 * SMALL.n_layers
    effect = direct_effect(model, 1, 3)
    assert effect.effect.shape == (SMALL.vocab_size,) and torch.isfinite(effect.effect).all()
    assert torch.isfinite(head_direct_effect(model, 0, 1, source_token=5).effect).all()
    if norm == "pre":  # the neuron's output weights read straight by the unembedding: nothing folded in between
        w_out = model.blocks[1].mlp.c_proj.weight.detach()[:, 3]
        torch.testing.assert_close(effect.effect, w_out @ model.lm_head.weight.detach().T)


@pytest.mark.parametrize("changes", [dict(final_norm=False), NO_BIAS])
def test_direct_attribution_parts_sum_to_the_logit_difference(changes):
    model = build(**changes, seed=8)
    ids = random_ids(11, seed=9)
    logits, _ = capture(model, ids, ())
    dla = direct_logit_attribution(model, ids, target=7, other=40)
    assert float(dla.values.sum()) == pytest.approx(float(logits[0, -1, 7] - logits[0, -1, 40]), abs=1e-4)
    assert ("final norm bias" in dla.labels) == changes.get("final_norm", True)


@pytest.mark.slow
@pytest.mark.hf
def test_transformer_lens_refuses_no_final_norm_and_takes_no_biases_as_zeros():
    from gptviz.interop.tlens import InteropError, check_convertible, to_hf_gpt2

    with pytest.raises(InteropError, match="final norm"):
        check_convertible(SMALL.replace(final_norm=False))
    pytest.importorskip("transformers")
    model = build(**NO_BIAS, seed=10)
    ids = random_ids(7, seed=11)
    with torch.no_grad():
        torch.testing.assert_close(to_hf_gpt2(model)(ids[None]).logits, model(ids[None]), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_later_config_fields_keep_the_shipped_indexes_fingerprints():
    """bias and final_norm came after the bundled indexes were built: at their defaults they leave a model's
    fingerprint as it was (else the unit page finds no index for a bundled model), and set otherwise they change it."""
    import json

    from gptviz import GPT, load_pretrained
    from gptviz.index import index_folder, model_fingerprint
    from gptviz.model.weights import bundled_models

    for name in bundled_models():
        meta = json.loads((index_folder(name) / "index.json").read_text())
        assert model_fingerprint(load_pretrained(name)) == meta["model"]["fingerprint"], name
    plain = GPT(GPTConfig(vocab_size=101, n_ctx=16, d_model=32, n_layers=2, n_heads=4))
    assert model_fingerprint(plain) != model_fingerprint(GPT(plain.config.replace(final_norm=False)))
