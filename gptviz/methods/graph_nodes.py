"""The nodes of an attribution graph and their numbers in the frozen model (gptviz.methods.graph_frozen): influence,
direct effect and bias part of every node at once, and the edge weights between chosen sources and targets from
batched pulls of the targets' input gradients along the direct path.

Node ids (issue 58): `E@p` (token + position embedding), `L{l}H{h}@p` (a head at query position p, through its slice
of the out-projection, without the shared bias), `L{l}N{n}@p` (a neuron: its activation times its output row),
`B:L{l}.attn.out-bias@p`, `B:L{l}.mlp.out-bias@p`, in post-norm blocks `B:L{l}.ln_1.beta@p` and `B:L{l}.ln_2.beta@p`,
and `metric`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..model.hooks import act_name
from .clock import Clock
from .graph_frozen import EMBED, FrozenModel, has_betas

# a bias node's name -> the write point it adds into
BIASES = {"attn.out-bias": "attn", "mlp.out-bias": "mlp", "ln_1.beta": "ln_1", "ln_2.beta": "ln_2"}


def bias_in_stream(model, ref: NodeRef) -> tuple[str, torch.Tensor]:
    """Where a bias node's constant is added to the stream (the hook point after it) and the constant (detached)."""
    block = model.blocks[ref.layer]
    hook, constant = {
        "attn.out-bias": ("attn_out", block.attn.c_proj.bias),
        "mlp.out-bias": ("mlp_out", block.mlp.c_proj.bias),
        "ln_1.beta": ("resid_mid", getattr(block.ln_1, "bias", None)),
        "ln_2.beta": ("resid_post", getattr(block.ln_2, "bias", None)),
    }[ref.bias]
    return act_name(hook, ref.layer), constant.detach()


def bias_names(config) -> list[str]:
    """The constants written into the stream at every position: the out-projection biases, and in post-norm blocks
    the betas of the norms that write the stream (LayerNorm only)."""
    names = ["attn.out-bias", "mlp.out-bias"]
    return names + (["ln_1.beta", "ln_2.beta"] if config.norm == "post" and has_betas(config) else [])


class NodeRef(NamedTuple):
    kind: str  # "embeddings", "head", "neuron", "bias", "metric"
    layer: int | None
    index: int | None  # the head or the neuron
    position: int
    bias: str | None = None  # a bias node's name (BIASES)

    @property
    def id(self) -> str:
        if self.kind == "metric":
            return "metric"
        if self.kind == "embeddings":
            return f"E@{self.position}"
        if self.kind == "bias":
            return f"B:L{self.layer}.{self.bias}@{self.position}"
        return f"L{self.layer}{'H' if self.kind == 'head' else 'N'}{self.index}@{self.position}"

    @property
    def point(self) -> tuple[str, int | None]:
        """Where this node writes into the stream."""
        if self.kind == "embeddings":
            return EMBED
        if self.kind == "bias":
            return BIASES[self.bias], self.layer
        return ("attn" if self.kind == "head" else "mlp"), self.layer

    @property
    def reads(self) -> tuple[str, int | None] | None:
        """Where this node reads the stream (None: it has no input)."""
        return {"head": ("attn", self.layer), "neuron": ("mlp", self.layer), "metric": ("metric", None)}.get(self.kind)


def metric_ref(T: int) -> NodeRef:
    return NodeRef("metric", None, None, T - 1)


class Values(NamedTuple):
    """One number for every node but the metric: embeddings [T], heads [layers, T, heads], neurons [layers, T, d_ff],
    biases {name: [layers, T]}."""

    embeddings: torch.Tensor
    heads: torch.Tensor
    neurons: torch.Tensor
    biases: dict

    def at(self, ref: NodeRef) -> float:
        if ref.kind == "embeddings":
            return float(self.embeddings[ref.position])
        if ref.kind == "bias":
            return float(self.biases[ref.bias][ref.layer, ref.position])
        table = self.heads if ref.kind == "head" else self.neurons
        return float(table[ref.layer, ref.position, ref.index])

    def total(self) -> float:
        return float(
            self.embeddings.sum() + self.heads.sum() + self.neurons.sum() + sum(b.sum() for b in self.biases.values())
        )


def node_values(fm: FrozenModel, grads: dict) -> Values:
    """Every node's output dotted with `grads` (a gradient [T, d] at each write point): with the metric's gradient
    in the frozen model, the influences; with its direct-path gradient, the direct effects."""
    heads = torch.stack(
        [
            (fm.z[layer] * torch.einsum("td,hkd->thk", grads[("attn", layer)], w.Wo)).sum(-1)
            for layer, w in enumerate(fm.layers)
        ]
    )
    neurons = torch.stack([fm.act[layer] * (grads[("mlp", layer)] @ w.Wout) for layer, w in enumerate(fm.layers)])
    biases = {
        name: torch.stack(
            [grads[(BIASES[name], layer)] @ _bias_vector(fm, name, layer) for layer in range(fm.config.n_layers)]
        )
        for name in bias_names(fm.config)
    }
    return Values((fm.emb * grads[EMBED]).sum(-1), heads, neurons, biases)


def bias_parts(fm: FrozenModel) -> tuple[Values, float]:
    """Each node's own bias part (the constants that enter only through its input, in metric units): a head's value
    bias, a neuron's input bias, and in pre-norm the beta of the norm it reads, each through the reader's own
    weights; and the metric's (the final norm's beta). Embeddings and bias nodes have no input: 0."""
    pre, T = fm.config.norm == "pre", fm.T
    heads, neurons = [], []
    for layer, w in enumerate(fm.layers):
        value_const = torch.zeros_like(w.Wv[:, :, 0]) if w.bv is None else w.bv.clone()  # [H, dh]
        beta = fm.norms[("ln_1", layer)].beta if pre else None
        if beta is not None:
            value_const += torch.einsum("hkd,d->hk", w.Wv, beta)
        through = torch.einsum("td,hkd->thk", fm.grads[("attn", layer)], w.Wo)  # [T, H, dh]
        # sum_j pattern[h, p, j] * const: the row sums (1 up to rounding) kept so the identities hold exactly
        heads.append((through * value_const).sum(-1) * fm.pattern[layer].sum(-1).T)
        input_const = w.bfc.clone()
        beta = fm.norms[("ln_2", layer)].beta if pre else None
        if beta is not None:
            input_const += w.Wfc @ beta
        neurons.append(fm.ratio[layer] * (fm.grads[("mlp", layer)] @ w.Wout) * input_const)
    zeros = torch.zeros(fm.config.n_layers, T, device=fm.emb.device)
    parts = Values(
        torch.zeros(T, device=fm.emb.device),
        torch.stack(heads),
        torch.stack(neurons),
        {name: zeros for name in bias_names(fm.config)},
    )
    final_beta = fm.norms[("ln_f", None)].beta
    return parts, float(final_beta @ fm.u) if final_beta is not None else 0.0


def _bias_vector(fm: FrozenModel, name: str, layer: int) -> torch.Tensor:
    w = fm.layers[layer]
    if name == "attn.out-bias":
        return w.bo
    if name == "mlp.out-bias":
        return w.bout
    return fm.norms[(BIASES[name], layer)].beta


def output_vector(fm: FrozenModel, ref: NodeRef) -> torch.Tensor:
    """What a node writes into the stream at its position, [d_model]."""
    if ref.kind == "embeddings":
        return fm.emb[ref.position]
    if ref.kind == "bias":
        return _bias_vector(fm, ref.bias, ref.layer)
    w = fm.layers[ref.layer]
    if ref.kind == "head":
        return fm.z[ref.layer][ref.position, ref.index] @ w.Wo[ref.index]
    return fm.act[ref.layer][ref.position, ref.index] * w.Wout[:, ref.index]


def all_nodes(config, T: int) -> list[NodeRef]:
    """Every node of the graph but the metric, in schedule order (small models: the tests' full edge matrices)."""
    nodes = [NodeRef("embeddings", None, None, p) for p in range(T)]
    for layer in range(config.n_layers):
        nodes += [NodeRef("head", layer, h, p) for p in range(T) for h in range(config.n_heads)]
        nodes += [NodeRef("neuron", layer, n, p) for p in range(T) for n in range(config.d_ff)]
        nodes += [NodeRef("bias", layer, None, p, name) for name in bias_names(config) for p in range(T)]
    return nodes


# ---- edges ---------------------------------------------------------------------------------------------------


class EdgeWeights(NamedTuple):
    weights: torch.Tensor  # [targets, sources]: weight(source -> target), 0 where no direct path joins them
    incoming: torch.Tensor  # [targets]: the sum of each target's incoming edges from every node (not only `sources`)


def edge_weights(
    fm: FrozenModel, sources: list[NodeRef], targets: list[NodeRef], rows: int = 64, clock: Clock | None = None
) -> EdgeWeights:
    """weight(s -> t) = the part of t's influence that s's output carries through t's input: t's input gradient
    (its influence as a linear function of its input) pulled back along the direct path to s's write point, dotted
    with s's output. One backward walk per `rows` targets (targets without input, such as embeddings, get 0)."""
    weights = torch.zeros(len(targets), len(sources), device=fm.emb.device)
    incoming = torch.zeros(len(targets), device=fm.emb.device)
    grouped: dict = {}  # write point -> position -> the sources there
    for i, s in enumerate(sources):
        grouped.setdefault(s.point, {}).setdefault(s.position, []).append(i)
    outputs = {
        point: [
            (p, torch.tensor(idx, device=weights.device), torch.stack([output_vector(fm, sources[i]) for i in idx]))
            for p, idx in at.items()
        ]
        for point, at in grouped.items()
    }
    readers = [i for i, t in enumerate(targets) if t.reads is not None]
    for start in range(0, len(readers), max(1, rows)):
        chunk = torch.tensor(readers[start : start + rows], device=weights.device)
        chunk_targets = [targets[i] for i in chunk.tolist()]

        def on_write(point, V, chunk=chunk):
            incoming[chunk] += (V * fm.written[point]).sum((1, 2))
            for position, idx, out in outputs.get(point, ()):
                weights[chunk[:, None], idx] = V[:, position] @ out.T

        fm.pull_back(len(chunk_targets), lambda step, V, ts=chunk_targets: _inject(fm, ts, step, V), on_write)
        if clock is not None:
            clock.check()
    return EdgeWeights(weights, incoming)


def _inject(fm: FrozenModel, targets: list[NodeRef], step, V: torch.Tensor) -> None:
    """Add to V's rows the gradient of each target read at `step` (its influence, a linear function of its input)
    with respect to the stream it reads, through the reader's own norm in pre-norm."""
    rows = [r for r, t in enumerate(targets) if t.reads == step.point]
    if not rows:
        return
    norm, T = fm.reader_norm(step), fm.T
    if step.what == "metric":
        V[rows[0], T - 1] += norm.transpose(fm.u, T - 1)
        return
    w, layer = fm.layers[step.layer], step.layer
    index = torch.tensor([targets[r].index for r in rows], device=V.device)
    positions = torch.tensor([targets[r].position for r in rows], device=V.device)
    rows = torch.tensor(rows, device=V.device)
    if step.what == "attn":  # d/dx_j of g_p . (sum_j pattern[p, j] (x_j Wv^T + bv)) Wo = pattern[p, j] (Wo g_p) Wv
        through = torch.einsum("nd,nkd->nk", fm.grads[("attn", layer)][positions], w.Wo[index])
        vec = torch.einsum("nk,nkd->nd", through, w.Wv[index])
        add = fm.pattern[layer][index, positions][:, :, None] * vec[:, None, :]  # [n, T, d]
        V[rows] += norm.transpose(add) if norm is not None else add
    else:  # d/dx_p of ratio (x_p . Wfc[n] + b) (g_p . Wout[:, n])
        coef = fm.ratio[layer][positions, index] * (fm.grads[("mlp", layer)][positions] * w.Wout[:, index].T).sum(-1)
        vec = coef[:, None] * w.Wfc[index]
        V[rows, positions] += norm.transpose(vec, positions) if norm is not None else vec


def ref_at(i: int, L: int, T: int, H: int, d_ff: int, names: list[str]) -> NodeRef:
    """The node at index i of select_nodes' flat order: heads [L, T, H], neurons [L, T, d_ff], biases [L, T] each."""
    if i < L * T * H:
        return NodeRef("head", i // (T * H), i % H, (i // H) % T)
    i -= L * T * H
    if i < L * T * d_ff:
        return NodeRef("neuron", i // (T * d_ff), i % d_ff, (i // d_ff) % T)
    i -= L * T * d_ff
    name, i = names[i // (L * T)], i % (L * T)
    return NodeRef("bias", i // T, None, i % T, name)
