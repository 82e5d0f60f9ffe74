"""The neuron index's numbers by brute force."""

from __future__ import annotations

import numpy as np
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


# spaces of every kind a text cut turns on, Python's and Unicode's: the random texts' separators
SPACES = [" ", "  ", "\n", "\n\n", "\t", "\r", "\x0b", "\x1c", "\x85"]


def assert_top_k_sorted(index, values, lengths, rtol: float, atol: float) -> None:
    """Each unit's top K values equal the brute force `values` [tokens, units] sorted, within rtol and atol; where
    neighbours differ clearly, the locations are the same too (documents of `lengths` tokens, end to end)."""
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    K = index.meta["top_k"]
    for u in range(index.n_units):
        order = torch.sort(values[:, u], descending=True, stable=True)
        torch.testing.assert_close(
            torch.from_numpy(index.arrays["top_values"][u]), order.values[:K], rtol=rtol, atol=atol
        )
        got = offsets[index.arrays["top_doc"][u]] + index.arrays["top_pos"][u]
        vals = order.values[: K + 1].numpy()
        clear = np.array([(i == 0 or vals[i - 1] - vals[i] > 1e-4) and vals[i] - vals[i + 1] > 1e-4 for i in range(K)])
        assert np.array_equal(got[clear], order.indices[:K].numpy()[clear])
