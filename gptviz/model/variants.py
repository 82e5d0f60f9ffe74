"""What the config's variants change in the model's modules: no biases (nanoGPT's bias=False) and no final norm
(GPT-1), built so that the rest of the code reads such a model as it reads any other."""

from __future__ import annotations

import torch
from torch import nn

from .config import GPTConfig
from .hooks import HookPoint


class NoNorm(nn.Module):
    """The final norm of a model without one (final_norm=False, GPT-1): the stream passes unchanged. Its weight and
    bias are None, as a norm's without them, and its hook still fires: readers of ln_f need no special case."""

    weight = None
    bias = None

    def __init__(self):
        super().__init__()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(x)


def fixed_zero_bias(module: nn.Module) -> nn.Module:
    """bias=False (nanoGPT): the module's bias becomes a zero buffer, not a parameter. The same function as no bias,
    and every reader of `.bias` (attribution, flow, head steps) keeps working; counts, the optimizer and
    checkpoints see no such tensor (the buffer is not persistent)."""
    size = module.bias.shape
    del module.bias
    module.register_buffer("bias", torch.zeros(size), persistent=False)
    return module


def make_linear(d_in: int, d_out: int, config: GPTConfig) -> nn.Linear:
    linear = nn.Linear(d_in, d_out)
    return linear if config.bias else fixed_zero_bias(linear)
