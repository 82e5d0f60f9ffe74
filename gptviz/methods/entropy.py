"""Entropy of attention rows, and the entropy of a head that spreads evenly over all it sees."""

from __future__ import annotations

import math

import torch

# Elements one step of attention_entropy works on: its temporaries stay this small whatever the input. Every layer's
# patterns at once (a long prompt's: 12 x 12 x 682² float32 is 270 MB on gpt2-small) made two temporaries of that size
# per page, which the server's budget did not see (`python -m benchmarks hostile` draws such prompts on several pages).
ENTROPY_CHUNK = 1 << 22


def attention_entropy(patterns: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row, [..., query]: 0 when a query looks at one key only,
    ln(q + 1) when query q spreads evenly over every key it can see. Masked (zero) weights add nothing.
    Large inputs are taken one slice of the leading axis at a time."""
    if patterns.dim() > 2 and patterns.numel() > ENTROPY_CHUNK:
        return torch.stack([attention_entropy(part) for part in patterns])
    return torch.special.entr(patterns.float()).sum(-1).clamp_min(0.0)


def uniform_attention_entropy(T: int) -> float:
    """Mean over queries 0..T-1 of ln(q + 1): the entropy of a head that spreads evenly over all it sees."""
    return math.lgamma(T + 1) / T if T > 0 else 0.0
