"""One attention head's arithmetic with the real numbers, from a capture: the step-by-step computation for one
query (Transformer Explainer's idiom), the query/key "neuron view" (BertViz's), value-weighted attention
(Kobayashi et al., 2020) and attention sinks.

Everything here starts from what a capture recorded (the attention's input) and the model's own weights, and
redoes the head's few matrix products for one query, so each step can be shown; the tests check every step
against the values the forward pass itself captured (q, k, v, pattern, z, attention output). Tensors are one
prompt's, [T, ...]: ActivationCache.prompt(i) of a batched capture (the pages read their capture so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..model.hooks import act_name


def attention_input_name(layer: int, norm: str) -> str:
    """The hook holding what layer `layer`'s attention reads: ln_1's output (pre-norm), or the residual stream
    itself (post-norm, where the LayerNorm comes after the addition)."""
    return act_name("ln1", layer) if norm == "pre" else act_name("resid_pre", layer)


def head_hook_names(layer: int, norm: str) -> tuple[str, ...]:
    """The hooks head_steps and the value-weighted views read for one layer."""
    a = f"blocks.{layer}.attn"
    return (
        attention_input_name(layer, norm),
        f"{a}.hook_q",
        f"{a}.hook_k",
        f"{a}.hook_v",
        f"{a}.hook_pattern",
        f"{a}.hook_z",
        act_name("attn_out", layer),
    )


def _weights(model, layer: int, head: int) -> dict[str, torch.Tensor | None]:
    """Head `head`'s slices of layer `layer`'s projections, float32 on the CPU, laid out for x @ W:
    W_Q, W_K, W_V [d_model, d_head], W_O [d_head, d_model]; biases [d_head] (None without qkv_bias)."""
    cfg = model.config
    C, dh = cfg.d_model, cfg.d_head
    attn = model.blocks[layer].attn
    w = attn.c_attn.weight.detach().float().cpu()  # [3C, C] (out, in)
    b = attn.c_attn.bias.detach().float().cpu() if attn.c_attn.bias is not None else None
    rows = [slice(part * C + head * dh, part * C + (head + 1) * dh) for part in range(3)]
    out = {f"w_{n}": w[r].t() for n, r in zip("qkv", rows, strict=True)}
    out.update({f"b_{n}": (b[r] if b is not None else None) for n, r in zip("qkv", rows, strict=True)})
    out["w_o"] = attn.c_proj.weight.detach().float().cpu()[:, head * dh : (head + 1) * dh].t()  # [dh, C]
    return out


@dataclass(frozen=True)
class HeadSteps:
    """One head's computation for one query, every intermediate value (float32)."""

    layer: int
    head: int
    query: int
    norm: str  # the model's wiring: what `x` is depends on it
    x: torch.Tensor  # [T, d_model] the attention's input
    w_q: torch.Tensor  # [d_model, d_head]
    w_k: torch.Tensor
    w_v: torch.Tensor
    q: torch.Tensor  # [d_head] the query's query vector
    k: torch.Tensor  # [query + 1, d_head] keys it may see
    v: torch.Tensor  # [query + 1, d_head] their values
    dots: torch.Tensor  # [query + 1] q . k_j
    scale: float  # 1 / sqrt(d_head)
    scores: torch.Tensor  # [query + 1] dots * scale
    masked: torch.Tensor  # [T] scores, -inf past the query (the causal mask)
    weights: torch.Tensor  # [query + 1] softmax of the scores
    z: torch.Tensor  # [d_head] sum_j weights_j v_j
    w_o: torch.Tensor  # [d_head, d_model] the head's rows of the output projection
    out: torch.Tensor  # [d_model] z @ W_O: what this head adds to the residual stream (before the
    #                           layer's output bias, added once for all heads)
    out_bias: torch.Tensor  # [d_model]

    @property
    def T(self) -> int:
        return self.x.shape[0]


def head_steps(model, cache, layer: int, head: int, query: int) -> HeadSteps:
    """Recompute head `head` of layer `layer` for position `query` from the captured attention input."""
    cfg = model.config
    if not 0 <= layer < cfg.n_layers or not 0 <= head < cfg.n_heads:
        raise ValueError(f"no head {layer}.{head}: the model has {cfg.n_layers} layers of {cfg.n_heads} heads")
    x = cache[attention_input_name(layer, cfg.norm)].float()
    if not 0 <= query < x.shape[0]:
        raise ValueError(f"query {query} is outside the prompt's {x.shape[0]} tokens")
    w = _weights(model, layer, head)

    def project(rows, name):
        y = rows @ w[f"w_{name}"]
        return y + w[f"b_{name}"] if w[f"b_{name}"] is not None else y

    seen = x[: query + 1]
    q, k, v = project(x[query], "q"), project(seen, "k"), project(seen, "v")
    dots = k @ q
    scale = 1.0 / math.sqrt(cfg.d_head)
    scores = dots * scale
    masked = torch.full((x.shape[0],), float("-inf"))
    masked[: query + 1] = scores
    weights = torch.softmax(scores, dim=-1)
    z = weights @ v
    bias = model.blocks[layer].attn.c_proj.bias
    out_bias = bias.detach().float().cpu() if bias is not None else torch.zeros(cfg.d_model)
    return HeadSteps(
        layer,
        head,
        query,
        cfg.norm,
        x,
        w["w_q"],
        w["w_k"],
        w["w_v"],
        q,
        k,
        v,
        dots,
        scale,
        scores,
        masked,
        weights,
        z,
        w["w_o"],
        z @ w["w_o"],
        out_bias,
    )


def values_from_input(model, layer: int, x: torch.Tensor) -> torch.Tensor:
    """[T, heads, d_head]: layer `layer`'s values recomputed from its attention input `x` [T, d_model] (what
    hook_v records), so a page that keeps only the input can draw value-weighted attention without a rerun."""
    cfg = model.config
    attn = model.blocks[layer].attn
    w = attn.c_attn.weight.detach().float().cpu()[2 * cfg.d_model :]  # the V rows of the Q/K/V projection
    b = attn.c_attn.bias.detach().float().cpu()[2 * cfg.d_model :] if attn.c_attn.bias is not None else None
    v = x.float() @ w.t()
    return (v + b if b is not None else v).view(x.shape[0], cfg.n_heads, cfg.d_head)


def value_output_norms(model, layer: int, v: torch.Tensor) -> torch.Tensor:
    """[heads, T]: ||v_j W_O^h||, the size of what token j's value adds to the stream through head h per unit of
    attention. `v`: the layer's captured hook_v [T, heads, d_head]."""
    cfg = model.config
    w_o = model.blocks[layer].attn.c_proj.weight.detach().float().cpu()  # [C, C]: (out, in)
    per_head = w_o.view(cfg.d_model, cfg.n_heads, cfg.d_head)  # [out, head, d_head]
    vo = torch.einsum("thd,ohd->hto", v.float(), per_head)  # [heads, T, d_model]
    return vo.norm(dim=-1)


def value_weighted(model, layer: int, v: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """[heads, query, key]: ||alpha_ij v_j W_O^h|| (Kobayashi et al., 2020): the attention weight times the
    size of what the key's value writes. A heavy weight on a key whose value is tiny comes out small."""
    return pattern.float() * value_output_norms(model, layer, v)[:, None, :]


def row_shares(values: torch.Tensor) -> torch.Tensor:
    """Each query row as a share of its sum (rows of zeros stay zero), comparable with attention weights."""
    total = values.sum(-1, keepdim=True)
    return torch.where(total > 0, values / total.clamp_min(1e-30), torch.zeros_like(values))


def first_token_scores(patterns: torch.Tensor) -> torch.Tensor:
    """[layers, heads]: mean weight on the first token over queries 1..T-1 (query 0 can only look at itself).
    A head far above chance is an attention sink: it parks its weight on token 0."""
    if patterns.shape[-1] < 2:
        raise ValueError("an attention sink needs a prompt of at least two tokens")
    return patterns[..., 1:, 0].mean(-1)


def first_token_chance(T: int) -> float:
    """Uniform attention's first-token score: the mean of 1 / (q + 1) over queries 1..T-1."""
    if T < 2:
        raise ValueError("an attention sink needs a prompt of at least two tokens")
    return sum(1.0 / (q + 1) for q in range(1, T)) / (T - 1)
