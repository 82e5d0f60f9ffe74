"""Entropy of attention rows, and the entropy of a head that spreads evenly over all it sees."""
from __future__ import annotations

import math

import torch


def attention_entropy(patterns: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row, [..., query]: 0 when a query looks at one key only,
    ln(q + 1) when query q spreads evenly over every key it can see. Masked (zero) weights add nothing."""
    p = patterns.float()
    return (-(p * torch.log(p.clamp_min(1e-30))).sum(-1)).clamp_min(0.0)


def uniform_attention_entropy(T: int) -> float:
    """Mean over queries 0..T-1 of ln(q + 1): the entropy of a head that spreads evenly over all it sees."""
    return math.lgamma(T + 1) / T if T > 0 else 0.0
