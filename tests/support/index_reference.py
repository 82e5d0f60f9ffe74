"""The neuron index's numbers by brute force."""

from __future__ import annotations

import torch

from gptviz import index as ix


def brute_force(model, docs, stride):
    """Every token's every unit score, each token in its scoring window, one window per capture: [tokens, U]."""
    n_ctx = model.config.n_ctx
    rows = []
    for d in docs:
        for t in range(len(d.ids)):
            start = ix.scoring_window(t, n_ctx, stride)
            rows.append(ix.unit_values(model, d.ids[start : t + 1])[-1])
    return torch.stack(rows)
