"""The ablation check of an attribution graph (issue 58): the real model's metric with one node removed, minus the
unedited metric, through the edit path of gptviz.methods.interventions (patterns and norms recomputed).

A node at layer l and position p changes nothing before it, so each removal runs only from block l and from position p
on (model.forward_from), with the unedited run's residual stream entering block l and its keys and values for the
positions before p: the same numbers as a whole edited pass (tests/methods/test_graph.py checks them against an
independent forward), for a fraction of its cost. Removals that start at the same block run as one batch, from the
earliest of their positions.
"""

from __future__ import annotations

import torch

from ..model.hooks import act_name, capture, capturing, edits_by_hook
from .graph_nodes import NodeRef, bias_in_stream
from .interventions import Edit


def ablation_actuals(
    model, ids: list[int], refs: list[NodeRef], target: int, other: int | None
) -> tuple[float, list[float]]:
    """The real model's metric (logit(target) - logit(other) at the last position, or logit(target)) unedited, and
    for each node of `refs` the metric with it removed minus the unedited one."""
    L = model.config.n_layers
    names = [act_name(kind, layer) for layer in range(L) for kind in ("resid_pre", "k", "v")]
    logits, cache = capture(model, [list(ids)], names)
    base = _metric(logits[:, -1].float(), target, other)[0]
    kv = [
        (cache[act_name("k", layer)].transpose(1, 2), cache[act_name("v", layer)].transpose(1, 2)) for layer in range(L)
    ]
    groups: dict[int, list[int]] = {}
    for i, ref in enumerate(refs):
        groups.setdefault(ref.layer or 0, []).append(i)
    actual = [0.0] * len(refs)
    for layer, members in groups.items():
        start = min(refs[i].position for i in members)
        resid = cache[act_name("resid_pre", layer)][:, start:].expand(len(members), -1, -1)
        edits = [e for row, i in enumerate(members) for e in removal_edits(model, refs[i], row, start)]
        past = [(k[:, :, :start], v[:, :, :start]) for k, v in kv[layer:]] if start else None
        with torch.no_grad(), capturing(frozenset(), edits_by_hook(edits, model.hook_names)):
            edited = model.forward_from(layer, resid, last_only=True, past_kv=past)[:, -1].float()
        for i, value in zip(members, _metric(edited, target, other), strict=True):
            actual[i] = float(value - base)
    return float(base), actual


def _metric(logits: torch.Tensor, target: int, other: int | None) -> torch.Tensor:
    return logits[:, target] - (logits[:, other] if other is not None else 0)


def removal_edits(model, ref: NodeRef, row: int, start: int = 0) -> list[Edit]:
    """Edits that remove one node from row `row` of a run whose first position is `start`: a head's z or a neuron's
    activation set to 0 at its position (the shared out-projection bias kept), the token + position embedding set to
    0 (the stream entering block 0), a bias node's constant subtracted where it is added."""
    at, layer = ref.position - start, ref.layer
    label = f"{ref.id} removed"
    if ref.kind == "head":
        return [Edit(act_name("z", layer), _zero(row, at, ref.index), label)]
    if ref.kind == "neuron":
        return [Edit(act_name("post", layer), _zero(row, at, ref.index), label)]
    if ref.kind == "embeddings":
        return [Edit(act_name("resid_pre", 0), _zero(row, at), label)]
    hook, constant = bias_in_stream(model, ref)
    return [Edit(hook, _subtract(row, at, constant), label)]


def _zero(row: int, at: int, unit: int | None = None):
    def fn(value: torch.Tensor, offset: int) -> torch.Tensor:
        value = value.clone()
        if unit is None:
            value[row, at - offset] = 0.0
        else:
            value[row, at - offset, unit] = 0.0
        return value

    return fn


def _subtract(row: int, at: int, constant: torch.Tensor):
    def fn(value: torch.Tensor, offset: int) -> torch.Tensor:
        value = value.clone()
        value[row, at - offset] -= constant.to(value.device, value.dtype)
        return value

    return fn
