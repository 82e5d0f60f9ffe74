"""The Why page's attribution graph and QK decomposition (issue 58), and the live text's top contributors. Each
reserves its working memory first (gptviz.serve.memory), is kept in the results cache and returns plain data; the
graph also runs under the session's work clock and refuses, in words, a prompt whose estimate passes the server's
memory. Every number comes from gptviz.methods.graph*."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import NamedTuple

import torch

from ...methods.graph import AttributionGraph, attribution_graph
from ...methods.graph_ablation import ablation_actuals
from ...methods.graph_contributors import Contributors, node_edits, parse_node, top_contributors
from ...methods.graph_qk import QKDecomposition, check_cell, qk_decomposition
from ...model import sizes
from ...model.generate import generate
from ...model.sizes import contributors_nbytes, edge_rows, graph_nbytes
from ...serve import limits, memory
from ...serve.work_clock import WorkClock
from .. import model_service
from . import cached

ABLATIONS = 10  # the graph's own ablation check: its top nodes (the library's default)


def graph_work(config, T: int, max_nodes: int) -> int:
    """The graph's work in token-block passes (gptviz.methods.attribution's unit), for its time estimate: the
    frozen pass and its backward (about three forwards), the ablation check (a capture, then each removal from its
    own block on: half a pass each on average), and one backward walk of the stream per group of kept targets."""
    walks = math.ceil(max_nodes / edge_rows(config, T))
    return config.n_layers * T * (4 + ABLATIONS // 2 + 2 * walks)


@cached
def graph(
    spec: model_service.ModelSpec,
    ids: tuple[int, ...],
    target: int,
    other: int,
    node_threshold: float,
    edge_threshold: float,
    max_nodes: int,
    _clock: WorkClock | None = None,
) -> AttributionGraph:
    """The attribution graph of logit(target) - logit(other) after `ids`. A prompt whose estimate passes the server's
    memory is refused in words (ValueError) before anything runs; `_clock` stops it past the time limit."""
    model = model_service.load_model(spec)
    cfg = model.config
    budget = limits.server_limits().memory_mb * limits.MiB
    need = graph_nbytes(cfg, len(ids), max_nodes, ABLATIONS, model.wte.weight.element_size())
    settings = dict(
        node_threshold=node_threshold,
        edge_threshold=edge_threshold,
        max_nodes=max_nodes,
        ablations=ABLATIONS,
        memory_budget=budget,
        clock=_clock,
    )
    if need > budget:  # the library refuses it in words before anything runs: no reservation to wait for
        return attribution_graph(model, list(ids), target, other, **settings)
    with memory.reserve(need, f"the attribution graph of {len(ids)} tokens on {spec.name}"):
        return attribution_graph(model, list(ids), target, other, **settings)


class NodeCheck(NamedTuple):
    baseline: float  # the real model's metric, unedited
    actual: float  # the metric with the node removed, minus the baseline


@cached
def node_check(spec: model_service.ModelSpec, ids: tuple[int, ...], node_id: str, target: int, other: int) -> NodeCheck:
    """The real model's metric with one node removed (patterns and norms recomputed) beside the unedited one."""
    model = model_service.load_model(spec)
    ref = parse_node(node_id, model.config, len(ids))
    with memory.reserve(
        sizes.node_removal_nbytes(model.config, len(ids)),
        f"removing {node_id} from {len(ids)} tokens on {spec.name}",
    ):
        base, actual = ablation_actuals(model, list(ids), [ref], target, other)
    return NodeCheck(base, actual[0])


@cached
def continuation_without(spec: model_service.ModelSpec, ids: tuple[int, ...], node_id: str | None, n: int) -> list[int]:
    """`n` greedy new tokens after `ids`, with the node removed at its position (None: unedited). The text stays
    within the context window, so the node's position never slides."""
    model = model_service.load_model(spec)
    n = max(0, min(n, model.config.n_ctx - len(ids)))
    edits = [] if node_id is None else node_edits(model, parse_node(node_id, model.config, len(ids)))
    with memory.reserve(
        sizes.sampling_nbytes(model.config, len(ids), n), f"a continuation of {n} tokens on {spec.name}"
    ):
        return generate(model, list(ids), n, temperature=0.0, edits=edits)[len(ids) :]


@cached
def qk(
    spec: model_service.ModelSpec, ids: tuple[int, ...], layer: int, head: int, query: int, key: int
) -> QKDecomposition:
    """The score of (layer, head, query, key) split into query-source x key-source terms; a cell the model or the
    prompt lacks, or above the diagonal, refused in words (ValueError)."""
    model = model_service.load_model(spec)
    check_cell(model.config, len(ids), layer, head, query, key)
    with memory.reserve(
        contributors_nbytes(model.config, len(ids)), f"the QK decomposition on {len(ids)} tokens of {spec.name}"
    ):
        return qk_decomposition(model, list(ids), layer, head, query, key)


@cached
def contributors(spec: model_service.ModelSpec, ids: tuple[int, ...], target: int, n: int = 3) -> Contributors:
    """The `n` nodes of largest influence on logit(target) after `ids`, each with its share of that logit: the
    graph's node influences only (no edges, no ablation). On one torch thread: beside a live generation's own
    thread, a second made both wait on each other."""
    model = model_service.load_model(spec)
    with (
        memory.reserve(
            contributors_nbytes(model.config, len(ids)), f"the top contributors on {len(ids)} tokens of {spec.name}"
        ),
        one_thread(),
    ):
        return top_contributors(model, list(ids), target, None, n)


@contextmanager
def one_thread():
    """Run the block on one torch thread, then give the calling thread its own count back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def step_ids(prompt: tuple[int, ...], steps, i: int) -> tuple[tuple[int, ...], int]:
    """What the model read to write step i (its window of the prompt and the steps before), and the token written."""
    text = tuple(prompt) + tuple(s.token_id for s in steps[:i])
    step = steps[i]
    return text[step.window_start : step.position], int(step.token_id)


def pattern_row(spec: model_service.ModelSpec, ids: tuple[int, ...], layer: int, head: int, query: int) -> torch.Tensor:
    """Where (layer, head) looks from `query`: its attention weights over the keys (through the Why page's cached
    pattern of that layer)."""
    from .why import edited_pattern

    return edited_pattern(spec, ids, (), "zero", layer)[head, query]
