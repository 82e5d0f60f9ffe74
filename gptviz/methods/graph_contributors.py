"""The cheap end of the attribution graph (issue 58): every node's influence on one token and nothing else (no edges,
no ablation check), for a line under each written token ("L1H3 from 'Romeo' 41%"); node ids read back into nodes;
and the edits that remove one node from a generation, for the counterfactual text.

`top_contributors` costs the frozen model's forward and backward pass on the text so far: about a tenth of
`attribution_graph` on a short prompt, whose edge walks and ablation passes it leaves out.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import torch

from ..model.hooks import act_name
from .graph_frozen import FrozenModel, _project
from .graph_nodes import NodeRef, bias_in_stream, bias_names, node_values, ref_at
from .interventions import Edit, _local_positions, ablate_heads, ablate_neurons

FLOAT32 = 4
_NODE = re.compile(r"(?:E|L(\d{1,4})([HN])(\d{1,7})|B:L(\d{1,4})\.([a-z_0-9.-]+))@(\d{1,6})")


class Contributor(NamedTuple):
    id: str  # the graph's node id, e.g. "L1H0@28"
    kind: str  # "embeddings", "head", "neuron", "bias"
    layer: int | None
    index: int | None
    position: int  # where the node writes
    source: int  # the position it brings: a head's key with the largest part of its value, else its own
    value: float  # its influence (top_contributors) or its direct effect (graph_direct.direct_contributors)
    share: float  # value / the metric: its share of the logit (signed; past 100% where others pull back)

    @property
    def unit(self) -> str | None:
        """Its unit page's id ("L1H0", "L0N363"), or None for embeddings and bias nodes."""
        if self.kind not in ("head", "neuron"):
            return None
        return f"L{self.layer}{'H' if self.kind == 'head' else 'N'}{self.index}"


class Contributors(NamedTuple):
    metric: float  # logit(target) - logit(other) at the last position (or logit(target)): the shares' whole
    top: list[Contributor]
    measure: str = "influence"  # what the values are: "influence" (the graph's) or "direct effect"


def parse_node(node_id: str, config, T: int) -> NodeRef:
    """The node a graph id names (`E@p`, `L{l}H{h}@p`, `L{l}N{n}@p`, `B:L{l}.{bias}@p`), checked against the model's
    sizes and the prompt's T positions; ValueError in words otherwise. The metric is no node to remove."""
    match = _NODE.fullmatch(node_id.strip()) if isinstance(node_id, str) else None
    if match is None:
        raise ValueError(
            f"{node_id!r} is no node id: write E@p, L<layer>H<head>@p, L<layer>N<neuron>@p or "
            "B:L<layer>.<bias>@p, e.g. L1H0@28"
        )
    layer, kind, index, bias_layer, bias, position = match.groups()
    position = int(position)
    if position >= T:
        raise ValueError(f"{node_id}: position {position} is past the prompt's {T} tokens (0..{T - 1})")
    if layer is None and bias is None:
        return NodeRef("embeddings", None, None, position)
    layer = int(layer if layer is not None else bias_layer)
    if layer >= config.n_layers:
        raise ValueError(f"{node_id}: the model has {config.n_layers} layers (0..{config.n_layers - 1})")
    if bias is not None:
        if bias not in bias_names(config):
            raise ValueError(f"{node_id}: this model's bias nodes are {', '.join(bias_names(config))}")
        return NodeRef("bias", layer, None, position, bias)
    size, what = (config.n_heads, "heads") if kind == "H" else (config.d_ff, "neurons")
    if int(index) >= size:
        raise ValueError(f"{node_id}: layer {layer} has {size} {what} (0..{size - 1})")
    return NodeRef("head" if kind == "H" else "neuron", layer, int(index), position)


def top_contributors(model, ids, target: int, other: int | None = None, n: int = 3) -> Contributors:
    """The `n` nodes of largest |influence| on logit(target) - logit(other) (or logit(target)) at the last position
    of `ids`, from one frozen forward and backward pass, each with its share of that metric (influences overlap: a
    node's includes what later nodes do with its output, so shares need not add up to 100%). A head's `source` is
    the key position carrying the largest part of its influence (its output is a sum over keys, so its influence
    splits exactly over them)."""
    if model.training:
        raise ValueError("contributors read the model in eval mode (dropout off): call model.eval()")
    fm = FrozenModel(model, ids, target, other)
    influence = node_values(fm, fm.grads)
    flat, refs = _flatten(influence, fm)
    order = flat.abs().topk(min(n, flat.numel())).indices.tolist()
    top = []
    for i in order:
        ref, value = refs(i), float(flat[i])
        if value == 0:
            break
        source = _head_source(fm, ref) if ref.kind == "head" else ref.position
        top.append(
            Contributor(
                ref.id,
                ref.kind,
                ref.layer,
                ref.index,
                ref.position,
                source,
                value,
                value / fm.metric if fm.metric != 0 else float("nan"),
            )
        )
    return Contributors(fm.metric, top)


def _flatten(v, fm: FrozenModel):
    """Every node's value in one vector, and the node at index i (embeddings [T], heads [L, T, H], neurons
    [L, T, d_ff], then each bias [L, T])."""
    names = list(v.biases)
    flat = torch.cat([v.embeddings, v.heads.flatten(), v.neurons.flatten()] + [v.biases[b].flatten() for b in names])
    L, T, H = v.heads.shape
    d_ff = v.neurons.shape[2]

    def ref(i: int) -> NodeRef:
        return NodeRef("embeddings", None, None, i) if i < T else ref_at(i - T, L, T, H, d_ff, names)

    return flat, ref


def _head_source(fm: FrozenModel, ref: NodeRef) -> int:
    """The key whose value, weighted by the frozen pattern, carries the largest part of the head's influence."""
    w, layer, h, p = fm.layers[ref.layer], ref.layer, ref.index, ref.position
    v = _project(fm.attn_in[layer][: p + 1], w.Wv[h : h + 1], None if w.bv is None else w.bv[h : h + 1])[0]  # [p+1, dh]
    through = w.Wo[h] @ fm.grads[("attn", layer)][p]  # [dh]
    parts = fm.pattern[layer][h, p, : p + 1] * (v @ through)
    return int(parts.abs().argmax())


def contributor_label(c: Contributor, tokens: list[str]) -> str:
    """ "L1H0 from ' Romeo' +41%": the node, the token it brings, its signed share (token text quoted with repr's
    rules, so no token can look like the line's own punctuation)."""
    at = repr(tokens[c.source]) if 0 <= c.source < len(tokens) else f"position {c.source}"
    name = {"embeddings": "the token", "head": c.unit, "neuron": c.unit}.get(c.kind)
    if name is None:
        name = f"L{c.layer} {c.id.split('.', 1)[1].split('@')[0]}"
    word = "from" if c.kind == "head" else "at" if c.kind != "embeddings" else ""
    return f"{name} {word + ' ' if word else ''}{at} {c.share:+.0%}"


# ---- removing one node from a generation ----------------------------------------------------------------------


def node_edits(model, ref: NodeRef) -> list[Edit]:
    """Edits that remove one node wherever its position is in the window a call sees (a generation with the KV cache
    sees the prompt first, then one new position at a time, so the node is removed once, where it is): a head's z or
    a neuron's activation set to 0 at its position, the embeddings zeroed there, a bias node's constant subtracted."""
    if ref.kind == "head":
        return [ablate_heads(ref.layer, [ref.index], positions=[ref.position])]
    if ref.kind == "neuron":
        return [ablate_neurons(ref.layer, [ref.index], positions=[ref.position])]
    if ref.kind == "embeddings":
        return [Edit(act_name("resid_pre", 0), _at_position(ref.position, None), f"{ref.id} removed")]
    hook, constant = bias_in_stream(model, ref)
    return [Edit(hook, _at_position(ref.position, constant), f"{ref.id} removed")]


def _at_position(position: int, constant: torch.Tensor | None):
    """Zero the value at an absolute position (constant None), or subtract `constant` there; nothing when the call's
    window [offset, offset + T) does not hold it."""

    def fn(value: torch.Tensor, offset: int) -> torch.Tensor:
        rows = _local_positions([position], value.shape[1], offset)
        if not rows.numel():
            return value
        value = value.clone()
        at = int(rows[0])
        if constant is None:
            value[:, at] = 0.0
        else:
            value[:, at] -= constant.to(value.device, value.dtype)
        return value

    return fn
