"""What a unit writes, read by the unembedding: the tokens a neuron or a head's OV circuit promotes and suppresses."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DirectEffect:
    effect: torch.Tensor  # [vocab]: the logit change per unit of the neuron's activation
    promoted: list[tuple[int, float]]  # (token id, effect), highest first
    suppressed: list[tuple[int, float]]  # (token id, effect), lowest first


def _norms_after(model, layer: int, sublayer: str) -> list:
    """The norms a sub-layer's output crosses on its direct path to the unembedding: ln_f for pre-norm; for
    post-norm also its own block's norm(s) after it and every later block's."""
    if model.config.norm == "pre":
        return [model.ln_f]
    norms = [model.blocks[layer].ln_1, model.blocks[layer].ln_2] if sublayer == "attn" else [model.blocks[layer].ln_2]
    for block in model.blocks[layer + 1 :]:
        norms += [block.ln_1, block.ln_2]
    return norms + [model.ln_f]


def _through_norms(v: torch.Tensor, norms) -> torch.Tensor:
    """A residual direction through norms as far as they are linear: centred (LayerNorm) and scaled by each gain;
    the division by the input's spread (one positive number per position) and the biases are left out."""
    for norm in norms:
        if isinstance(norm, torch.nn.LayerNorm):
            v = v - v.mean(-1, keepdim=True)
        if norm.weight is not None:
            v = v * norm.weight.detach()
    return v


def _effect(model, direction: torch.Tensor, norms, k: int) -> DirectEffect:
    with torch.no_grad():
        if norms:
            direction = _through_norms(direction, norms)
        effect = direction @ model.lm_head.weight.detach().t()  # W_U: (C, vocab)
    k = min(k, effect.numel())
    up, down = effect.topk(k), (-effect).topk(k)
    return DirectEffect(
        effect, [(int(i), float(effect[i])) for i in up.indices], [(int(i), float(effect[i])) for i in down.indices]
    )


def direct_effect(model, layer: int, neuron: int, k: int = 10, fold_ln: bool = True) -> DirectEffect:
    """The tokens a neuron promotes and suppresses directly: its output weights (c_proj's column for it, W_out[n])
    times the unembedding W_U. With `fold_ln` (default), through the final norm first (and, post-norm, the norms
    after it), as far as they are linear: centred and scaled by the gain; the division by the residual's spread, a
    positive factor per position, changes no ranking and is left out."""
    w_out = model.blocks[layer].mlp.c_proj.weight.detach()[:, neuron].to(torch.float32)  # (C,)
    return _effect(model, w_out, _norms_after(model, layer, "mlp") if fold_ln else [], k)


def head_direct_effect(
    model, layer: int, head: int, source_token: int, k: int = 10, fold_ln: bool = True
) -> DirectEffect:
    """The head's OV circuit for one source token: what attending to `source_token` writes, read by the
    unembedding. The token's embedding through the head's input norm (ln_1, pre-norm), its value projection
    (with bias) and its W_O^h, then as in direct_effect. Positional embeddings and earlier layers are left out."""
    c = model.config
    hs = c.d_head
    with torch.no_grad():
        x = model.wte.weight.detach()[source_token].to(torch.float32)
        if c.norm == "pre":
            x = model.blocks[layer].ln_1(x)
        attn = model.blocks[layer].attn
        w_v = attn.c_attn.weight.detach()[2 * c.d_model + head * hs : 2 * c.d_model + (head + 1) * hs]  # (hs, C)
        v = x @ w_v.t()
        if attn.c_attn.bias is not None:
            v = v + attn.c_attn.bias.detach()[2 * c.d_model + head * hs : 2 * c.d_model + (head + 1) * hs]
        out = v @ attn.c_proj.weight.detach()[:, head * hs : (head + 1) * hs].t()  # (C,)
    return _effect(model, out, _norms_after(model, layer, "attn") if fold_ln else [], k)
