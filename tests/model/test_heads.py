"""The head-or-mean rule (gptviz.model.heads): one head's slice, or the heads' plain mean, for torch and numpy."""

import numpy as np
import torch

from gptviz.model.heads import MEAN_HEAD, head_or_mean, heads_mean, heads_then_mean


def layer_weights() -> torch.Tensor:
    return torch.arange(2 * 3 * 3, dtype=torch.float32).reshape(2, 3, 3)  # [heads, T, T]


def test_a_head_is_its_slice_and_the_mean_is_the_plain_mean_of_the_heads():
    w = layer_weights()
    assert torch.equal(head_or_mean(w, 1), w[1])
    expected = (w[0] + w[1]) / 2
    assert torch.equal(head_or_mean(w, MEAN_HEAD), expected)
    assert torch.equal(head_or_mean(w, None), expected)
    np.testing.assert_array_equal(head_or_mean(w.numpy(), MEAN_HEAD), expected.numpy())


def test_the_mean_along_another_axis_keeps_its_dimension_when_asked():
    w = layer_weights()[None]  # [layers, heads, T, T]
    assert heads_mean(w, 1, keepdims=True).shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(heads_mean(w.numpy(), 1), ((w[:, 0] + w[:, 1]) / 2).numpy())


def test_heads_then_mean_puts_the_mean_last():
    w = layer_weights().numpy()[None]
    both = heads_then_mean(w, head_axis=1)
    assert both.shape == (1, 3, 3, 3)
    np.testing.assert_array_equal(both[:, :2], w)
    np.testing.assert_array_equal(both[0, 2], (w[0, 0] + w[0, 1]) / 2)
