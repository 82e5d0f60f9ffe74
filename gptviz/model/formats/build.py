"""The last step every file format takes, once checkpoint.admit has passed its config (overrides, then the load
limits, before a tensor is read): build the model from a state dict in our names once its shapes match."""

from __future__ import annotations

import torch

from ..checkpoint import _load_state, expected_shapes
from ..config import ConfigError, GPTConfig
from ..model import GPT
from .base import CheckpointError, check_shapes


def make_config(what: str, **fields) -> GPTConfig:
    """A GPTConfig from the sizes a file gives, or a CheckpointError naming the file and the bad field."""
    try:
        return GPTConfig(**fields)
    except (ConfigError, TypeError) as err:
        raise CheckpointError(f"{what}: {err}") from None


def build(config: GPTConfig, state: dict[str, torch.Tensor], what: str) -> GPT:
    """The model, after every tensor of `state` (our names; a tied LM head left out) has the shape `config` implies."""
    check_shapes({k: tuple(v.shape) for k, v in state.items()}, expected_shapes(config), what)
    return _load_state(GPT(config, init="empty"), state, what)


def int_field(args: dict, key: str, what: str) -> int:
    value = args.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CheckpointError(f"{what}: {key} must be a positive whole number, got {value!r}")
    return value
