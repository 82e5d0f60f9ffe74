"""Why this token, all the way down: the attribution graph of issue 58 over embeddings, heads, neurons and biases.

`attribution_graph(model, ids, target, other)` builds it in the frozen model (gptviz.methods.graph_frozen: patterns,
norm scales and neuron ratios fixed on the prompt, so the model is linear in every component's output and equals the
real model there): every node's influence on the metric (logit(target) - logit(other) at the last position, or
logit(target) alone) from one backward pass, its direct effect, its bias part; the nodes kept by cumulative influence;
the edges among them from batched pulls along the direct path (gptviz.methods.graph_nodes); and for the top nodes the
ablation check: the frozen model's prediction (-influence) beside a real edited forward pass (patterns and norms
recomputed) through the same edit path as gptviz.methods.interventions. Results are plain data; graph_export writes
the JSON of the issue.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.sizes import edge_rows, graph_nbytes
from .clock import Clock
from .graph_ablation import ablation_actuals
from .graph_frozen import FrozenModel, check_target, has_betas
from .graph_nodes import NodeRef, Values, bias_names, bias_parts, edge_weights, metric_ref, node_values, ref_at

METHOD = "frozen attention and norm scales; neurons pass act/pre"
FLOAT32 = 4


@dataclass
class Ablation:
    predicted: float  # -influence: the frozen model's change when the node is removed
    actual: float  # the real model's metric with the node removed, minus the unedited metric


@dataclass
class GraphNode:
    id: str
    kind: str  # "embeddings", "head", "neuron", "bias", "metric"
    layer: int | None
    index: int | None
    position: int
    influence: float
    direct: float
    incoming_sum: float
    bias_part: float
    ablation: Ablation | None = None


@dataclass
class GraphEdge:
    source: str
    target: str
    weight: float


@dataclass
class Pruning:
    node_threshold: float
    edge_threshold: float
    max_nodes: int
    nodes_total: int
    nodes_kept: int
    edges_total: int
    edges_kept: int
    node_share: float  # the share of the total absolute influence the kept nodes cover


@dataclass
class AttributionGraph:
    wiring: str
    prompt_ids: list[int]
    target: int
    other: int | None
    metric: float  # in the frozen model (equal to the real model's on the prompt)
    real_metric: float  # the real model's forward pass, as the ablations' baseline
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    pruning: Pruning

    def node(self, node_id: str) -> GraphNode:
        return next(n for n in self.nodes if n.id == node_id)


def attribution_graph(
    model,
    ids,
    target: int,
    other: int | None = None,
    *,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    max_nodes: int = 200,
    ablations: int = 10,
    memory_budget: int | None = None,
    clock: Clock | None = None,
) -> AttributionGraph:
    """The attribution graph of `target` (against `other`, if given) at the last position of `ids` (one prompt).

    Keeps the smallest set of nodes whose absolute influences cover `node_threshold` of the total (the embeddings
    and the metric always kept, at most `max_nodes` in all unless the embeddings alone are more), and among them the
    edges covering `edge_threshold` of their absolute weight. `memory_budget` (bytes): refused with a ValueError when
    the estimate (graph_nbytes) is larger; `clock`: anything with `check()` that raises when time is up."""
    _check_settings(node_threshold, edge_threshold, max_nodes, ablations)
    if model.training:
        raise ValueError("the attribution graph reads the model in eval mode (dropout off): call model.eval()")
    check_target(model.config, target, other)
    T = int(torch.as_tensor(ids).numel())
    if memory_budget is not None:
        need = graph_nbytes(model.config, max(T, 1), max_nodes, ablations, model.wte.weight.element_size())
        if need > memory_budget:
            raise ValueError(
                f"the attribution graph of {T} tokens on this model needs about {_mib(need)}, more "
                f"than the limit of {_mib(memory_budget)}: try a shorter prompt or a smaller model"
            )
    fm = FrozenModel(model, ids, target, other)
    _tick(clock)
    influence, direct = node_values(fm, fm.grads), node_values(fm, fm.direct_grads())
    parts, metric_part = bias_parts(fm)
    kept, share = select_nodes(influence, fm.T, node_threshold, max_nodes)
    _tick(clock)
    sources = [r for r in kept if r.kind != "metric"]
    found = edge_weights(fm, sources, kept, edge_rows(fm.config, fm.T), clock)
    nodes = _graph_nodes(fm, kept, influence, direct, parts, metric_part, found.incoming)
    edges = _prune_edges(found.weights, kept, sources, edge_threshold)
    checked = sorted((n for n in nodes if n.kind != "metric"), key=lambda n: -abs(n.influence))[:ablations]
    refs = {r.id: r for r in kept}
    _tick(clock)
    base, actual = ablation_actuals(model, fm.ids.tolist(), [refs[n.id] for n in checked], target, other)
    for n, value in zip(checked, actual, strict=True):
        n.ablation = Ablation(-n.influence, value)
    pruning = Pruning(
        node_threshold,
        edge_threshold,
        max_nodes,
        nodes_total(fm.config, fm.T),
        len(nodes),
        edges_total(fm.config, fm.T),
        len(edges),
        share,
    )
    return AttributionGraph(fm.config.norm, fm.ids.tolist(), target, other, fm.metric, base, nodes, edges, pruning)


def _tick(clock: Clock | None) -> None:
    if clock is not None:
        clock.check()


def _check_settings(node_threshold, edge_threshold, max_nodes, ablations) -> None:
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    for name, value in (("max_nodes", max_nodes), ("ablations", ablations)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "max_nodes" else 0):
            raise ValueError(
                f"{name} must be a whole number of at least {1 if name == 'max_nodes' else 0}, got {value!r}"
            )


# ---- pruning -------------------------------------------------------------------------------------------------


def select_nodes(influence: Values, T: int, threshold: float, max_nodes: int) -> tuple[list[NodeRef], float]:
    """The embeddings, then the other nodes by |influence|, largest first, until the kept ones cover `threshold` of
    the total absolute influence (over every node but the metric) or `max_nodes` are kept with the metric; the
    metric last. Returns the nodes and the share they cover. Nodes of zero influence are never added."""
    L, _, H = influence.heads.shape
    d_ff = influence.neurons.shape[2]
    names = list(influence.biases)
    flat = torch.cat(
        [influence.heads.flatten(), influence.neurons.flatten()] + [influence.biases[n].flatten() for n in names]
    ).abs()
    forced = float(influence.embeddings.abs().sum())
    total = forced + float(flat.sum())
    room = max(0, min(max_nodes - T - 1, flat.numel()))
    top_values, top_index = flat.topk(room) if room else (flat[:0], flat[:0].long())
    values = top_values.double()
    before = forced + torch.cumsum(values, 0) - values  # what the kept nodes cover before each is added
    n = min(int((before < threshold * total).sum()), int((values > 0).sum()))
    kept = [NodeRef("embeddings", None, None, p) for p in range(T)]
    kept += [ref_at(int(i), L, T, H, d_ff, names) for i in top_index[:n]]
    share = (forced + float(top_values[:n].double().sum())) / total if total > 0 else 1.0
    return kept + [metric_ref(T)], share


def _prune_edges(
    weights: torch.Tensor, targets: list[NodeRef], sources: list[NodeRef], threshold: float
) -> list[GraphEdge]:
    """The fewest edges, largest |weight| first, covering `threshold` of the absolute weight of every edge between
    the kept nodes; edges of zero weight (no direct path) are never kept."""
    flat = weights.flatten().abs()
    order = torch.argsort(flat, descending=True, stable=True)
    values = flat[order].double()
    total = float(values.sum())
    if total == 0:
        return []
    n = int((torch.cumsum(values, 0) < threshold * total).sum()) + 1
    n = min(n, int((values > 0).sum()))
    edges = []
    for i in order[:n].tolist():
        t, s = divmod(i, len(sources))
        edges.append(GraphEdge(sources[s].id, targets[t].id, float(weights[t, s])))
    return edges


def _graph_nodes(
    fm, kept, influence: Values, direct: Values, parts: Values, metric_part: float, incoming: torch.Tensor
) -> list[GraphNode]:
    nodes = []
    for ref, inc in zip(kept, incoming.tolist(), strict=True):
        if ref.kind == "metric":
            nodes.append(
                GraphNode("metric", "metric", None, None, ref.position, fm.metric, fm.metric, inc, metric_part)
            )
            continue
        nodes.append(
            GraphNode(
                ref.id,
                ref.kind,
                ref.layer,
                ref.index,
                ref.position,
                influence.at(ref),
                direct.at(ref),
                inc if ref.reads is not None else 0.0,
                parts.at(ref),
            )
        )
    return nodes


def nodes_total(config, T: int) -> int:
    """Every node of the graph: embeddings, heads, neurons and bias nodes at every position, and the metric."""
    L = config.n_layers
    return T * (1 + L * (config.n_heads + config.d_ff + len(bias_names(config)))) + 1


def edges_total(config, T: int) -> int:
    """Every pair (s, t) that a direct path joins, before pruning: a head at query p reads every earlier writer at
    positions 0..p, a neuron at p every earlier writer at p, the metric every writer at the last position."""
    L, H, d_ff = config.n_layers, config.n_heads, config.d_ff
    per_attn, per_mlp = H + 1, d_ff + 1  # writers at one position: the heads and their bias; the neurons and theirs
    if config.norm == "post" and has_betas(config):
        per_attn, per_mlp = per_attn + 1, per_mlp + 1  # each norm's beta
    total, before = 0, 1  # the embeddings write first
    for _ in range(L):
        total += H * (T * (T + 1) // 2) * before
        before += per_attn
        total += d_ff * T * before
        before += per_mlp
    return total + before


# ---- bounds --------------------------------------------------------------------------------------------------


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
