"""Edits at hook points (ablation, patching, steering), checked against recomputations by hand."""

from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F

from gptviz import capture, generate, stream
from gptviz.methods.interventions import (
    ablate_heads,
    ablate_neurons,
    ablate_sublayer,
    add_to_resid,
    patch_from,
    run_with_edits,
)
from tests.support.models import SMALL, build, random_ids


def attention_by_hand(attn, x: torch.Tensor, z_change=None) -> torch.Tensor:
    """One attention sub-layer from its weights, written out: q, k, v, causal softmax, z, W_O. `z_change(z)`
    edits z [B, T, heads, d_head] before the output projection."""
    B, T, C = x.shape
    q, k, v = (x @ attn.c_attn.weight.t() + attn.c_attn.bias).split(C, dim=2)
    q, k, v = (t.view(B, T, attn.n_heads, attn.d_head).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_head)
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    z = (F.softmax(scores, -1) @ v).transpose(1, 2)  # (B, T, nh, hs)
    if z_change is not None:
        z = z_change(z.clone())
    return z.reshape(B, T, C) @ attn.c_proj.weight.t() + attn.c_proj.bias


def forward_by_hand(model, ids, layer: int, z_change) -> torch.Tensor:
    """Logits with block `layer`'s attention recomputed by hand (z edited); the other blocks as modules."""
    ids = ids.reshape(-1, ids.shape[-1])
    x = model.wte(ids) + model.wpe(torch.arange(ids.shape[1]))[None]
    for i, block in enumerate(model.blocks):
        if i != layer:
            x = block(x)
        elif block.pre_norm:
            x = x + attention_by_hand(block.attn, block.ln_1(x), z_change)
            x = x + block.mlp(block.ln_2(x))
        else:
            x = block.ln_1(x + attention_by_hand(block.attn, x, z_change))
            x = block.ln_2(x + block.mlp(x))
    return model.lm_head(model.ln_f(x))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_zero_ablating_a_head_equals_recomputation_with_its_z_zeroed(norm):
    model = build(norm=norm)
    ids = random_ids(12, batch=2)
    plain, _ = capture(model, ids, ())
    edited, cache = run_with_edits(model, ids, ablate_heads(1, [2]), names=["blocks.1.attn.hook_z"])

    def zero_head(z):
        z[:, :, 2] = 0
        return z

    with torch.no_grad():
        by_hand = forward_by_hand(model, ids, 1, zero_head)
    torch.testing.assert_close(edited, by_hand, atol=1e-5, rtol=1e-5)
    assert (edited - plain).abs().max() > 1e-3  # the head mattered: the check is not vacuous
    assert cache["blocks.1.attn.hook_z"][:, :, 2].abs().max() == 0  # the cache records the edited value


def test_mean_ablation_uses_the_mean_over_the_reference_at_the_chosen_positions(model):
    ids, reference_ids = random_ids(12, seed=1), random_ids(10, batch=3, seed=2)
    _, reference = capture(model, reference_ids, ["blocks.0.attn.hook_z"])
    mean = reference["blocks.0.attn.hook_z"].mean(dim=(0, 1))  # [heads, d_head]: over batch and positions
    edit = ablate_heads(0, [1, 3], mode="mean", positions=[4, 7], reference=reference)
    edited, cache = run_with_edits(model, ids, edit, names=["blocks.0.attn.hook_z"])
    z = cache["blocks.0.attn.hook_z"][0]
    _, plain = capture(model, ids, ["blocks.0.attn.hook_z"])
    for p in range(12):
        for h in range(SMALL.n_heads):
            expected = mean[h] if (p in (4, 7) and h in (1, 3)) else plain["blocks.0.attn.hook_z"][0, p, h]
            torch.testing.assert_close(z[p, h], expected)

    def set_mean(z):
        for p in (4, 7):
            z[:, p, [1, 3]] = mean[[1, 3]]
        return z

    with torch.no_grad():
        torch.testing.assert_close(edited, forward_by_hand(model, ids, 0, set_mean), atol=1e-5, rtol=1e-5)


def test_ablating_neurons_zeroes_them_before_the_output_projection(model):
    ids = random_ids(9)
    names = ["blocks.1.mlp.hook_pre", "blocks.1.mlp.hook_post", "blocks.1.hook_mlp_out"]
    _, cache = run_with_edits(model, ids, ablate_neurons(1, [0, 5, 17]), names=names)
    post = cache["blocks.1.mlp.hook_post"]
    assert post[..., [0, 5, 17]].abs().max() == 0
    mlp = model.blocks[1].mlp
    by_hand = F.gelu(cache["blocks.1.mlp.hook_pre"])
    by_hand[..., [0, 5, 17]] = 0
    torch.testing.assert_close(cache["blocks.1.hook_mlp_out"], by_hand @ mlp.c_proj.weight.t() + mlp.c_proj.bias)


def test_removing_a_sublayer_zeroes_its_output(model):
    ids = random_ids(8)
    _, plain = capture(model, ids, ["blocks.1.hook_resid_mid", "blocks.1.hook_resid_pre"])
    _, cache = run_with_edits(model, ids, ablate_sublayer(1, "attn"), names=["blocks.1.hook_resid_mid"])
    # pre-norm: with the attention output gone, the stream passes the sub-layer unchanged
    torch.testing.assert_close(cache["blocks.1.hook_resid_mid"], plain["blocks.1.hook_resid_pre"])


def test_patching_the_whole_residual_stream_at_layer_0_gives_the_clean_logits(model):
    clean_ids, corrupted_ids = random_ids(10, seed=3), random_ids(10, seed=4)
    clean_logits, clean = capture(model, clean_ids, ["blocks.0.hook_resid_pre"])
    corrupted_logits, _ = capture(model, corrupted_ids, ())
    patched, _ = run_with_edits(model, corrupted_ids, patch_from(clean, "blocks.0.hook_resid_pre"))
    torch.testing.assert_close(patched, clean_logits)
    nothing, _ = run_with_edits(model, corrupted_ids, patch_from(clean, "blocks.0.hook_resid_pre", positions=[]))
    torch.testing.assert_close(nothing, corrupted_logits)
    assert (clean_logits - corrupted_logits).abs().max() > 1e-2


def test_steering_adds_the_vector_to_the_stream(model):
    ids = random_ids(6)
    vector = torch.linspace(-1, 1, SMALL.d_model)
    _, plain = capture(model, ids, ["blocks.1.hook_resid_pre"])
    _, cache = run_with_edits(
        model, ids, add_to_resid(1, vector, scale=2.0, positions=[2]), names=["blocks.1.hook_resid_pre"]
    )
    expected = plain["blocks.1.hook_resid_pre"].clone()
    expected[:, 2] += 2.0 * vector
    torch.testing.assert_close(cache["blocks.1.hook_resid_pre"], expected)


def test_bad_edits_raise_clear_errors(model):
    ids = random_ids(5)
    with pytest.raises(KeyError, match="unknown hook point"):
        run_with_edits(model, ids, ablate_heads(7, [0]))
    with pytest.raises(ValueError, match="unit 9 does not exist"):
        run_with_edits(model, ids, ablate_heads(0, [9]))
    with pytest.raises(ValueError, match="needs a reference"):
        ablate_heads(0, [0], mode="mean")
    with pytest.raises(ValueError, match="mode must be"):
        ablate_heads(0, [0], mode="resample")
    with pytest.raises(ValueError, match="no heads"):
        ablate_heads(0, [])
    _, other = capture(model, random_ids(5, batch=1), ["blocks.0.attn.hook_z"])
    bad = {"blocks.0.attn.hook_z": other["blocks.0.attn.hook_z"][:, :, :2]}
    with pytest.raises(ValueError, match="the source has shape"):
        run_with_edits(model, ids, patch_from(bad, "blocks.0.attn.hook_z"))


@pytest.mark.parametrize("positions", [None, [3, 6, 9]])
def test_generation_with_an_edit_and_the_kv_cache_equals_recomputation(model, positions):
    prompt = random_ids(5, seed=7).tolist()
    edits = [ablate_heads(1, [0, 2], positions=positions), ablate_neurons(0, list(range(0, 128, 3)))]
    cached = generate(model, prompt, 9, temperature=0.0, edits=edits)
    recomputed = generate(model, prompt, 9, temperature=0.0, edits=edits, use_cache=False)
    assert cached == recomputed
    # and each step's logits, not only the argmax
    a = [r.logits for r in stream(model, prompt, 6, temperature=0.0, edits=edits)]
    b = [r.logits for r in stream(model, prompt, 6, temperature=0.0, edits=edits, use_cache=False)]
    torch.testing.assert_close(torch.stack(a), torch.stack(b), atol=1e-5, rtol=1e-5)
    plain = [r.logits for r in stream(model, prompt, 6, temperature=0.0)]
    assert (torch.stack(a) - torch.stack(plain)).abs().max() > 1e-3


def test_threads_running_different_edits_each_get_their_own_result():
    model = build()
    ids = random_ids(12, seed=5)
    jobs = [None] + [ablate_heads(i % 2, [i % 4]) for i in range(15)]  # one plain capture among 15 edits
    expected = [capture(model, ids, (), edits=edit)[0] for edit in jobs]
    assert len({round(float(e.sum()), 4) for e in expected}) > 4  # the edits really differ
    results, barrier = [None] * len(jobs), threading.Barrier(len(jobs))

    def work(i):
        barrier.wait()
        for _ in range(20):
            results[i] = capture(model, ids, (), edits=jobs[i])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected, strict=True):
        torch.testing.assert_close(got, want)
