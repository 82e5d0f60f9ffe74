"""The GPTModel of Sebastian Raschka's "Build a Large Language Model (From Scratch)": `model.pth`
(torch.save(model.state_dict())) and `model_and_optimizer.pth` ({"model_state_dict", "optimizer_state_dict"}).

Its architecture is GPT-2's, pre-norm: tok_emb, pos_emb, trf_blocks.N (norm1, att with separate W_query, W_key,
W_value and out_proj, norm2, ff.layers.0 / .2), final_norm and an untied out_head; its LayerNorm (scale, shift,
eps 1e-5, biased variance) is nn.LayerNorm's function and its GELU the tanh approximation. `qkv_bias` shows in the
file (the W_query bias is there or not); the `att.mask` buffers are the causal mask, not weights. The head count
cannot be read from the file (the heads are slices of W_query's rows), so it is an argument.
"""

from __future__ import annotations

import re

import torch

from ..config import GPTConfig
from .base import CheckpointError, check_shapes, strip_prefix, tensors_only
from .build import make_config

_BLOCK = re.compile(r"trf_blocks\.(\d+)\.")
_RENAME = {
    "att.out_proj": "attn.c_proj",
    "ff.layers.0": "mlp.c_fc",
    "ff.layers.2": "mlp.c_proj",
    "norm1": "ln_1",
    "norm2": "ln_2",
}
_PARAM = {"scale": "weight", "shift": "bias", "weight": "weight", "bias": "bias"}


def model_state(obj):
    """The state dict inside a `model_and_optimizer.pth` dict, or the object itself."""
    return obj["model_state_dict"] if isinstance(obj, dict) and "model_state_dict" in obj else obj


def is_raschka(state) -> bool:
    return (
        isinstance(state, dict)
        and "tok_emb.weight" in state
        and any(isinstance(k, str) and k.startswith("trf_blocks.") for k in state)
    )


def _weights(state: dict, what: str) -> dict[str, torch.Tensor]:
    state = strip_prefix(tensors_only(state, what))
    return {k: v for k, v in state.items() if not k.endswith(".att.mask")}


def _layers(state: dict, what: str) -> int:
    found = {int(m.group(1)) for k in state if (m := _BLOCK.match(k))}
    if not found or found != set(range(len(found))):
        raise CheckpointError(f"{what}: the blocks trf_blocks.N are not numbered 0, 1, 2, ...")
    return len(found)


def _matrix(state: dict, key: str, what: str) -> tuple[int, int]:
    if key not in state or state[key].dim() != 2:
        raise CheckpointError(f"{what}: {key} is missing or not a matrix")
    return tuple(state[key].shape)


def config_of(state: dict, what: str, n_head: int | None) -> GPTConfig:
    if n_head is None:
        raise CheckpointError(
            f"{what} holds a GPTModel from Raschka's book, whose files do not record the number of "
            f"attention heads: pass it as n_head, e.g. load_pretrained(path, n_head=12) (his "
            f"GPT_CONFIG_124M has n_heads 12), or save that config dict as config.json beside "
            f"the file"
        )
    state = _weights(state, what)
    (vocab, d_model), (n_ctx, _) = _matrix(state, "tok_emb.weight", what), _matrix(state, "pos_emb.weight", what)
    d_ff = _matrix(state, "trf_blocks.0.ff.layers.0.weight", what)[0]
    return make_config(
        what,
        vocab_size=vocab,
        n_ctx=n_ctx,
        d_model=d_model,
        n_layers=_layers(state, what),
        n_heads=n_head,
        d_ff=d_ff,
        activation="gelu_tanh",
        tie_weights=False,
        qkv_bias="trf_blocks.0.att.W_query.bias" in state,
        ln_eps=1e-5,
        name=f"{what} (GPTModel)",
    )


def _expected(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of his GPTModel for `config`, in his names and nn.Linear's [out, in] layout."""
    d, ff, V = config.d_model, config.d_ff, config.vocab_size
    shapes = {
        "tok_emb.weight": (V, d),
        "pos_emb.weight": (config.n_ctx, d),
        "final_norm.scale": (d,),
        "final_norm.shift": (d,),
        "out_head.weight": (V, d),
    }
    for i in range(config.n_layers):
        b = f"trf_blocks.{i}."
        for m in ("W_query", "W_key", "W_value"):
            shapes[b + f"att.{m}.weight"] = (d, d)
            if config.qkv_bias:
                shapes[b + f"att.{m}.bias"] = (d,)
        shapes |= {
            b + "att.out_proj.weight": (d, d),
            b + "att.out_proj.bias": (d,),
            b + "ff.layers.0.weight": (ff, d),
            b + "ff.layers.0.bias": (ff,),
            b + "ff.layers.2.weight": (d, ff),
            b + "ff.layers.2.bias": (d,),
        }
        shapes |= {b + f"{n}.{p}": (d,) for n in ("norm1", "norm2") for p in ("scale", "shift")}
    return shapes


def state_of(state: dict, config: GPTConfig, what: str) -> dict[str, torch.Tensor]:
    """Our names for his tensors, W_query, W_key and W_value stacked into c_attn; shapes checked first."""
    state = _weights(state, what)
    check_shapes({k: tuple(v.shape) for k, v in state.items()}, _expected(config), what)
    ours = {
        "wte.weight": state["tok_emb.weight"],
        "wpe.weight": state["pos_emb.weight"],
        "ln_f.weight": state["final_norm.scale"],
        "ln_f.bias": state["final_norm.shift"],
        "lm_head.weight": state["out_head.weight"],
    }
    for i in range(config.n_layers):
        theirs, b = f"trf_blocks.{i}.", f"blocks.{i}."
        for p in ("weight", "bias") if config.qkv_bias else ("weight",):
            ours[b + f"attn.c_attn.{p}"] = torch.cat(
                [state[theirs + f"att.{m}.{p}"] for m in ("W_query", "W_key", "W_value")]
            )
        for key, value in state.items():
            if key.startswith(theirs) and ".att.W_" not in key:
                module, param = key[len(theirs) :].rsplit(".", 1)
                ours[b + _RENAME[module] + "." + _PARAM[param]] = value
    return ours
