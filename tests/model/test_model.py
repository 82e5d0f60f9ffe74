"""GPT: shapes, GPT-2 names, tying, pre/post wiring, init, attention paths, input errors, causality."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gptviz import GPT, GPTConfig, capture
from gptviz.model import model as model_module
from gptviz.model.model import row_major_copy
from tests.support.models import SMALL, build, random_ids


def test_logits_shape_batch_and_unbatched(model):
    ids = random_ids(7, batch=3)
    assert model(ids).shape == (3, 7, SMALL.vocab_size)
    one = model(ids[1])
    assert one.shape == (1, 7, SMALL.vocab_size)
    torch.testing.assert_close(one[0], model(ids)[1], atol=1e-5, rtol=0)
    assert model([1, 2, 3]).shape == (1, 3, SMALL.vocab_size)  # plain lists are accepted


def test_gpt2_parameter_names(model):
    expected = ["wte.weight", "wpe.weight"]
    for i in range(SMALL.n_layers):
        b = f"blocks.{i}"
        expected += [
            f"{b}.ln_1.weight",
            f"{b}.ln_1.bias",
            f"{b}.attn.c_attn.weight",
            f"{b}.attn.c_attn.bias",
            f"{b}.attn.c_proj.weight",
            f"{b}.attn.c_proj.bias",
            f"{b}.ln_2.weight",
            f"{b}.ln_2.bias",
            f"{b}.mlp.c_fc.weight",
            f"{b}.mlp.c_fc.bias",
            f"{b}.mlp.c_proj.weight",
            f"{b}.mlp.c_proj.bias",
        ]
    expected += ["ln_f.weight", "ln_f.bias", "lm_head.weight"]
    assert [n for n, _ in model.named_parameters(remove_duplicate=False)] == expected
    assert list(model.state_dict()) == expected
    modules = dict(model.named_modules())
    assert isinstance(modules["wte"], torch.nn.Embedding) and isinstance(modules["lm_head"], torch.nn.Linear)
    assert isinstance(modules["blocks.1.ln_2"], torch.nn.LayerNorm)
    assert modules["blocks.0.attn.c_attn"].weight.shape == (3 * 32, 32)  # nn.Linear: [out, in]


def test_rmsnorm_modules_have_no_bias():
    m = build(norm_type="rmsnorm")
    assert isinstance(m.blocks[0].ln_1, torch.nn.RMSNorm)
    names = [n for n, _ in m.named_parameters()]
    assert "blocks.0.ln_1.weight" in names and "blocks.0.ln_1.bias" not in names and "ln_f.bias" not in names


def test_tied_weights_are_one_tensor():
    tied = build()
    assert tied.lm_head.weight is tied.wte.weight
    with torch.no_grad():
        tied.wte.weight[5, 0] = 123.0
    assert tied.lm_head.weight[5, 0] == 123.0
    untied = build(tie_weights=False)
    assert untied.lm_head.weight is not untied.wte.weight
    assert untied.lm_head.weight.data_ptr() != untied.wte.weight.data_ptr()


def test_token_embedding_is_the_embedding_lookup_on_every_path():
    """token_embedding's gather from the [in, out]-stored embedding (CPU, no autograd) gives wte(ids) bit for bit,
    for a batch, one token and a row-major copy; with autograd it is nn.Embedding's own path, gradient included."""
    for model in (build(), build(tie_weights=False), row_major_copy(build())):
        ids = random_ids(12, batch=3)
        with torch.inference_mode():
            for x in (ids, ids[:1, :1], ids[0]):
                got, want = model.token_embedding(x), model.wte(x)
                assert got.shape == want.shape and got.is_contiguous() and torch.equal(got, want)
        model.zero_grad()
        model.token_embedding(ids).square().sum().backward()
        by_hand = torch.zeros_like(model.wte.weight).index_add_(
            0, ids.reshape(-1), 2 * model.wte(ids).detach().reshape(-1, model.config.d_model)
        )
        torch.testing.assert_close(model.wte.weight.grad, by_hand)
    assert build().wte.weight.stride(0) == 1  # the layout the gather is for


def test_model_keeps_its_config(model):
    assert model.config is SMALL


def test_pre_and_post_norm_share_state_dict_layout_and_weights():
    pre, post = build(seed=1), build(seed=2, norm="post")
    pre_state, post_state = pre.state_dict(), post.state_dict()
    assert list(pre_state) == list(post_state)
    assert all(pre_state[k].shape == post_state[k].shape for k in pre_state)
    post.load_state_dict(pre_state)  # strict: same keys, same shapes
    for k in pre_state:
        assert torch.equal(post.state_dict()[k], pre_state[k])
    pre.load_state_dict(build(seed=3, norm="post").state_dict())  # and the other way round
    ids = random_ids(10)
    with torch.no_grad():
        torch.testing.assert_close(pre(ids), build(seed=3)(ids), atol=0, rtol=0)  # post's weights, pre wiring
        a, b = build(seed=1)(ids), post(ids)  # same weights, other wiring
    assert (a - b).abs().max() > 1e-3


def test_post_norm_wiring_matches_hand_computation():
    m = build(norm="post", seed=4, n_layers=1)
    ids = random_ids(6)
    with torch.no_grad():
        x = m.wte(ids)[None] + m.wpe(torch.arange(6))[None]
        blk = m.blocks[0]
        x = blk.ln_1(x + blk.attn(x))
        x = blk.ln_2(x + blk.mlp(x))
        expected = m.lm_head(m.ln_f(x))
        torch.testing.assert_close(m(ids), expected, atol=1e-5, rtol=0)


def test_pre_norm_wiring_matches_hand_computation():
    m = build(seed=4, n_layers=1, activation="gelu_tanh")
    ids = random_ids(6)
    with torch.no_grad():
        x = m.wte(ids)[None] + m.wpe(torch.arange(6))[None]
        blk = m.blocks[0]
        x = x + blk.attn(blk.ln_1(x))
        h = F.gelu(blk.ln_2(x) @ blk.mlp.c_fc.weight.T + blk.mlp.c_fc.bias, approximate="tanh")
        x = x + h @ blk.mlp.c_proj.weight.T + blk.mlp.c_proj.bias
        expected = m.ln_f(x) @ m.wte.weight.T
        torch.testing.assert_close(m(ids), expected, atol=1e-5, rtol=0)


def test_init_std_matches_gpt2():
    cfg = GPTConfig(vocab_size=1000, n_ctx=64, d_model=256, n_layers=8, n_heads=8)
    torch.manual_seed(0)
    m = GPT(cfg)
    residual = 0.02 / math.sqrt(2 * cfg.n_layers)  # 0.005
    for name, p in m.named_parameters():
        if name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")):
            assert p.std().item() == pytest.approx(residual, rel=0.03), name
            assert abs(p.mean().item()) < 3 * residual / math.sqrt(p.numel()) + 1e-6, name
        elif name.endswith("weight") and p.dim() == 2:  # c_attn, c_fc, wte, wpe
            assert p.std().item() == pytest.approx(0.02, rel=0.03), name
        elif name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name
        else:  # norm gains
            assert torch.equal(p, torch.ones_like(p)), name


def test_xavier_init_option_and_unknown_init():
    torch.manual_seed(0)
    m = GPT(SMALL, init="xavier")
    w = m.blocks[0].mlp.c_fc.weight  # [128, 32]: bound sqrt(6 / (32 + 128))
    bound = math.sqrt(6 / (32 + 128))
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    with pytest.raises(ValueError, match="init"):
        GPT(SMALL, init="zeros")


ALL_PATTERNS = [f"blocks.{i}.attn.hook_pattern" for i in range(SMALL.n_layers)]


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu"])
def test_explicit_and_fused_attention_give_same_logits(norm, norm_type, activation, monkeypatch):
    m = build(seed=5, norm=norm, norm_type=norm_type, activation=activation)
    ids = random_ids(SMALL.n_ctx, batch=2, seed=1)
    calls = []
    sdpa = F.scaled_dot_product_attention

    def counting_sdpa(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", counting_sdpa)
    with torch.no_grad():
        fused = m(ids)
    assert len(calls) == SMALL.n_layers  # the plain forward used the fused kernel in every layer
    explicit, cache = capture(m, ids, ALL_PATTERNS)
    assert len(calls) == SMALL.n_layers  # capturing patterns took the explicit path everywhere
    assert set(cache) == set(ALL_PATTERNS)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=0)


def test_explicit_path_only_where_weights_are_captured(monkeypatch):
    m = build()
    seen = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(
        model_module.F, "scaled_dot_product_attention", lambda q, *a, **k: seen.append(q.shape) or sdpa(q, *a, **k)
    )
    ids = random_ids(5)
    logits, cache = capture(m, ids, "blocks.1.attn.hook_attn_scores")  # scores alone also need it
    assert len(seen) == 1  # layer 0 stayed fused, layer 1 went explicit
    assert cache["blocks.1.attn.hook_attn_scores"].shape == (1, 4, 5, 5)
    _, other = capture(m, ids, ["blocks.0.attn.hook_z", "hook_logits"])  # no weights wanted: all fused
    assert len(seen) == 3
    torch.testing.assert_close(other["hook_logits"], logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "bad, message",
    [
        ([5, 101, 3], r"token id 101 is outside the vocabulary \[0, 101\)"),
        ([5, -1, 3], r"token id -1 is outside the vocabulary"),
        (list(range(17)), r"sequence of 17 tokens is longer than the context of 16"),
        ([], r"empty"),
        (torch.zeros(1, 0, dtype=torch.long), r"empty"),
        (torch.zeros(2, 2, 2, dtype=torch.long), r"\[batch, T\]"),
    ],
)
def test_bad_token_ids_raise_clear_value_errors(model, bad, message):
    with pytest.raises(ValueError, match=message):
        model(bad if isinstance(bad, torch.Tensor) else torch.tensor(bad, dtype=torch.long))
    if not isinstance(bad, torch.Tensor):
        with pytest.raises(ValueError, match=message):
            model(bad)  # a plain list fails the same way


def test_float_ids_are_a_type_error(model):
    with pytest.raises(TypeError, match="integers"):
        model(torch.tensor([1.0, 2.0]))


def test_full_context_is_allowed(model):
    assert model(random_ids(SMALL.n_ctx)).shape == (1, SMALL.n_ctx, SMALL.vocab_size)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_causality_later_tokens_do_not_change_earlier_logits(norm):
    m = build(seed=6, norm=norm)
    ids = random_ids(12, seed=2)
    changed = ids.clone()
    changed[7] = (ids[7] + 1) % SMALL.vocab_size
    with torch.no_grad():
        a, b = m(ids)[0], m(changed)[0]
    torch.testing.assert_close(a[:7], b[:7], atol=1e-6, rtol=0)
    assert (a[7:] - b[7:]).abs().amax(dim=-1).min() > 1e-4  # every later position sees the change
    _, ca = capture(m, ids, ALL_PATTERNS)
    _, cb = capture(m, changed, ALL_PATTERNS)
    for name in ALL_PATTERNS:
        torch.testing.assert_close(ca[name][..., :7, :], cb[name][..., :7, :], atol=1e-6, rtol=0)


def test_kv_cache_forward_matches_full_forward(model):
    ids = random_ids(10, seed=3)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_kv_cache()
        first = model(ids[:6], kv_cache=cache)
        assert cache.length == 6
        rest = model(ids[6:], kv_cache=cache)  # several tokens at once on top of a cache
        assert cache.length == 10
        step = model.new_kv_cache()
        singles = torch.cat([model(ids[i : i + 1], kv_cache=step) for i in range(10)], dim=1)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=0)
    torch.testing.assert_close(singles, full, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="longer than the context"):
        model(random_ids(7), kv_cache=cache)  # 10 cached + 7 > 16


def test_dropout_only_in_training():
    m = build(dropout=0.5)
    ids = random_ids(8)
    with torch.no_grad():
        assert torch.equal(m(ids), m(ids))  # eval: deterministic
        m.train()
        torch.manual_seed(0)
        a = m(ids)
        b = m(ids)
    assert not torch.allclose(a, b)


def test_last_only_logits(model):
    ids = random_ids(9, batch=2, seed=11)
    with torch.no_grad():
        full = model(ids)
        last = model(ids, last_only=True)
    assert last.shape == (2, 1, SMALL.vocab_size)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-6, rtol=0)


def test_seeded_init_ignores_other_draws_from_the_global_generator():
    """Sessions and background training share torch's global generator: a seed alone fixes the weights."""
    cfg = GPTConfig(vocab_size=97, n_ctx=16, d_model=32, n_layers=2, n_heads=4)
    first = GPT(cfg, seed=5).state_dict()
    torch.manual_seed(123)
    torch.randn(1000)  # another thread's draws
    second = GPT(cfg, seed=5).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = GPT(cfg, seed=6).state_dict()
    assert not torch.equal(first["wte.weight"], other["wte.weight"])
    for init in ("gpt2", "xavier"):
        a, b = GPT(cfg, init=init, seed=1), GPT(cfg, init=init, seed=1)
        assert torch.equal(a.blocks[0].attn.c_attn.weight, b.blocks[0].attn.c_attn.weight)


@pytest.mark.parametrize("tie", [True, False])
def test_matrices_are_stored_in_out_and_the_layout_changes_no_result(tie):
    """Linear weights (and the tied embedding) keep their [out, in] shape but are laid out [in, out] in memory
    (the faster layout for one token at a time); the logits are those of the row-major layout."""
    model = build(tie_weights=tie)
    matrices = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(matrices) == 4 * SMALL.n_layers + 1
    for w in matrices:
        assert w.stride() == (1, w.shape[0]) and w.t().is_contiguous()
    assert (model.lm_head.weight is model.wte.weight) == tie
    assert model.wpe.weight.is_contiguous()  # positions are only looked up, never multiplied by
    ids = random_ids(12, batch=2)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), row_major_copy(model)(ids), atol=1e-5, rtol=1e-5)


def test_seeded_weights_do_not_depend_on_the_memory_layout():
    """Random fills follow memory order; init draws row-major, so a seed gives the values it always gave."""
    model = GPT(SMALL, seed=3)
    twin = row_major_copy(GPT(SMALL, seed=99))
    twin.reset_parameters(seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values(), strict=True))


def test_layout_survives_half_precision_and_loading(tmp_path):
    from gptviz.model.weights import load_checkpoint, save_checkpoint

    model = build()
    save_checkpoint(model, tmp_path / "m", dtype=torch.float16)
    for loaded in (load_checkpoint(tmp_path / "m"), build().half()):
        assert loaded.wte.weight.t().is_contiguous() and loaded.lm_head.weight is loaded.wte.weight
        assert loaded.blocks[1].mlp.c_proj.weight.t().is_contiguous()


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_forward_from_a_captured_stream_gives_the_models_logits(norm):
    model = build(norm=norm, seed=2)
    ids = random_ids(9, batch=2, seed=3)
    logits, cache = capture(model, ids, [f"blocks.{i}.hook_resid_pre" for i in range(SMALL.n_layers)])
    for layer in range(SMALL.n_layers):
        resumed = model.forward_from(layer, cache[f"blocks.{layer}.hook_resid_pre"])
        torch.testing.assert_close(resumed, logits, rtol=0, atol=1e-5)
        torch.testing.assert_close(
            model.forward_from(layer, cache[f"blocks.{layer}.hook_resid_pre"], last_only=True),
            logits[:, -1:],
            rtol=0,
            atol=1e-5,
        )
    with pytest.raises(ValueError, match="layer 2 is not in 0..1"):
        model.forward_from(SMALL.n_layers, cache["blocks.0.hook_resid_pre"])
    # from position 4 on, the earlier positions' keys and values taken from the same run: the same logits there
    _, kv = capture(model, ids, [f"blocks.{i}.attn.hook_{n}" for i in range(SMALL.n_layers) for n in "kv"])
    past = [
        (
            kv[f"blocks.{i}.attn.hook_k"].transpose(1, 2)[:, :, :4],
            kv[f"blocks.{i}.attn.hook_v"].transpose(1, 2)[:, :, :4],
        )
        for i in range(1, SMALL.n_layers)
    ]
    torch.testing.assert_close(
        model.forward_from(1, cache["blocks.1.hook_resid_pre"][:, 4:], past_kv=past), logits[:, 4:], rtol=0, atol=1e-5
    )


def test_forward_count_counts_the_models_real_forward_passes(model):
    from benchmarks.forward_passes import forward_count
    from gptviz import generate, stream

    ids = random_ids(6)
    before = forward_count()
    capture(model, ids[None])
    assert forward_count() == before + 1  # one capture: one pass
    model(torch.stack([ids, ids]))
    assert forward_count() == before + 2  # a batch is one pass
    before = forward_count()
    generate(model, ids, max_new_tokens=4, temperature=0.0)
    assert forward_count() == before + 4  # prompt + 3 cached one-token steps
    before = forward_count()
    generate(model, ids, max_new_tokens=3, temperature=0.0, use_cache=False)
    assert forward_count() == before + 3
    before = forward_count()
    steps = stream(model, ids, max_new_tokens=5, temperature=0.0, attention=True)
    next(steps), next(steps)
    assert forward_count() == before + 2  # lazily: one pass per step taken
    before = forward_count()
    with pytest.raises(ValueError):
        model(torch.tensor([[SMALL.vocab_size]]))
    assert forward_count() == before  # refused before running


def test_forward_count_is_exact_across_threads(model):
    import threading

    from benchmarks.forward_passes import forward_count

    ids = random_ids(3)[None]
    before = forward_count()
    threads = [threading.Thread(target=lambda: [model(ids) for _ in range(20)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert forward_count() == before + 80


def test_a_model_is_made_on_meta_then_allocated_once_with_its_layout_and_tie():
    """The modules are made on the meta device and each tensor allocated once on the device asked for (the
    build's peak: benchmarks/bench_build.py); the [in, out] layout and the tied head survive that."""
    model = build()
    assert model.lm_head.weight is model.wte.weight
    assert model.wte.weight.untyped_storage().data_ptr() == model.lm_head.weight.untyped_storage().data_ptr()
    fc = model.blocks[0].mlp.c_fc.weight
    assert fc.device.type == "cpu" and fc.t().is_contiguous()  # stored [in, out]
    assert all(p.device.type == "cpu" and torch.isfinite(p).all() for p in model.parameters())
    assert float(model.blocks[0].ln_1.weight.detach().min()) == 1.0
    assert float(model.blocks[0].attn.c_attn.bias.detach().abs().max()) == 0
    with torch.device("meta"):
        shell = GPT(SMALL)  # asked for on meta: stays there
    assert all(p.device.type == "meta" for p in shell.parameters())
