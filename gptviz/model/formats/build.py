"""The two steps every file format ends with: admit the config the file describes (overrides, then the load limits,
before a tensor is read), and build the model from a state dict in our names once its shapes match."""
from __future__ import annotations

import torch

from ..checkpoint import _load_state, check_load_limits, expected_shapes
from ..config import ConfigError, GPTConfig
from ..model import GPT
from .base import CheckpointError, check_shapes


def make_config(what: str, **fields) -> GPTConfig:
    """A GPTConfig from the sizes a file gives, or a CheckpointError naming the file and the bad field."""
    try:
        return GPTConfig(**fields)
    except (ConfigError, TypeError) as err:
        raise CheckpointError(f"{what}: {err}") from None


def admit(config: GPTConfig, norm: str | None = None, n_head: int | None = None) -> GPTConfig:
    """`config` with the LayerNorm placement overridden (`norm`), checked against the load limits. An `n_head` given
    for a file that records its own must agree with it."""
    if n_head is not None and n_head != config.n_heads:
        raise CheckpointError(f"n_head={n_head!r} was given, but the checkpoint records {config.n_heads} heads")
    if norm is not None:
        try:
            config = config.replace(norm=norm)
        except ConfigError as err:
            raise CheckpointError(f"norm override: {err}") from None
    check_load_limits(config)
    return config


def build(config: GPTConfig, state: dict[str, torch.Tensor], what: str) -> GPT:
    """The model, after every tensor of `state` (our names; a tied LM head left out) has the shape `config` implies."""
    check_shapes({k: tuple(v.shape) for k, v in state.items()}, expected_shapes(config), what)
    return _load_state(GPT(config, init="empty"), state, what)


def int_field(args: dict, key: str, what: str) -> int:
    value = args.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CheckpointError(f"{what}: {key} must be a positive whole number, got {value!r}")
    return value
