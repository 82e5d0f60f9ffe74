"""Per-unit histograms: sign-exact bins around 0, edges, quantiles."""

from __future__ import annotations

import numpy as np
import torch


def _bin_of(values: torch.Tensor, inv_width: torch.Tensor, zero_bin: torch.Tensor, bins: int) -> torch.Tensor:
    """Each value's histogram bin, int32 [units, n]. `inv_width`, `zero_bin`: float [units, 1]. Bins are left-open,
    (edge_k, edge_k+1], so 0 and -0.0 fall in the bin just below the 0 edge and every value > 0 in a bin above it,
    decided by the value's sign alone: ceil(v / width) is >= 1 for v > 0 and <= 0 otherwise. (Taken from the lower edge,
    (v - lo) / width rounded in float32 put GELU's -0.0 and tiny negatives above the 0 edge, where they counted as
    active.)"""
    steps = torch.mul(values, inv_width).ceil_()
    small = (inv_width[:, 0] < 1).nonzero().squeeze(1)
    if len(small):  # v * inv_width >= v > 0 when inv_width >= 1; below 1 a tiny v > 0 could round to 0
        rows = steps[small]
        steps[small] = torch.where(values[small] > 0, rows.clamp(min=1), rows)
    # bin = zero_bin - 1 + steps, clamped into the outer bins
    return steps.clamp_(1 - zero_bin, bins - zero_bin).add_(zero_bin - 1).to(torch.int32)


class _Binner:
    """Histogram counts of token-major blocks of unit values ([tokens, units]), by _bin_of's rule: bins left-open, a
    value's side of the 0 edge decided by its sign alone. The per-unit constants are prepared once per scan, and each
    block is binned in five in-place passes (scale, ceil, shift, clamp to the outer bins, each column's offset into
    the flat counts) and one index_add_ of ones."""

    def __init__(self, hist_range: np.ndarray, zero_bin: np.ndarray, bins: int):
        lo = torch.from_numpy(hist_range[:, 0]).double()
        self.inv_width = (bins / (torch.from_numpy(hist_range[:, 1]).double() - lo)).float()
        self.shift = torch.from_numpy(zero_bin).float() - 1  # bin = zero_bin - 1 + ceil(v / width)
        # below 1, v * inv_width can round a tiny v > 0 to 0 (the wrong side of the edge): those units get a fix-up
        self.small = self.inv_width < 1
        self.bins = bins

    def counts(self, values: torch.Tensor, cols: slice) -> torch.Tensor:
        """[units in cols, bins] int64 counts of `values` [tokens, units in cols]."""
        n, w = values.shape
        steps = torch.mul(values, self.inv_width[cols]).ceil_()
        small = self.small[cols].nonzero().squeeze(1)
        if len(small):
            part = steps[:, small]
            steps[:, small] = torch.where(values[:, small] > 0, part.clamp(min=1), part)
        steps.add_(self.shift[cols]).clamp_(0, self.bins - 1)
        steps.add_(torch.arange(w, dtype=torch.float32).mul_(self.bins))  # exact: w * bins < 2**24
        index = steps.to(torch.int32).reshape(-1)
        # index_add_ of ones into int32 counts: faster than bincount on these blocks, gpt2-small's and the bundled
        # models' alike, the binning passes included (`python -m benchmarks index` times the scan)
        counts = torch.zeros(w * self.bins, dtype=torch.int32)
        counts.index_add_(0, index, torch.ones(1, dtype=torch.int32).expand(len(index)))
        return counts.view(w, self.bins).long()


def _edges(hist_range: np.ndarray, min_max: np.ndarray, bins: int) -> np.ndarray:
    lo, hi = hist_range[:, :1].astype(np.float64), hist_range[:, 1:].astype(np.float64)
    width = (hi - lo) / bins
    zero_bin = np.rint(-lo / width)  # 0 is an edge: multiples of the width from it, so that edge is exactly 0
    edges = (np.arange(bins + 1)[None] - zero_bin) * width
    edges[:, 0], edges[:, -1] = min_max[:, 0], min_max[:, 1]
    return edges


def _quantiles(edges: np.ndarray, counts: np.ndarray, levels) -> np.ndarray:
    """Quantiles from histograms, linear within a bin: [units, len(levels)]."""
    cum = np.cumsum(counts, axis=1, dtype=np.float64)
    total = cum[:, -1:]
    out = np.empty((len(counts), len(levels)))
    rows = np.arange(len(counts))
    for j, q in enumerate(levels):
        target = q * total[:, 0]
        b = np.minimum((cum < target[:, None]).sum(1), counts.shape[1] - 1)
        before = np.where(b > 0, cum[rows, np.maximum(b - 1, 0)], 0.0)
        inside = np.maximum(counts[rows, b], 1)
        frac = np.clip((target - before) / inside, 0, 1)
        out[:, j] = edges[rows, b] + frac * (edges[rows, b + 1] - edges[rows, b])
    return out
