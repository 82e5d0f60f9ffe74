"""The live text's contributors (issue 58): each node at the written token's own position with its direct effect on
that token's logit, from what the generation step already computed. No pass of its own: the step captures the
predicting position's head outputs, neuron activations and norm inputs (`direct_hooks`), its attention row and the
keys' values, and this reads them with the target once it is sampled.

A node's direct effect is the attribution graph's `direct` field (gptviz.methods.graph): its output carried to the
metric with no node in between, through the final norm (and, post-norm, every later block norm) at their frozen
scales. Only nodes at the last position write there, and with the final norm's beta (the metric's own bias part) they
add up exactly to the logit, so their shares of it add up to 100%.

Steps are taken in batches: one batch reads each output matrix once for all its steps (a matrix-matrix product
instead of one matrix-vector product a step, which on a CPU is bound by reading the matrix), and its Python work is
shared too. `python -m benchmarks live-why` measures the model's rate with and without them; the graph's influences
need a backward pass over every position instead (`top_contributors`, on demand).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from ..model.hooks import act_name
from .graph_contributors import Contributor, Contributors
from .graph_frozen import FrozenNorm, LayerWeights, has_betas
from .graph_nodes import NodeRef, bias_names

MEASURE = "direct effect"


def direct_hooks(config) -> list[str]:
    """The hook points a step captures for its contributors: the embeddings, every layer's head outputs (z) and
    neuron activations, and the stream each norm reads (pre-norm: the final norm's only; post-norm: every block's,
    made from the stream around its sub-layers)."""
    names = ["hook_embed", "hook_pos_embed"]
    around = ("resid_pre", "attn_out", "resid_mid", "mlp_out") if config.norm == "post" else ()
    for layer in range(config.n_layers):
        names += [act_name(n, layer) for n in ("z", "post", *around)]
    return names + [act_name("resid_post", config.n_layers - 1)]


class DirectStep(NamedTuple):
    """What one generation step gives its contributors."""

    captured: dict  # hook name -> its value at the predicting position, [1, ...] (direct_hooks)
    values: object  # values[layer]: the keys' values [heads, keys, d_head] (gptviz.model.generate.KeyValues)
    pattern: torch.Tensor  # [layers, heads, keys]: the predicting position's attention row
    position: int  # the predicting token's position in the whole text
    target: int  # the token written
    logit: float  # its logit, as the model computed it


class DirectEffects(NamedTuple):
    """Each step's last-position nodes' direct effects on logit(target), a row a step: embeddings [K], heads
    [K, L, H], neurons [K, L, d_ff], biases {name: [K, L]}, and the final norm's beta's part [K] (the metric's own).
    `grads` {write point: [K, d]}: the direct-path gradient at each; `through` [K, L, H, d_head]: that gradient
    carried back through each head's out-projection (a head's effect is its z dotted with it, so it splits over the
    keys' values)."""

    embeddings: torch.Tensor
    heads: torch.Tensor
    neurons: torch.Tensor
    biases: dict
    final_beta: torch.Tensor
    grads: dict
    through: torch.Tensor

    def totals(self) -> torch.Tensor:
        """Each step's logit, rebuilt: every direct effect and the final beta's part [K]."""
        parts = self.embeddings + self.heads.sum((1, 2)) + self.neurons.sum((1, 2)) + self.final_beta
        return parts + sum(b.sum(1) for b in self.biases.values())

    def flat(self) -> torch.Tensor:
        """[K, nodes]: embeddings, heads (layer-major), neurons (layer-major), then each bias by layer (node_at)."""
        K = self.heads.shape[0]
        biases = list(self.biases.values())
        return torch.cat([self.embeddings[:, None], self.heads.reshape(K, -1), self.neurons.reshape(K, -1), *biases], 1)


def _layers(model) -> list[LayerWeights]:
    """The model's matrices by layer: views of its float32 weights, no copy (made for each batch, so nothing here
    keeps a model alive once its generation is over)."""
    return [LayerWeights(block, model.config) for block in model.blocks]


def direct_effects(model, steps: list[DirectStep]) -> DirectEffects:
    """The direct effects of every last-position node of each step on its target's logit, all steps at once."""
    cfg = model.config
    layernorm, post = has_betas(cfg), cfg.norm == "post"
    layers = _layers(model)

    def stacked(name: str) -> torch.Tensor:
        return torch.cat([s.captured[name] for s in steps]).detach().float()  # each [1, ...]

    def frozen(module, x: torch.Tensor) -> FrozenNorm:
        return FrozenNorm(module, x, layernorm)

    u = model.lm_head.weight[[s.target for s in steps]].detach().float()  # [K, d]
    final = frozen(model.ln_f, stacked(act_name("resid_post", cfg.n_layers - 1)))
    g = final.transpose(u)
    final_beta = u @ final.beta if final.beta is not None else torch.zeros(len(steps))
    heads, neurons, grads, through = [], [], {}, []
    biases = {name: [] for name in bias_names(cfg)}
    for layer in reversed(range(cfg.n_layers)):
        block, w = model.blocks[layer], layers[layer]
        if post:  # x_mid = ln_1(x + attn); x_out = ln_2(x_mid + mlp): the norms stand between the writes and g
            ln_2 = frozen(block.ln_2, stacked(act_name("resid_mid", layer)) + stacked(act_name("mlp_out", layer)))
            ln_1 = frozen(block.ln_1, stacked(act_name("resid_pre", layer)) + stacked(act_name("attn_out", layer)))
            g_ln_2, g_mlp = g, ln_2.transpose(g)
            g_attn = ln_1.transpose(g_mlp)
            if layernorm:
                biases["ln_2.beta"].append(g_ln_2 @ ln_2.beta)
                biases["ln_1.beta"].append(g_mlp @ ln_1.beta)
        else:
            g_mlp = g_attn = g
        z = stacked(act_name("z", layer))  # [K, H, d_head]
        through.append(torch.einsum("hkd,nd->nhk", w.Wo, g_attn))
        heads.append((z * through[-1]).sum(-1))
        neurons.append(stacked(act_name("post", layer)) * (g_mlp @ w.Wout))  # one read of Wout for every step
        zero = torch.zeros(len(steps))
        biases["attn.out-bias"].append(g_attn @ w.bo if w.bo is not None else zero)
        biases["mlp.out-bias"].append(g_mlp @ w.bout if w.bout is not None else zero)
        grads[("attn", layer)], grads[("mlp", layer)] = g_attn, g_mlp
        g = g_attn
    embeddings = ((stacked("hook_embed") + stacked("hook_pos_embed")) * g).sum(-1)
    return DirectEffects(
        embeddings,
        torch.stack(heads[::-1], 1),
        torch.stack(neurons[::-1], 1),
        {name: torch.stack(values[::-1], 1) for name, values in biases.items()},
        final_beta,
        grads,
        torch.stack(through[::-1], 1),
    )


def node_at(i: int, config, position: int) -> NodeRef:
    """The node at column i of DirectEffects.flat()."""
    L, H, d_ff = config.n_layers, config.n_heads, config.d_ff
    if i == 0:
        return NodeRef("embeddings", None, None, position)
    i -= 1
    if i < L * H:
        return NodeRef("head", i // H, i % H, position)
    i -= L * H
    if i < L * d_ff:
        return NodeRef("neuron", i // d_ff, i % d_ff, position)
    i -= L * d_ff
    return NodeRef("bias", i % L, None, position, bias_names(config)[i // L])


def direct_contributors(model, steps: list[DirectStep], n: int = 3) -> list[Contributors]:
    """For each step, the `n` last-position nodes of largest |direct effect| on its target's logit, each with its
    share of the step's own logit (the effects and the final beta's part add up to it). A head's source is the key
    whose value carries the largest part of its direct effect; the keys are the last len(keys) positions up to the
    predicting one."""
    if not steps:
        return []
    effects = direct_effects(model, steps)
    flat = effects.flat()
    top = flat.abs().topk(min(n, flat.shape[1]), dim=1).indices
    values = flat.gather(1, top).tolist()  # one conversion for the batch: the thread shares the interpreter
    refs = [
        [node_at(i, model.config, step.position) for i in row] for row, step in zip(top.tolist(), steps, strict=True)
    ]
    sources = head_sources(steps, effects, {ref.layer for row in refs for ref in row if ref.kind == "head"})
    out = []
    for k, step in enumerate(steps):
        found = []
        for ref, value in zip(refs[k], values[k], strict=True):
            if value == 0:
                break
            source = sources[k][ref.layer][ref.index] if ref.kind == "head" else step.position
            share = value / step.logit if step.logit != 0 else float("nan")
            found.append(Contributor(ref.id, ref.kind, ref.layer, ref.index, step.position, source, value, share))
        out.append(Contributors(step.logit, found, MEASURE))
    return out


def head_sources(steps: list[DirectStep], effects: DirectEffects, layers: set[int]) -> list:
    """sources[k][layer][head]: the position of the key whose value carries the largest part of that head's direct
    effect at step k, for the `layers` asked (None elsewhere). A few operations a layer for a whole batch: steps that
    read the same keys (one KV cache, one window) share the widest step's values, their attention rows padded."""
    K, L, H = effects.heads.shape
    sources: list = [[None] * L for _ in range(K)]
    groups: dict = {}
    for k, step in enumerate(steps):
        keys = step.pattern.shape[-1]
        groups.setdefault((step.position - keys + 1, step.values[0].data_ptr()), []).append(k)
    for (first_key, _), ks in groups.items():
        widest = max(ks, key=lambda k: steps[k].pattern.shape[-1])
        for layer in sorted(layers):
            values = steps[widest].values[layer].float()  # [H, keys, d_head]
            rows = pad_sequence([steps[k].pattern[layer].float().T for k in ks], batch_first=True)  # [n, keys, H]
            weighted = torch.einsum("nhd,hjd->nhj", effects.through[ks, layer], values[:, : rows.shape[1]])
            best = (rows.transpose(1, 2) * weighted).abs().argmax(-1) + first_key  # [n, H]
            for k, row in zip(ks, best.tolist(), strict=True):
                sources[k][layer] = row
    return sources
