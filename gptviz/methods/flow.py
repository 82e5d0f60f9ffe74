"""Information flow routes (Ferrando & Voita, 2024), computed as the LLM Transparency Tool computes its graph
(facebookresearch/llm-transparency-tool: llm_transparency_tool/routes/contributions.py and routes/graph.py): which
earlier tokens and sub-layers the prediction at one position is built from, as a graph pruned by importance.

In a pre-norm model every residual update is a sum. The attention sub-layer of layer l writes, at query position i,

    resid_mid[i] = resid_pre[i] + sum_{j, h} c[i, j, h] + b,
    c[i, j, h] = pattern[h, i, j] * ((v[j, h] - b_V[h]) @ W_O[h])

with b = b_O + sum_h b_V[h] @ W_O[h] (the value biases folded into the output bias, as TransformerLens loads the
tool's models by default), and the MLP writes resid_post[i] = resid_mid[i] + mlp_out[i]. The parts of a sum are the
skip and, for attention, one part per key AND head (every key position, later ones writing nothing), for the MLP its
output; the folded bias is in the sum but is no part. Each part's proximity to the sum y is ||y||_1 - ||y - part||_1,
floored at 1e-5, and its importance is its proximity over the sum of its sum's proximities (contributions.py,
get_contributions). An attention edge j -> i weighs the sum over heads of its parts; the skip and the query's
attention to its own position are one edge (the tool's graph has one edge between those two nodes and adds them).
Starting from the output at one position, an edge is kept when its importance exceeds the threshold (strictly, as
build_paths_to_predictions does), and the graph grows backwards through the nodes it reaches. Only the rows that a
kept node needs are computed. Keys after the query take part in the normalisation (their proximity is the floor's)
but are never drawn as edges.

This is the tool with "Renormalize after threshold" off (build_full_graph without a renormalizing threshold, then
build_paths_to_predictions at the threshold).

Reads one capture; never re-implements the forward pass (the contributions are checked against the captured
resid_mid in the tests). Pre-norm only, like direct attribution: post-norm's LayerNorm after each addition makes
the stream no sum of its parts."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..model.hooks import act_name, capture

EPS = 1e-5  # the tool's floor on every proximity (contributions.py, get_contributions)
PART_BUDGET = 1 << 22  # floats of [queries, keys, heads, d_model] parts built at once (16 MiB), at least one row


class Edge(NamedTuple):
    layer: int
    kind: str  # "attention" (key j's stream -> query i, through the heads), "residual" (the skip; at the
    # attention sum it includes the query's attention to itself), "mlp"
    sublayer: str  # "attn" or "mlp": which addition of the layer the edge feeds
    source: int  # position the edge comes from
    target: int  # position it feeds
    importance: float  # share of the target's sum, in [0, 1]
    head: int = -1  # attention edges: the head with the largest share along this edge
    head_share: float = 0.0  # that head's part of the edge's share, in (0, 1]


class FlowGraph(NamedTuple):
    edges: list[Edge]
    n_layers: int
    n_tokens: int
    position: int  # the output position the graph explains
    threshold: float


def _proximities(parts: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """[..., parts] unnormalised: ||y||_1 - ||y - c||_1 floored at EPS, the distance as the tool takes it (torch's
    pairwise_distance, which adds its eps of 1e-6 to the difference)."""
    distance = F.pairwise_distance(parts, total.unsqueeze(-2).expand_as(parts), p=1)
    return (total.abs().sum(-1, keepdim=True) - distance).clamp_min(EPS)


def proximity(parts: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """[..., parts] importances of parts [..., parts, d] to their sum total [..., d]: max(|y|_1 - |y - c|_1, 1e-5),
    normalised over the parts (the tool's get_contributions with distance_norm=1)."""
    prox = _proximities(parts, total)
    return prox / prox.sum(-1, keepdim=True)


def value_bias(model, layer: int) -> torch.Tensor | None:
    """[heads, d_head]: the value slice of c_attn's bias (None without qkv biases)."""
    cfg = model.config
    bias = model.blocks[layer].attn.c_attn.bias
    return None if bias is None else bias.detach().float().cpu()[2 * cfg.d_model :].view(cfg.n_heads, cfg.d_head)


def head_writes(model, layer: int, v: torch.Tensor) -> torch.Tensor:
    """[heads, keys, d_model]: what each head would write from each key position at weight 1, from its value without
    the value bias ((v[j, h] - b_V[h]) @ W_O[h]): the bias goes to folded_output_bias, as in the tool."""
    cfg = model.config
    W_O = model.blocks[layer].attn.c_proj.weight.detach().float().cpu().view(cfg.d_model, cfg.n_heads, cfg.d_head)
    v = v.float()
    b_V = value_bias(model, layer)
    if b_V is not None:
        v = v - b_V
    return torch.einsum("khe,ohe->hko", v, W_O)


def folded_output_bias(model, layer: int) -> torch.Tensor:
    """[d_model]: b_O + sum_h b_V[h] @ W_O[h], what attention adds at every position besides its parts (zeros when
    the model has no such biases). In the sum, but no part of it."""
    cfg = model.config
    attn = model.blocks[layer].attn
    out = torch.zeros(cfg.d_model)
    if attn.c_proj.bias is not None:
        out = out + attn.c_proj.bias.detach().float().cpu()
    b_V = value_bias(model, layer)
    if b_V is not None:
        out = out + attn.c_proj.weight.detach().float().cpu() @ b_V.flatten()
    return out


def head_contributions(pattern: torch.Tensor, writes: torch.Tensor, queries, keys: int | None = None) -> torch.Tensor:
    """[len(queries), keys, heads, d_model]: c[i, j, h] = pattern[h, i, j] * writes[h, j], for the first `keys`
    key positions (all by default)."""
    keys = pattern.shape[-1] if keys is None else keys
    return torch.einsum("hqk,hko->qkho", pattern[:, queries, :keys].float(), writes[:, :keys])


def attention_contributions(pattern: torch.Tensor, writes: torch.Tensor, queries) -> torch.Tensor:
    """[len(queries), keys, d_model]: c[i, j] = sum_h pattern[h, i, j] * writes[h, j] for the given query rows."""
    return torch.einsum("hqk,hko->qko", pattern[:, queries].float(), writes)


def attention_shares(
    pattern: torch.Tensor, writes: torch.Tensor, resid_pre: torch.Tensor, resid_mid: torch.Tensor, queries
) -> tuple[torch.Tensor, torch.Tensor]:
    """([len(queries), keys, heads] importance of each key's write through each head, [len(queries)] the skip's):
    the tool's get_attention_contributions for these query rows. pattern [heads, T, T], writes [heads, T, d_model]
    (head_writes), resid_pre/resid_mid [T, d_model]. A key after the query writes nothing; its parts' proximity is
    the floor's, counted once per key and head without building the zeros."""
    queries = list(queries)
    H, T, d = writes.shape
    shares, skips = [], []
    rows_at_once = max(1, PART_BUDGET // (T * H * d))
    for start in range(0, len(queries), rows_at_once):
        rows = queries[start : start + rows_at_once]
        K = max(rows) + 1  # keys any of these rows can see
        whole = resid_mid[rows].float()  # [q, d]
        parts = head_contributions(pattern, writes, rows, K).flatten(1, 2)  # [q, K * H, d]
        parts = torch.cat([parts, resid_pre[rows].float().unsqueeze(1)], 1)  # the skip last (the one-off part)
        prox = _proximities(parts, whole)  # [q, K * H + 1]
        zero = _proximities(torch.zeros_like(whole).unsqueeze(1), whole)  # [q, 1]: a part that writes nothing
        total = prox.sum(-1, keepdim=True) + (T - K) * H * zero
        keyed = torch.cat([prox[:, :-1].view(len(rows), K, H), zero[:, :, None].expand(-1, T - K, H)], 1)
        shares.append(keyed / total[:, :, None])
        skips.append((prox[:, -1:] / total)[:, 0])
    return torch.cat(shares), torch.cat(skips)


def mlp_shares(resid_mid: torch.Tensor, mlp_out: torch.Tensor) -> torch.Tensor:
    """[rows, (mlp, skip)]: the tool's get_mlp_contributions, the sum being resid_mid + mlp_out (= resid_post)."""
    return proximity(torch.stack([mlp_out, resid_mid], dim=-2), resid_mid + mlp_out)


def hook_names(n_layers: int) -> tuple[str, ...]:
    """The hook points the graph reads (a capture of these, for one prompt, is all it needs)."""
    return tuple(
        f"blocks.{layer}.{n}"
        for layer in range(n_layers)
        for n in ("hook_resid_pre", "hook_resid_mid", "hook_mlp_out", "attn.hook_pattern", "attn.hook_v")
    )


def information_flow(model, ids, threshold: float = 0.04, position: int = -1) -> FlowGraph:
    """The graph of the parts whose importance exceeds `threshold`, grown backwards from `position`'s output."""
    _check(model, threshold)
    _, cache = capture(model, ids, list(hook_names(model.config.n_layers)))
    return flow_from_capture(model, cache.prompt(0), threshold, position)


def _check(model, threshold: float) -> None:
    if model.config.norm != "pre":
        raise ValueError(
            "the information-flow graph needs a pre-norm model: in post-norm each block's LayerNorm "
            "rescales the residual stream after the addition, so it is not a sum of its parts"
        )
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")


def flow_from_capture(model, cache, threshold: float = 0.04, position: int = -1) -> FlowGraph:
    """information_flow from one prompt of a capture of `hook_names`: its [T, ...] tensors (ActivationCache.prompt(i)
    of a batched capture; the app reads its cached capture so)."""
    _check(model, threshold)
    L = model.config.n_layers
    T = cache["blocks.0.hook_resid_pre"].shape[0]
    position %= T
    edges: list[Edge] = []
    needed = {position}  # positions whose stream after layer l (resid_post) the graph reaches
    for layer in reversed(range(L)):
        rows = sorted(needed)
        pre = cache[act_name("resid_pre", layer)].float()
        mid = cache[act_name("resid_mid", layer)].float()
        shares = mlp_shares(mid[rows], cache[act_name("mlp_out", layer)].float()[rows])  # [rows, (mlp, skip)]
        reached_mid = set()
        for r, i in enumerate(rows):
            for kind, share in (("residual", float(shares[r, 1])), ("mlp", float(shares[r, 0]))):
                if share > threshold:
                    edges.append(Edge(layer, kind, "mlp", i, i, share))
                    reached_mid.add(i)
        reached_pre = set()
        queries = sorted(reached_mid)
        if queries:
            pattern = cache[act_name("pattern", layer)].float()
            writes = head_writes(model, layer, cache[act_name("v", layer)])
            per_head, skips = attention_shares(pattern, writes, pre, mid, queries)  # [q, keys, heads], [q]
            for r, i in enumerate(queries):
                per_key = per_head[r].sum(-1)  # [keys]
                own = float(skips[r] + per_key[i])  # the skip and self-attention: one edge, as in the tool
                if own > threshold:
                    edges.append(Edge(layer, "residual", "attn", i, i, own))
                    reached_pre.add(i)
                for j in torch.nonzero(per_key[:i] > threshold).flatten().tolist():
                    head = int(per_head[r, j].argmax())
                    edges.append(
                        Edge(
                            layer,
                            "attention",
                            "attn",
                            j,
                            i,
                            float(per_key[j]),
                            head,
                            float(per_head[r, j, head] / per_key[j]),
                        )
                    )
                    reached_pre.add(j)
        needed = reached_pre
    return FlowGraph(edges, L, T, position, threshold)
