"""TransformerLens interop (gptviz[transformer-lens]): a gptviz GPT as a TransformerBridge and back, with equal logits
and equal values at every shared hook point, both directions; what has no equivalent is refused with a message.
No network: models are built from configs with random weights (biases and norms perturbed, so that a swapped or
dropped parameter shows), and GPT-2's tokenizer is built from the bundled BPE file."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformer_lens")
transformers = pytest.importorskip("transformers")

from gptviz import GPT, GPTConfig, capture, get_tokenizer  # noqa: E402
from gptviz.interop.hf_tokenizer import gpt2_hf_tokenizer  # noqa: E402
from gptviz.interop.tlens import (  # noqa: E402
    InteropError,
    cache_from_transformer_lens,
    from_transformer_lens,
    tl_hook_name,
    to_transformer_lens,
)

ATOL = 1e-4
TINY = dict(vocab_size=50257, n_ctx=24, d_model=32, n_layers=2, n_heads=4)


def perturbed(config: GPTConfig, seed: int = 0) -> GPT:
    """A model whose biases and norm weights are not the init's 0 and 1."""
    model = GPT(config, seed=seed).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return model


def ids_batch(seed: int = 3, batch: int = 2, T: int = 11) -> torch.Tensor:
    return torch.randint(0, 50257, (batch, T), generator=torch.Generator().manual_seed(seed))


def assert_hooks_equal(ours, theirs, names) -> int:
    """Every gptviz hook value equals TransformerLens's under tl_hook_name; returns how many were compared."""
    compared = 0
    for name in names:
        a, t = ours[name], theirs[tl_hook_name(name)].detach().float()
        if name == "hook_pos_embed":  # gptviz keeps one row for the batch, TransformerLens repeats it
            a = a.expand_as(t)
        assert a.shape == t.shape, name
        if name.endswith("hook_attn_scores"):  # masked: -inf in gptviz, the lowest float in TransformerLens
            masked = torch.isinf(a)
            assert masked.sum() == a.shape[0] * a.shape[1] * (a.shape[2] * (a.shape[2] - 1) // 2)
            assert (t[masked] < -1e30).all(), name
            a, t = a[~masked], t[~masked]
        torch.testing.assert_close(a, t, atol=ATOL, rtol=1e-4, msg=name)
        compared += 1
    return compared


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        dict(activation="gelu_tanh"),
        dict(activation="gelu", tie_weights=False),
        dict(activation="relu", qkv_bias=False, d_ff=48),
    ],
)
def test_gptviz_model_in_transformer_lens(changes):
    model = perturbed(GPTConfig(**TINY, **changes))
    bridge = to_transformer_lens(model)
    ids = ids_batch()
    logits, cache = capture(model, ids)
    tl_logits, tl_cache = bridge.run_with_cache(ids)
    torch.testing.assert_close(logits, tl_logits.float(), atol=ATOL, rtol=1e-4)
    assert logits.abs().max() > 0.1  # not a trivially zero comparison
    n = assert_hooks_equal(cache, tl_cache, model.hook_names)
    assert n == len(model.hook_names) == 4 + 15 * 2


@pytest.mark.slow
def test_transformer_lens_gpt2_in_gptviz():
    hf_config = transformers.GPT2Config(
        vocab_size=50257, n_positions=24, n_embd=32, n_layer=3, n_head=2, activation_function="gelu_new"
    )
    torch.manual_seed(5)
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    import transformer_lens.model_bridge.sources  # noqa: F401
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=hf, tokenizer=gpt2_hf_tokenizer()).eval()
    model = from_transformer_lens(bridge)
    assert (model.config.n_layers, model.config.n_heads, model.config.d_model) == (3, 2, 32)
    assert model.config.activation == "gelu_tanh" and model.config.tie_weights
    ids = ids_batch(seed=9)
    tl_logits, tl_cache = bridge.run_with_cache(ids)
    logits, cache = capture(model, ids)
    torch.testing.assert_close(logits, tl_logits.float(), atol=ATOL, rtol=1e-4)
    assert assert_hooks_equal(cache, tl_cache, model.hook_names) == 4 + 15 * 3
    # and the TransformerLens cache itself, read under gptviz's names
    converted = cache_from_transformer_lens(tl_cache)
    assert converted.n_layers == 3 and set(converted) == set(model.hook_names)
    torch.testing.assert_close(converted.patterns(), cache.patterns(), atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(
        converted["blocks.1.attn.hook_attn_scores"], cache["blocks.1.attn.hook_attn_scores"], atol=ATOL, rtol=1e-4
    )  # the mask as gptviz writes it: -inf
    one = cache_from_transformer_lens(tl_cache, batch_index=1)
    torch.testing.assert_close(one.pattern(2), cache.pattern(2)[1:2], atol=ATOL, rtol=1e-4)


@pytest.mark.slow
def test_round_trip_keeps_every_weight():
    model = perturbed(GPTConfig(**TINY, tie_weights=False), seed=4)
    back = from_transformer_lens(to_transformer_lens(model))
    assert back.config == model.config.replace(dropout=0.0)
    for key, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


@pytest.mark.slow
def test_processed_weights_are_refused():
    bridge = to_transformer_lens(perturbed(GPTConfig(**TINY)))
    bridge.enable_compatibility_mode()  # fold_ln and centring: another function's weights
    with pytest.raises(InteropError, match="fold_ln"):
        from_transformer_lens(bridge)


def test_what_has_no_equivalent_is_refused():
    with pytest.raises(InteropError, match="post-norm"):
        to_transformer_lens(GPT(GPTConfig(**TINY, norm="post")))
    with pytest.raises(InteropError, match="rmsnorm"):
        to_transformer_lens(GPT(GPTConfig(**TINY, norm_type="rmsnorm")))
    with pytest.raises(InteropError, match="GPT-2 family"):
        from_transformer_lens(torch.nn.Linear(2, 2))


def test_hook_names_map_to_transformer_lens():
    assert tl_hook_name("blocks.3.attn.hook_pattern") == "blocks.3.attn.hook_pattern"
    assert tl_hook_name("blocks.10.ln_2.hook_normalized") == "blocks.10.ln2.hook_out"
    assert tl_hook_name("ln_f.hook_normalized") == "ln_final.hook_out"
    assert tl_hook_name("hook_logits") == "hook_unembed"


@pytest.mark.slow
def test_offline_tokenizer_equals_gptviz_tokenizer():
    hf_tok, enc = gpt2_hf_tokenizer(), get_tokenizer()
    texts = [
        "To be, or not to be: that is the question.",
        "  indented\n\nlines\tand tabs",
        "naïve café, 日本語 and an emoji 🤖",
        "it's we'll they've 1234567 3.14159",
    ]
    for text in texts:
        assert hf_tok(text, add_special_tokens=False)["input_ids"] == enc.encode(text), text
    assert len(hf_tok) == 50257 and hf_tok.eos_token_id == 50256
