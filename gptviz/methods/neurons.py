"""MLP neurons: the most active at a position, and each layer's histogram of activations."""

from __future__ import annotations

import torch


def top_neurons(post: torch.Tensor, position: int, k: int = 10) -> list[tuple[int, int, float]]:
    """The k most active MLP neurons at one position across all layers, as (layer, neuron, activation).
    post: [layers, T, d_ff] (the stacked mlp.hook_post)."""
    acts = post[:, position]  # [layers, d_ff]
    values, idx = acts.flatten().topk(min(k, acts.numel()))
    d_ff = acts.shape[1]
    return [(int(i) // d_ff, int(i) % d_ff, float(v)) for v, i in zip(values, idx, strict=True)]


def activation_histograms(post: torch.Tensor, bins: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts [layers, bins], edges [bins + 1]): one histogram per layer of its MLP outputs, on shared
    bins spanning every value. post: [layers, ...]."""
    flat = post.reshape(post.shape[0], -1).float()
    lo, hi = float(flat.min()), float(flat.max())
    if hi <= lo:  # every value equal: one visible bin around it
        lo, hi = lo - 0.5, hi + 0.5
    edges = torch.linspace(lo, hi, bins + 1)
    counts = torch.stack([torch.histogram(row, bins=edges).hist for row in flat])
    return counts, edges
