"""Information flow routes (Ferrando & Voita, 2024; the graph of the LLM Transparency Tool): which earlier tokens and
sub-layers the prediction at one position is built from, as a graph pruned by importance.

In a pre-norm model every residual update is a sum. The attention sub-layer of layer l writes, at query position i,

    resid_mid[i] = resid_pre[i] + sum_j c[i, j] + b_O,   c[i, j] = sum_h pattern[h, i, j] * (v[j, h] @ W_O[h])

and the MLP writes resid_post[i] = resid_mid[i] + mlp_out[i]. Each part's importance to the sum y is its proximity
max(||y||_1 - ||y - part||_1, 0), normalised over the parts of that sum (so they add up to 1). Starting from the
last position's output, an edge is kept when its importance reaches the threshold, and the graph grows backwards
through the nodes it reaches. Only the rows that a kept node needs are computed.

Reads one capture; never re-implements the forward pass (the contributions are checked against the captured
resid_mid in the tests). Pre-norm only, like direct attribution: post-norm's LayerNorm after each addition makes
the stream no sum of its parts."""
from __future__ import annotations

from typing import NamedTuple

import torch

from .hooks import capture

QUERY_CHUNK = 16  # query rows of [keys, d_model] contributions built at once: bounds memory at T x d x 16 floats


class Edge(NamedTuple):
    layer: int
    kind: str          # "attention" (key j's stream -> query i, through the heads), "residual" (the skip), "mlp"
    sublayer: str      # "attn" or "mlp": which addition of the layer the edge feeds
    source: int        # position the edge comes from
    target: int        # position it feeds
    importance: float  # share of the target's sum, in [0, 1]
    head: int = -1     # attention edges: the head whose write along this edge is largest (L1)
    head_share: float = 0.0  # that head's part of the heads' writes along the edge (L1 norms), in (0, 1]


class FlowGraph(NamedTuple):
    edges: list[Edge]
    n_layers: int
    n_tokens: int
    position: int      # the output position the graph explains
    threshold: float


def proximity(parts: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """[..., parts] importances of parts [..., parts, d] to their sum total [..., d]: max(|y|_1 - |y - c|_1, 0),
    normalised over the parts (all zero stays zero)."""
    prox = (total.abs().sum(-1, keepdim=True) - (total.unsqueeze(-2) - parts).abs().sum(-1)).clamp_min(0)
    return prox / prox.sum(-1, keepdim=True).clamp_min(torch.finfo(prox.dtype).tiny)


def head_writes(model, layer: int, v: torch.Tensor) -> torch.Tensor:
    """[heads, keys, d_model]: what each head would write from each key position at weight 1 (v[j, h] @ W_O[h])."""
    cfg = model.config
    W_O = model.blocks[layer].attn.c_proj.weight.detach().float().cpu().view(cfg.d_model, cfg.n_heads, cfg.d_head)
    return torch.einsum("khe,ohe->hko", v.float(), W_O)


def attention_contributions(pattern: torch.Tensor, writes: torch.Tensor, queries) -> torch.Tensor:
    """[len(queries), keys, d_model]: c[i, j] = sum_h pattern[h, i, j] * writes[h, j] for the given query rows."""
    return torch.einsum("hqk,hko->qko", pattern[:, queries].float(), writes)


def hook_names(n_layers: int) -> tuple[str, ...]:
    """The hook points the graph reads (a capture of these, for one prompt, is all it needs)."""
    return tuple(f"blocks.{l}.{n}" for l in range(n_layers) for n in (
        "hook_resid_pre", "hook_resid_mid", "hook_mlp_out", "attn.hook_pattern", "attn.hook_v"))


def _attention_importance(model, cache, layer: int, queries: list[int], pattern: torch.Tensor,
                          writes: torch.Tensor) -> dict[int, tuple[torch.Tensor, float]]:
    """{query i: ([keys] importance of each key's contribution, importance of the skip)} for one layer."""
    pre, mid = cache[f"blocks.{layer}.hook_resid_pre"].float(), cache[f"blocks.{layer}.hook_resid_mid"].float()
    bias = model.blocks[layer].attn.c_proj.bias
    out = {}
    for start in range(0, len(queries), QUERY_CHUNK):
        rows = queries[start:start + QUERY_CHUNK]
        contrib = attention_contributions(pattern, writes, rows)                       # [q, keys, d]
        extra = [pre[rows].unsqueeze(1)]                                               # the skip, then the bias
        if bias is not None:
            extra.append(bias.detach().float().cpu().expand(len(rows), 1, -1))
        shares = proximity(torch.cat([contrib] + extra, dim=1), mid[rows])
        for r, i in enumerate(rows):
            out[i] = (shares[r, :i + 1], float(shares[r, contrib.shape[1]]))          # keys after i have weight 0
    return out


def information_flow(model, ids, threshold: float = 0.04, position: int = -1) -> FlowGraph:
    """The graph of the parts whose importance reaches `threshold`, grown backwards from `position`'s output."""
    _check(model, threshold)
    _, cache = capture(model, ids, list(hook_names(model.config.n_layers)))
    return flow_from_capture(model, {name: t[0] for name, t in cache.items()}, threshold, position)


def _check(model, threshold: float) -> None:
    if model.config.norm != "pre":
        raise ValueError("the information-flow graph needs a pre-norm model: in post-norm each block's LayerNorm "
                         "rescales the residual stream after the addition, so it is not a sum of its parts")
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")


def flow_from_capture(model, cache, threshold: float = 0.04, position: int = -1) -> FlowGraph:
    """information_flow from a capture of `hook_names` for one prompt, its tensors without the batch axis (the
    app's bounded capture cache holds them so)."""
    _check(model, threshold)
    L = model.config.n_layers
    T = cache["blocks.0.hook_resid_pre"].shape[0]
    position %= T
    edges: list[Edge] = []
    needed = {position}  # positions whose stream after layer l (resid_post) the graph reaches
    for layer in reversed(range(L)):
        rows = sorted(needed)
        mid = cache[f"blocks.{layer}.hook_resid_mid"].float()[rows]
        mlp = cache[f"blocks.{layer}.hook_mlp_out"].float()[rows]
        shares = proximity(torch.stack([mid, mlp], dim=1), mid + mlp)                 # [rows, (skip, mlp)]
        reached_mid = set()
        for r, i in enumerate(rows):
            for kind, share in (("residual", float(shares[r, 0])), ("mlp", float(shares[r, 1]))):
                if share >= threshold:
                    edges.append(Edge(layer, kind, "mlp", i, i, share))
                    reached_mid.add(i)
        reached_pre = set()
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"].float()
        writes = head_writes(model, layer, cache[f"blocks.{layer}.attn.hook_v"])
        for i, (keys, skip) in _attention_importance(model, cache, layer, sorted(reached_mid), pattern, writes).items():
            if skip >= threshold:
                edges.append(Edge(layer, "residual", "attn", i, i, skip))
                reached_pre.add(i)
            for j in torch.nonzero(keys >= threshold).flatten().tolist():
                per_head = (pattern[:, i, j, None] * writes[:, j]).abs().sum(-1)           # [heads] L1 of each write
                head = int(per_head.argmax())
                edges.append(Edge(layer, "attention", "attn", j, i, float(keys[j]), head,
                                  float(per_head[head] / per_head.sum())))
                reached_pre.add(j)
        needed = reached_pre
    return FlowGraph(edges, L, T, position, threshold)
