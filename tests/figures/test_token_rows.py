"""The token-rows component's data (the unit page's top examples): the same tokens the Plotly figure shows around
each peak, the values unchanged, NaN sent as none, a bad peak refused."""

from __future__ import annotations

import numpy as np
import pytest

from gptviz.figures.browser.token_rows import payload
from gptviz.figures.unit_page import LEFT_CHARS, RIGHT_CHARS, ExampleRow, _row_layout, examples_text, window

rng = np.random.default_rng(0)
WORDS = ["␣the", "␣king", ",", "␣my", "␣lord", "!", "↵", "␣Romeo", "␣a", "ing", "␣thee", "'s"]


def random_row(n: int, peak: int) -> ExampleRow:
    labels = [WORDS[i] for i in rng.integers(0, len(WORDS), n)]
    return ExampleRow(labels, rng.normal(size=n).astype(np.float32), peak, f"#1 row of {n}", "play, token 5")


@pytest.mark.parametrize("n, peak", [(1, 0), (40, 0), (40, 39), (80, 40), (120, 100), (7, 3)])
def test_the_window_is_the_tokens_the_figure_shows(n, peak):
    row = random_row(n, peak)
    starts, widths = _row_layout(row.labels, row.peak)
    shown = np.flatnonzero((starts >= -LEFT_CHARS) & (starts + widths <= RIGHT_CHARS))  # every token that fits
    start, end = window(row.labels, row.peak)
    assert list(range(start, end)) == list(shown)
    drawn = examples_text([row], value_name="v", cmax=1.0)["data"][0]  # the figure draws the same tokens
    assert len(drawn["x"]) == end - start


def test_payload_carries_the_values_and_the_peak():
    row = random_row(60, 30)
    values = row.values.copy()
    values[31] = np.nan
    data = payload([row._replace(values=values)], value_name="activation", cmax=2.5)
    start, end = window(row.labels, 30)
    sent = data["rows"][0]
    assert sent["tokens"] == row.labels[start:end] and sent["peak"] == 30 - start
    assert sent["values"][31 - start] is None  # NaN travels as none (drawn grey)
    kept = [v for i, v in enumerate(sent["values"]) if i != 31 - start]
    want = [float(v) for i, v in enumerate(values[start:end]) if i != 31 - start]
    np.testing.assert_allclose(kept, want, atol=1e-5)
    assert data["cmax"] == 2.5 and data["value_name"] == "activation"


def test_markup_stays_data_and_a_bad_peak_is_refused():
    row = ExampleRow(["<b>", "<script>x</script>", "&amp;"], np.ones(3), 1, "<i>name</i>", "<a>")
    sent = payload([row], value_name="v", cmax=0.0)
    assert sent["rows"][0]["tokens"] == ["<b>", "<script>x</script>", "&amp;"]  # as text, for textContent
    assert sent["cmax"] == 1.0  # a zero scale would divide by zero in the browser
    with pytest.raises(ValueError, match="peak 3 is outside"):
        payload([row._replace(peak=3)], value_name="v", cmax=1.0)
