"""Norms of the residual stream and of what each sub-layer adds, and the statistics of every norm's input
(Activations and Norms pages). Each reads one prompt's capture: an ActivationCache of [T, ...] tensors
(ActivationCache.prompt(i) of a batched capture, as the pages pass it)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..model.hooks import act_name


def residual_norms(cache) -> torch.Tensor:
    """[layers + 1, T]: L2 norm of the residual stream entering each block, then leaving the last one."""
    return torch.linalg.vector_norm(cache.resid_stream(), dim=-1)


def branch_norms(cache, suffix: str) -> torch.Tensor:
    """[layers, T]: L2 norm of what one sub-layer adds, e.g. suffix "hook_attn_out" or "hook_mlp_out"."""
    return torch.linalg.vector_norm(cache.stack(suffix), dim=-1)


def norm_inputs(cache, config) -> dict[str, torch.Tensor]:
    """{norm name: [T, d_model] input}, in forward order (blocks.i.ln_1, blocks.i.ln_2, ..., ln_f).

    Pre-norm normalises the stream before each sub-layer: ln_1 sees resid_pre, ln_2 sees resid_mid.
    Post-norm normalises after each residual addition: ln_1 sees resid_pre + attn_out, ln_2 sees
    resid_mid + mlp_out. Both wirings end with ln_f on the last block's output."""
    out = {}
    for i in range(config.n_layers):
        b = f"blocks.{i}"
        if config.norm == "pre":
            out[f"{b}.ln_1"] = cache[f"{b}.hook_resid_pre"]
            out[f"{b}.ln_2"] = cache[f"{b}.hook_resid_mid"]
        else:
            out[f"{b}.ln_1"] = cache[f"{b}.hook_resid_pre"] + cache[f"{b}.hook_attn_out"]
            out[f"{b}.ln_2"] = cache[f"{b}.hook_resid_mid"] + cache[f"{b}.hook_mlp_out"]
    if config.final_norm:  # a model trained without one (GPT-1) has no ln_f to show
        out["ln_f"] = cache[act_name("resid_post", config.n_layers - 1)]
    return out


class NormStats(NamedTuple):
    names: list[str]  # norm modules in forward order
    mean: torch.Tensor  # [norms, T] mean over d_model of each position's input
    var: torch.Tensor  # [norms, T] variance over d_model (biased, as LayerNorm divides by it)
    mean_square: torch.Tensor  # [norms, T] mean of squares (what RMSNorm divides by)


def norm_input_stats(cache, config) -> NormStats:
    """Mean, variance and mean square over d_model of every norm's input, per position."""
    inputs = norm_inputs(cache, config)
    x = torch.stack(list(inputs.values())).double()  # [norms, T, d]
    return NormStats(list(inputs), x.mean(-1).float(), x.var(-1, unbiased=False).float(), x.pow(2).mean(-1).float())
