"""nanoGPT's `ckpt.pt`, as its train.py saves it: {"model": state dict, "model_args": {n_layer, n_head, n_embd,
block_size, bias, vocab_size, dropout}, "optimizer": ..., ...}.

Its GPT is GPT-2's (pre-norm, tied LM head, the same module names under `transformer.`, nn.Linear layout) with the
exact GELU (nn.GELU()), LayerNorm eps 1e-5, and `bias=False` removing every bias (linears and LayerNorms). A model
compiled with torch.compile saves its names with the `_orig_mod.` prefix. Trained from scratch on GPT-2 tokens, its
vocabulary is padded from 50,257 to 50,304 (a multiple of 64): the padding rows are dropped here, which is the same as
masking their logits out of the probabilities; no token maps to them.
"""

from __future__ import annotations

import torch

from ..config import GPTConfig
from .base import CheckpointError, strip_prefix, tensors_only
from .build import int_field, make_config

GPT2_PADDED, GPT2_VOCAB = 50304, 50257


def is_nanogpt(obj) -> bool:
    return isinstance(obj, dict) and "model" in obj and "model_args" in obj


def _state(obj, what: str) -> dict[str, torch.Tensor]:
    """Our names for its tensors (shapes as stored: the padded vocabulary is still there); causal-mask buffers out."""
    state = strip_prefix(tensors_only(obj["model"], f'{what}\'s "model"'))
    ours = {}
    for key, value in state.items():
        key = key.removeprefix("transformer.")
        if key.startswith("h.") and key.endswith(".attn.bias"):  # the mask nanoGPT keeps without flash attention
            continue
        ours["blocks." + key[2:] if key.startswith("h.") else key] = value
    return ours


def _tied(state: dict[str, torch.Tensor]) -> bool:
    """nanoGPT ties the LM head to wte; torch.save stores the shared tensor once, so both names load as one storage.
    Read from the pointers alone: no weight is read before the limits are checked."""
    head, wte = state.get("lm_head.weight"), state.get("wte.weight")
    if head is None:
        return True
    if wte is None or head.shape != wte.shape or head.storage_offset() != wte.storage_offset():
        return False
    if head.is_meta:  # read from an upload's bytes: no data pointers, but one storage object when tied
        return head.untyped_storage()._cdata == wte.untyped_storage()._cdata
    return head.data_ptr() == wte.data_ptr()


def config_of(obj, what: str) -> GPTConfig:
    args = obj["model_args"]
    if not isinstance(args, dict):
        raise CheckpointError(f"{what}: model_args is a {type(args).__name__}, not nanoGPT's dict of sizes")
    sizes = {key: int_field(args, key, what) for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}
    bias = args.get("bias", True)
    if not isinstance(bias, bool):
        raise CheckpointError(f"{what}: model_args' bias must be True or False, got {bias!r}")
    vocab = GPT2_VOCAB if sizes["vocab_size"] == GPT2_PADDED else sizes["vocab_size"]
    return make_config(
        what,
        vocab_size=vocab,
        n_ctx=sizes["block_size"],
        d_model=sizes["n_embd"],
        n_layers=sizes["n_layer"],
        n_heads=sizes["n_head"],
        activation="gelu",
        tie_weights=_tied(_state(obj, what)),
        qkv_bias=bias,
        bias=bias,
        ln_eps=1e-5,
        name=f"{what} (nanoGPT)",
    )


def state_of(obj, config: GPTConfig, what: str) -> dict[str, torch.Tensor]:
    """The weights in our names, the padded vocabulary's rows dropped (checked against the stored size first)."""
    state = _state(obj, what)
    padded = obj["model_args"]["vocab_size"]
    for key in ("wte.weight", "lm_head.weight"):
        value = state.get(key)
        if value is not None and value.dim() == 2 and value.shape[0] == padded:
            state[key] = value[: config.vocab_size]
    if config.tie_weights:
        state.pop("lm_head.weight", None)
    return state
