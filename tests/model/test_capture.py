"""Hook points and capture(): names, shapes, values recomputed by hand, per-call state under threads."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F

from gptviz import capture
from gptviz.model.hooks import _ACTIVE, ActivationCache, HookPoint, all_hook_names, resolve_names
from tests.support.models import SMALL, build, random_ids

L, H, DH, D, FF, V = SMALL.n_layers, SMALL.n_heads, SMALL.d_head, SMALL.d_model, SMALL.d_ff, SMALL.vocab_size
PER_BLOCK = [
    "hook_resid_pre",
    "ln_1.hook_normalized",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_attn_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "ln_2.hook_normalized",
    "mlp.hook_pre",
    "mlp.hook_post",
    "hook_mlp_out",
    "hook_resid_post",
]
DESIGN_NAMES = (
    ["hook_embed", "hook_pos_embed"]
    + [f"blocks.{i}.{n}" for i in range(L) for n in PER_BLOCK]
    + ["ln_f.hook_normalized", "hook_logits"]
)


@pytest.fixture(params=["pre", "post"])
def any_model(request):
    return build(seed=21, norm=request.param)


def test_hook_names_are_design_names_in_forward_order(any_model):
    assert any_model.hook_names == DESIGN_NAMES == all_hook_names(L)
    modules = dict(any_model.named_modules())
    for name in DESIGN_NAMES:
        assert isinstance(modules[name], HookPoint) and modules[name].name == name


def test_shapes_of_every_hook(any_model):
    B, T = 2, 6
    ids = random_ids(T, batch=B)
    logits, cache = capture(any_model, ids)
    assert set(cache) == set(DESIGN_NAMES)
    expected = {
        "hook_embed": (B, T, D),
        "hook_pos_embed": (1, T, D),
        "ln_f.hook_normalized": (B, T, D),
        "hook_logits": (B, T, V),
    }
    per_block = {
        "attn.hook_q": (B, T, H, DH),
        "attn.hook_k": (B, T, H, DH),
        "attn.hook_v": (B, T, H, DH),
        "attn.hook_attn_scores": (B, H, T, T),
        "attn.hook_pattern": (B, H, T, T),
        "attn.hook_z": (B, T, H, DH),
        "mlp.hook_pre": (B, T, FF),
        "mlp.hook_post": (B, T, FF),
    }
    for i in range(L):
        for n in PER_BLOCK:
            expected[f"blocks.{i}.{n}"] = per_block.get(n, (B, T, D))
    assert {n: tuple(t.shape) for n, t in cache.items()} == expected
    assert logits.shape == (B, T, V)


@pytest.mark.parametrize(
    "names, expected",
    [
        (None, set(DESIGN_NAMES)),
        ("blocks.1.attn.hook_pattern", {"blocks.1.attn.hook_pattern"}),
        (["hook_embed", "blocks.0.mlp.hook_post"], {"hook_embed", "blocks.0.mlp.hook_post"}),
        (("hook_logits",), {"hook_logits"}),
        (lambda n: n.endswith("hook_pattern"), {f"blocks.{i}.attn.hook_pattern" for i in range(L)}),
        (lambda n: n.startswith("blocks.1.ln_"), {"blocks.1.ln_1.hook_normalized", "blocks.1.ln_2.hook_normalized"}),
        ([], set()),
    ],
)
def test_names_filter(model, names, expected):
    _, cache = capture(model, random_ids(5), names)
    assert set(cache) == expected
    assert len(cache) == len(expected)


def test_names_filter_accepts_any_iterable(model):
    _, cache = capture(model, random_ids(5), (n for n in ["hook_embed", "hook_logits"]))
    assert set(cache) == {"hook_embed", "hook_logits"}


def test_unknown_name_is_a_key_error_naming_it(model):
    with pytest.raises(KeyError, match="blocks.9.attn.hook_pattern"):
        capture(model, random_ids(5), ["hook_embed", "blocks.9.attn.hook_pattern"])
    with pytest.raises(KeyError, match="hook_patern"):
        capture(model, random_ids(5), "blocks.0.attn.hook_patern")
    assert _ACTIVE.get() is None  # a failed capture leaves nothing behind


def test_resolve_names():
    available = ["a", "b.c", "b.d"]
    assert resolve_names(None, available) == frozenset(available)
    assert resolve_names("a", available) == frozenset({"a"})
    assert resolve_names(lambda n: n.startswith("b"), available) == frozenset({"b.c", "b.d"})
    with pytest.raises(KeyError):
        resolve_names(["z"], available)


def test_captured_tensors_are_detached_float32_cpu():
    m = build(seed=22).double()
    logits, cache = capture(m, random_ids(7))
    assert logits.dtype == torch.float64
    for name, t in cache.items():
        assert t.dtype == torch.float32 and t.device.type == "cpu" and not t.requires_grad, name
        assert t.grad_fn is None
    torch.testing.assert_close(cache["hook_logits"], logits.float())


def test_capture_does_not_track_gradients_or_leave_state(model):
    assert all(p.requires_grad for p in model.parameters())
    logits, cache = capture(model, random_ids(5))
    assert not logits.requires_grad
    assert _ACTIVE.get() is None
    with torch.no_grad():
        model(random_ids(5))  # a plain call afterwards captures nothing anywhere
    assert len(cache) == len(DESIGN_NAMES)


def test_capture_logits_equal_plain_forward(any_model):
    ids = random_ids(SMALL.n_ctx, batch=2, seed=3)
    with torch.no_grad():
        plain = any_model(ids)
    everything, cache = capture(any_model, ids)  # explicit attention
    torch.testing.assert_close(everything, plain, atol=1e-5, rtol=0)
    assert torch.equal(cache["hook_logits"], everything)
    no_weights, _ = capture(any_model, ids, lambda n: "resid" in n)  # still the fused path: bit-identical
    assert torch.equal(no_weights, plain)


def _layer_norm(x, ln):
    return F.layer_norm(x, (D,), ln.weight, ln.bias, ln.eps)


def hooks_of_block(cache, layer):
    """Block `layer`'s captured values by their names inside it: "attn.hook_q" reads blocks.{layer}.attn.hook_q."""
    return lambda name: cache[f"blocks.{layer}.{name}"]


def test_every_pre_norm_hook_value_recomputed_by_hand():
    m = build(seed=23, activation="gelu_tanh")
    T = 9
    ids = random_ids(T, seed=4)
    logits, c = capture(m, ids)
    with torch.no_grad():
        torch.testing.assert_close(c["hook_embed"][0], m.wte.weight[ids])
        torch.testing.assert_close(c["hook_pos_embed"][0], m.wpe.weight[:T])
        torch.testing.assert_close(c["blocks.0.hook_resid_pre"], c["hook_embed"] + c["hook_pos_embed"])
        for i, blk in enumerate(m.blocks):
            h = hooks_of_block(c, i)
            torch.testing.assert_close(h("ln_1.hook_normalized"), _layer_norm(h("hook_resid_pre"), blk.ln_1))
            q, k, v = blk.attn.c_attn(h("ln_1.hook_normalized")).split(D, dim=-1)
            torch.testing.assert_close(h("attn.hook_q"), q.view(1, T, H, DH))
            torch.testing.assert_close(h("attn.hook_k"), k.view(1, T, H, DH))
            torch.testing.assert_close(h("attn.hook_v"), v.view(1, T, H, DH))
            z = torch.einsum("bhqk,bkhd->bqhd", h("attn.hook_pattern"), h("attn.hook_v"))
            torch.testing.assert_close(h("attn.hook_z"), z, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(h("hook_attn_out"), blk.attn.c_proj(z.reshape(1, T, D)), atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(h("hook_resid_mid"), h("hook_resid_pre") + h("hook_attn_out"))
            torch.testing.assert_close(h("ln_2.hook_normalized"), _layer_norm(h("hook_resid_mid"), blk.ln_2))
            torch.testing.assert_close(h("mlp.hook_pre"), blk.mlp.c_fc(h("ln_2.hook_normalized")))
            torch.testing.assert_close(h("mlp.hook_post"), F.gelu(h("mlp.hook_pre"), approximate="tanh"))
            torch.testing.assert_close(h("hook_mlp_out"), blk.mlp.c_proj(h("mlp.hook_post")))
            torch.testing.assert_close(h("hook_resid_post"), h("hook_resid_mid") + h("hook_mlp_out"))
        torch.testing.assert_close(c["ln_f.hook_normalized"], _layer_norm(c[f"blocks.{L - 1}.hook_resid_post"], m.ln_f))
        torch.testing.assert_close(logits, c["ln_f.hook_normalized"] @ m.wte.weight.T)


def test_post_norm_hooks_sit_after_the_residual_additions():
    m = build(seed=24, norm="post")
    _, c = capture(m, random_ids(8, seed=5))
    with torch.no_grad():
        for i, blk in enumerate(m.blocks):
            h = hooks_of_block(c, i)
            torch.testing.assert_close(
                h("hook_resid_mid"), _layer_norm(h("hook_resid_pre") + h("hook_attn_out"), blk.ln_1)
            )
            assert torch.equal(h("hook_resid_mid"), h("ln_1.hook_normalized"))
            q = blk.attn.c_attn(h("hook_resid_pre"))[..., :D]  # attention reads the raw stream
            torch.testing.assert_close(h("attn.hook_q"), q.view_as(h("attn.hook_q")))
            torch.testing.assert_close(h("mlp.hook_pre"), blk.mlp.c_fc(h("hook_resid_mid")))
            torch.testing.assert_close(
                h("hook_resid_post"), _layer_norm(h("hook_resid_mid") + h("hook_mlp_out"), blk.ln_2)
            )
            assert torch.equal(h("hook_resid_post"), h("ln_2.hook_normalized"))


def test_patterns_are_causal_distributions(any_model):
    T = SMALL.n_ctx
    _, cache = capture(any_model, random_ids(T, batch=3, seed=6))
    upper = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    for i in range(L):
        p = cache.pattern(i)
        torch.testing.assert_close(p.sum(-1), torch.ones(3, H, T), atol=1e-6, rtol=0)
        assert torch.count_nonzero(p[..., upper]) == 0
        assert (p[..., ~upper] > 0).all()
        assert torch.equal(p[..., 0, 0], torch.ones(3, H))  # the first token can only see itself


def test_pattern_equals_softmax_of_captured_q_k(any_model):
    T = 11
    _, cache = capture(any_model, random_ids(T, batch=2, seed=7))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        q, k = cache[f"blocks.{i}.attn.hook_q"], cache[f"blocks.{i}.attn.hook_k"]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(DH)
        scores = scores.masked_fill(~mask, float("-inf"))
        torch.testing.assert_close(cache[f"blocks.{i}.attn.hook_attn_scores"], scores, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(cache.pattern(i), torch.softmax(scores, dim=-1), atol=1e-6, rtol=1e-5)


def test_resid_post_of_each_layer_is_resid_pre_of_the_next(any_model):
    _, cache = capture(any_model, random_ids(6))
    for i in range(L - 1):
        assert torch.equal(cache[f"blocks.{i}.hook_resid_post"], cache[f"blocks.{i + 1}.hook_resid_pre"])


def test_activation_cache_helpers():
    m = build(seed=25, n_layers=3)
    B, T = 2, 5
    _, cache = capture(m, random_ids(T, batch=B))
    assert isinstance(cache, ActivationCache) and cache.n_layers == 3
    assert cache.pattern(2) is cache["blocks.2.attn.hook_pattern"]
    patterns = cache.patterns()
    assert patterns.shape == (3, B, H, T, T)
    assert torch.equal(patterns[1], cache.pattern(1))
    assert torch.equal(cache.stack("attn.hook_pattern"), patterns)
    resid = cache.resid_stream()
    assert resid.shape == (4, B, T, D)
    assert torch.equal(resid[0], cache["blocks.0.hook_resid_pre"])
    assert torch.equal(resid[2], cache["blocks.1.hook_resid_post"])
    assert torch.equal(resid[3], cache["blocks.2.hook_resid_post"])
    mlp = cache.stack("hook_mlp_out")
    assert mlp.shape == (3, B, T, D) and torch.equal(mlp[0], cache["blocks.0.hook_mlp_out"])
    assert cache.nbytes() == 4 * sum(t.numel() for t in cache.values())
    with pytest.raises(KeyError, match="was not captured"):
        capture(m, random_ids(3), "hook_embed")[1].pattern(0)


def test_sixteen_threads_each_get_their_own_activations():
    m = build(seed=26)
    n = 16
    prompts = [random_ids(4 + (j % 12), batch=1 + j % 3, seed=100 + j) for j in range(n)]
    filters = [
        None
        if j % 4 == 0
        else (lambda s: "pattern" in s)
        if j % 4 == 1
        else [f"blocks.{j % L}.hook_resid_post", "hook_logits"]
        if j % 4 == 2
        else "hook_embed"
        for j in range(n)
    ]
    expected = [capture(m, p, f) for p, f in zip(prompts, filters, strict=True)]  # one at a time
    barrier = threading.Barrier(n)

    def work(j):
        barrier.wait()
        return [capture(m, prompts[j], filters[j]) for _ in range(3)]

    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(work, range(n)))
    for j, runs in enumerate(results):
        want_logits, want_cache = expected[j]
        for logits, cache in runs:
            assert torch.equal(logits, want_logits), j
            assert set(cache) == set(want_cache), j
            for name in want_cache:
                assert torch.equal(cache[name], want_cache[name]), (j, name)


def test_torch_module_hooks_on_hook_points_still_fire(model):
    """HookPoints skip nn.Module's dispatch for speed, except when a torch hook is registered."""
    seen = []
    handle = model.blocks[1].hook_resid_post.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    try:
        with torch.no_grad():
            model(random_ids(5))
    finally:
        handle.remove()
    assert seen == [(1, 5, D)]
    replaced = model.hook_embed.register_forward_hook(lambda mod, args, out: torch.zeros_like(out))
    try:
        _, cache = capture(model, random_ids(4), ["hook_embed", "blocks.0.hook_resid_pre"])
    finally:
        replaced.remove()
    assert torch.count_nonzero(cache["hook_embed"]) > 0  # recorded before the torch hook replaced it
    torch.testing.assert_close(cache["blocks.0.hook_resid_pre"], model.wpe.weight[:4][None])  # embed zeroed
    with torch.no_grad():
        model(random_ids(5))
    assert len(seen) == 1  # removed: the fast path again
    glob = torch.nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: seen.append(type(mod).__name__) if isinstance(mod, HookPoint) else None
    )
    try:
        with torch.no_grad():
            model(random_ids(3))
    finally:
        glob.remove()
    assert seen.count("HookPoint") == len(DESIGN_NAMES) - 2 * L  # the fused path has no scores / pattern


def test_capture_survives_a_fresh_import_of_the_hooks_module(monkeypatch):
    """Streamlit drops edited modules from sys.modules and imports them afresh, while its cached model keeps
    HookPoints from the old module: a capture through the new module must still see them."""
    import importlib
    import sys

    m = build(seed=31)
    ids = random_ids(6, seed=2)
    before = capture(m, ids)[1]["blocks.0.attn.hook_pattern"]
    monkeypatch.delitem(sys.modules, "gptviz.model.hooks")  # restored after the test
    fresh = importlib.import_module("gptviz.model.hooks")
    assert fresh is not sys.modules.get("gptviz") and fresh.capture is not capture
    _, cache = fresh.capture(m, ids, ["blocks.0.attn.hook_pattern"])
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"], before)


def test_act_name_gives_the_models_own_hook_names(model):
    from gptviz.model.hooks import act_name

    kinds = [
        "resid_pre",
        "resid_mid",
        "resid_post",
        "attn_out",
        "mlp_out",
        "q",
        "k",
        "v",
        "z",
        "attn_scores",
        "pattern",
        "pre",
        "post",
        "ln1",
        "ln2",
    ]
    per_layer = {act_name(kind, layer) for kind in kinds for layer in range(SMALL.n_layers)}
    whole = {act_name(kind) for kind in ("embed", "pos_embed", "ln_final", "logits")}
    assert per_layer | whole == set(model.hook_names)  # every hook point, each named once
    assert act_name("pattern", 3) == "blocks.3.attn.hook_pattern"
    for bad in (("pattern",), ("pattern", -1), ("embed", 0), ("attention", 0)):
        with pytest.raises(ValueError):
            act_name(*bad)


def test_every_layers_attention_is_captured_into_one_block_that_patterns_returns_without_a_copy():
    """A capture of every layer's pattern writes them into one [layers, batch, heads, T, T] block as they come, so
    the capture never holds them twice and patterns() is that block (the same storage), with the values a capture
    of each layer alone records."""
    from gptviz.model.hooks import act_name, one_block

    model, ids = build(), random_ids(9, batch=2)
    _, cache = capture(model, ids)
    block = cache.patterns()
    assert block.shape == (SMALL.n_layers, 2, SMALL.n_heads, 9, 9)
    for layer in range(SMALL.n_layers):
        assert cache.pattern(layer).data_ptr() == block[layer].data_ptr()
        _, alone = capture(model, ids, act_name("pattern", layer))
        assert one_block([alone.pattern(layer)]) is not None
        torch.testing.assert_close(block[layer], alone.pattern(layer))  # other layers may run fused alone
    _, some = capture(model, ids, [act_name("pattern", 1)])  # not every layer: no block, its own tensor
    assert some.pattern(1).shape == (2, SMALL.n_heads, 9, 9)


def test_one_block_is_only_what_already_lies_in_one_storage_in_order():
    from gptviz.model.hooks import one_block

    block = torch.arange(24.0).reshape(3, 2, 4)
    assert one_block(list(block)).data_ptr() == block.data_ptr() and torch.equal(one_block(list(block)), block)
    assert one_block([block[0], block[2]]) is None  # a gap
    assert one_block([block[1], block[0]]) is None  # out of order
    assert one_block([block[0], block[1].clone()]) is None  # another storage
    assert one_block([t.T for t in block]) is None  # not contiguous
