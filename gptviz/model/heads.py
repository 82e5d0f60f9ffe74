"""A head, or the mean of a layer's heads: the one rule every view of attention reads (the app's pickers, its data
for a chosen head, and the browser map's payload), so "the mean of all heads" means one thing everywhere.

Works on torch tensors and numpy arrays alike; `head_axis` names the heads' axis.
"""

from __future__ import annotations

import numpy as np

MEAN_HEAD = -1  # a head picker's option for the mean of a layer's heads


def head_or_mean(weights, head: int | None):
    """One head's slice of a layer's per-head tensor [heads, ...], or the heads' plain mean for MEAN_HEAD (or
    None)."""
    return heads_mean(weights, 0) if head is None or head == MEAN_HEAD else weights[head]


def heads_mean(weights, head_axis: int, keepdims: bool = False):
    """The heads' plain (unweighted) mean along `head_axis`."""
    if isinstance(weights, np.ndarray):
        return weights.mean(axis=head_axis, keepdims=keepdims)
    return weights.mean(dim=head_axis, keepdim=keepdims)


def heads_then_mean(weights: np.ndarray, head_axis: int) -> np.ndarray:
    """The heads along `head_axis`, then their mean as one more head: the browser map's layout."""
    return np.concatenate([weights, heads_mean(weights, head_axis, keepdims=True)], axis=head_axis)
