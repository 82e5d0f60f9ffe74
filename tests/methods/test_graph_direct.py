"""The live text's contributors (issue 58, gptviz.methods.graph_direct): every last-position node's direct effect read
from a generation step's capture equals the attribution graph's `direct` field for that node, computed independently
by FrozenModel on the text so far (both wirings, LayerNorm and RMSNorm, with and without the KV cache, past a context
shift); the effects and the final beta's part add up to the model's logit; the top n are the n largest; a head's
source is the key that brings the most of its effect; a batch gives what its steps give one by one."""

from __future__ import annotations

import pytest
import torch

from gptviz import GPT, GPTConfig
from gptviz.methods.graph_direct import DirectStep, direct_contributors, direct_effects, direct_hooks
from gptviz.methods.graph_frozen import FrozenModel
from gptviz.methods.graph_nodes import node_values
from gptviz.model.generate import stream
from gptviz.model.hooks import act_name, capture

WIRINGS = [
    dict(norm="pre", norm_type="layernorm"),
    dict(norm="pre", norm_type="rmsnorm"),
    dict(norm="post", norm_type="layernorm"),
    dict(norm="post", norm_type="rmsnorm"),
]
PROMPT = [1, 2, 3, 4, 5]


def model_of(**kw) -> GPT:
    config = GPTConfig(vocab_size=100, n_ctx=12, d_model=32, n_layers=2, n_heads=4, d_ff=64, **kw)
    return GPT(config, seed=0).eval()


def generated(model, use_cache: bool = True, new: int = 10) -> list[tuple[DirectStep, list[int]]]:
    """Each step of a sampled run with the hooks captured, and the text the model saw at that step."""
    seq, out = list(PROMPT), []
    names = direct_hooks(model.config)
    for rec in stream(model, seq, max_new_tokens=new, seed=3, attention=True, capture=names, use_cache=use_cache):
        values = [rec.values[layer].clone() for layer in range(len(rec.values))]  # the cache moves on
        step = DirectStep(
            rec.captured, values, rec.attention, rec.position - 1, rec.token_id, float(rec.logits[rec.token_id])
        )
        out.append((step, seq[rec.window_start :]))
        seq.append(rec.token_id)
    return out


def graph_direct(model, seen: list[int], target: int):
    """The graph's direct effects of every node at the last position (FrozenModel's own direct-path pass)."""
    fm = FrozenModel(model, seen, target)
    return node_values(fm, fm.direct_grads())


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("wiring", WIRINGS, ids=lambda w: f"{w['norm']}-{w['norm_type']}")
def test_every_direct_effect_is_the_graphs_and_they_add_up_to_the_logit(wiring, use_cache):
    model = model_of(**wiring)
    steps = generated(model, use_cache)  # 15 tokens in a context of 12: the window shifts
    assert any(seen[0] != PROMPT[0] for _, seen in steps)
    effects = direct_effects(model, [s for s, _ in steps])
    for k, (step, seen) in enumerate(steps):
        want = graph_direct(model, seen, step.target)
        assert torch.allclose(effects.heads[k], want.heads[:, -1], atol=1e-5)
        assert torch.allclose(effects.neurons[k], want.neurons[:, -1], atol=1e-5)
        assert float(effects.embeddings[k]) == pytest.approx(float(want.embeddings[-1]), abs=1e-5)
        assert set(effects.biases) == set(want.biases)
        for name, per_layer in effects.biases.items():
            assert torch.allclose(per_layer[k], want.biases[name][:, -1], atol=1e-5)
    logits = torch.tensor([s.logit for s, _ in steps])
    assert torch.allclose(effects.totals(), logits, atol=1e-4)


@pytest.mark.parametrize("wiring", WIRINGS[::2], ids=lambda w: w["norm"])
def test_the_top_contributors_are_the_largest_effects_with_their_share_of_the_logit(wiring):
    model = model_of(**wiring)
    steps = generated(model)
    found = direct_contributors(model, [s for s, _ in steps], n=5)
    for (step, seen), contributors in zip(steps, found, strict=True):
        want = graph_direct(model, seen, step.target)
        every = torch.cat(
            [want.embeddings[-1:], want.heads[:, -1].flatten(), want.neurons[:, -1].flatten()]
            + [b[:, -1] for b in want.biases.values()]
        )
        largest = every.abs().sort(descending=True).values[:5].tolist()
        assert [abs(c.value) for c in contributors.top] == pytest.approx(largest, abs=1e-5)
        assert contributors.metric == step.logit and contributors.measure == "direct effect"
        for c in contributors.top:
            assert c.share == pytest.approx(c.value / step.logit)
            assert c.position == step.position and c.id.endswith(f"@{step.position}")
            table = {"head": want.heads, "neuron": want.neurons}.get(c.kind)
            if table is not None:
                assert c.value == pytest.approx(float(table[c.layer, -1, c.index]), abs=1e-5)


def test_a_heads_source_is_the_key_whose_value_brings_the_most_of_its_effect():
    model = model_of(norm="pre", norm_type="layernorm")
    steps = generated(model, new=4)  # no shift: positions are the whole text's
    found = direct_contributors(model, [s for s, _ in steps], n=model.config.n_layers * model.config.n_heads + 10)
    checked = 0
    for (step, seen), contributors in zip(steps, found, strict=True):
        ids = torch.tensor([seen])
        names = [act_name("v", layer) for layer in range(2)] + [act_name("pattern", layer) for layer in range(2)]
        _, cached = capture(model, ids, names)
        for c in contributors.top:
            if c.kind != "head":
                continue
            # independently: the head's output at the last position split over keys, each part projected the same way
            v = cached[act_name("v", c.layer)][0, :, c.index]  # [T, d_head]
            a = cached[act_name("pattern", c.layer)][0, c.index, -1]  # [T]
            w_out = model.blocks[c.layer].attn.c_proj.weight.detach().T.reshape(4, 8, 32)[c.index]  # [d_head, d]
            out = (a[:, None] * v) @ w_out  # [T, d]
            whole = direct_effects(model, [step])
            g = whole.grads[("attn", c.layer)][0]
            parts = out @ g
            assert float(parts.sum()) == pytest.approx(c.value, abs=1e-5)  # the keys' parts make the whole
            assert c.source == int(parts.abs().argmax())
            checked += 1
    assert checked >= 8


def test_a_batch_gives_what_its_steps_give_one_by_one():
    model = model_of(norm="post", norm_type="layernorm")
    steps = [s for s, _ in generated(model)]
    together = direct_contributors(model, steps)
    alone = [direct_contributors(model, [s])[0] for s in steps]
    for a, b in zip(together, alone, strict=True):
        assert [c.id for c in a.top] == [c.id for c in b.top]
        assert [c.value for c in a.top] == pytest.approx([c.value for c in b.top], abs=1e-6)
    assert direct_contributors(model, []) == []


def test_a_step_captures_its_last_position_and_its_keys_values():
    model = model_of(norm="post", norm_type="layernorm")
    names = direct_hooks(model.config)
    with pytest.raises(ValueError, match="no hook point named 'blocks.9.mlp.hook_post'"):
        stream(model, PROMPT, max_new_tokens=1, capture=["blocks.9.mlp.hook_post"])
    seq = list(PROMPT)
    for rec in stream(model, seq, max_new_tokens=3, seed=0, capture=names):
        _, cached = capture(model, torch.tensor([seq]), names + [act_name("v", 0), act_name("v", 1)])
        for name in names:
            assert torch.allclose(rec.captured[name], cached[name][0, -1:], atol=1e-5), name
        for layer in range(2):
            assert torch.allclose(rec.values[layer], cached[act_name("v", layer)][0].transpose(0, 1), atol=1e-5)
        seq.append(rec.token_id)
