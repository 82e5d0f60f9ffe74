"""The query bars (gptviz/figures/browser/query_bars.py): the data the browser draws is the query's row, unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from gptviz.figures import span_bars
from gptviz.figures.browser import query_bars as qb
from tests.support.pagetest import MARKUP


def softmax_rows(T: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = np.where(np.tril(np.ones((T, T), bool)), rng.normal(size=(T, T)), -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def test_the_bars_are_the_querys_row_over_the_keys_it_sees():
    pattern = softmax_rows(9)
    labels = [f"t{i}" for i in range(9)]
    data = qb.payload(pattern[6], labels, 6, title="Where token 6 't6' looks")
    assert data["labels"] == labels[:7] and data["query"] == 6
    np.testing.assert_allclose(data["weights"], pattern[6, :7], atol=5e-7)
    assert abs(sum(data["weights"]) - 1) < 1e-5
    # the interactive-HTML download draws the same weights
    fig = span_bars.query_bars(pattern[6], labels, 6)
    np.testing.assert_allclose(np.asarray(fig.data[0].y, dtype=float), data["weights"], atol=5e-7)


def test_markup_in_tokens_and_title_travels_as_plain_data():
    labels = [MARKUP, "<b>x</b>", "&amp;"]
    data = qb.payload(softmax_rows(3)[2], labels, 2, title=f"Where token 2 '{labels[2]}' looks")
    assert data["labels"] == labels and data["title"] == "Where token 2 '&amp;' looks"  # drawn as text, never parsed


@pytest.mark.parametrize(
    "query, weights, message",
    [
        (5, np.ones(3) / 3, "query 5 is not in 0..2"),
        (-1, np.ones(3) / 3, "query -1 is not in 0..2"),
        (2, np.array([0.5, np.nan, 0.5]), "finite"),
        (2, np.array([1.0]), "1 weights for keys 0..2"),
    ],
)
def test_bad_input_is_refused_plainly(query, weights, message):
    with pytest.raises(ValueError, match=message):
        qb.payload(weights, ["a", "b", "c"], query, title="t")
