"""The new attention figures hold the real values: line opacities equal the pattern, attention on the text is
the chosen row, each step of the head's computation is the recomputed (and captured) value, the neuron view's
sum is the score."""

from __future__ import annotations

import math
import re

import numpy as np
import plotly.colors as pcolors
import pytest

from gptviz import capture
from gptviz.figures import common
from gptviz.figures import head_views as hv
from gptviz.methods.head_steps import head_hook_names, head_steps
from tests.support.models import build, random_ids

LABELS = ["<b>x</b>", "␣the", "↵", "␣cat", "␣sat", "␣on", "␣the", "␣mat", "↵", "A", "B", "C"]


@pytest.fixture(scope="module")
def run():
    model = build()
    ids = random_ids(12)
    _, cache = capture(model, ids[None], list(head_hook_names(1, "pre")))
    return model, {k: v[0] for k, v in cache.items()}


def lines_of(fig) -> dict[int, dict[tuple[int, int], float]]:
    """{head: {(query, key): opacity}} from the line traces."""
    out: dict[int, dict[tuple[int, int], float]] = {}
    for trace in fig.data:
        if not isinstance(trace.meta, dict):
            continue
        ys = np.asarray(trace.y, dtype=float).reshape(-1, 3)
        for q, k, _ in ys:
            pair = (int(q), int(k))
            assert pair not in out.setdefault(trace.meta["head"], {}), "a line drawn twice"
            out[trace.meta["head"]][pair] = trace.opacity
    return out


def test_head_view_lines_have_the_patterns_opacity(run):
    _, cache = run
    patterns = cache["blocks.1.attn.hook_pattern"][[0, 2]].numpy()
    fig = hv.head_lines(patterns, LABELS, heads=[0, 2], min_weight=0.02)
    drawn = lines_of(fig)
    assert set(drawn) == {0, 2}
    for pattern, head in zip(patterns, (0, 2), strict=True):
        expected = {(q, k) for q in range(12) for k in range(q + 1) if pattern[q, k] >= 0.02}
        assert set(drawn[head]) == expected  # every visible pair once, nothing in the future
        for (q, k), opacity in drawn[head].items():
            assert abs(opacity - max(pattern[q, k], 1 / hv.LINE_LEVELS)) <= 0.5 / hv.LINE_LEVELS + 1e-6
    colors = {t.meta["head"]: t.line.color for t in fig.data if isinstance(t.meta, dict)}
    assert colors == {0: hv.head_color(0), 2: hv.head_color(2)} and colors[0] != colors[2]
    queries = next(t for t in fig.data if t.meta == "queries")
    assert list(queries.text)[:3] == ["&lt;b&gt;x&lt;/b&gt;", "␣the", "↵"]  # token text escaped for Plotly


def test_focusing_a_query_keeps_only_its_lines(run):
    _, cache = run
    pattern = cache["blocks.1.attn.hook_pattern"][1:2].numpy()
    drawn = lines_of(hv.head_lines(pattern, LABELS, heads=[1], focus=7, min_weight=0.0))
    assert set(drawn[1]) == {(7, k) for k in range(8)}
    assert sum(drawn[1].values()) == pytest.approx(1.0, abs=8 * 0.5 / hv.LINE_LEVELS)


def test_attention_on_text_colours_each_token_by_the_row():
    row = np.array([0.5, 0.1, 0.0, 0.4] + [0.0] * 8, dtype=np.float32)
    fig = hv.attention_text(row, LABELS, query=3, visible=3, title="Where '␣cat' looks")
    colored, grey, scale = fig.data
    assert [int(c[0]) for c in colored.customdata] == [0, 1, 2, 3]
    assert [float(c[2]) for c in colored.customdata] == pytest.approx(row[:4].tolist())  # the hover's weights
    # each token's colour is the colour bar's at its weight: the scale's ends are the bar's
    colorscale = [[float(p), c] for p, c in fig.layout.coloraxis.colorscale]
    assert list(colored.marker.color) == pcolors.sample_colorscale(colorscale, row[:4].tolist())
    assert list(colored.marker.color)[0] != list(colored.marker.color)[2]  # 0.5 and 0 differ
    assert scale.marker.coloraxis == "coloraxis" and list(scale.marker.color) == [0.0, fig.layout.coloraxis.cmax]
    assert scale.marker.opacity == 0 and scale.hoverinfo == "skip"
    assert [int(c[0]) for c in grey.customdata] == list(range(4, 12))  # after the query: grey, not zero
    assert colored.text[0] == "&lt;b&gt;x&lt;/b&gt;"
    assert list(colored.marker.line.color).index(hv.HIGHLIGHT) == 3
    line, start, width = hv.text_layout(LABELS)
    assert line.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2]  # each ↵ ends its line
    assert start[1] == width[0] and start[3] == 0
    wrapped, _, _ = hv.text_layout(["abcdefghi"] * 30, width_chars=40)
    assert wrapped.max() == 7 and np.bincount(wrapped).max() == 4  # 10 cells a token, 4 to a 40-cell line


def test_each_step_of_the_head_figure_is_the_recomputed_value(run):
    model, cache = run
    s = head_steps(model, cache, 1, 2, 6)
    fig = hv.head_steps_figure(s, LABELS)
    by_name = {t.name: np.asarray(t.z, dtype=float) for t in fig.data}
    assert np.allclose(by_name["x"], s.x.numpy()) and by_name["x"].shape == (12, 32)
    assert np.allclose(by_name["q"][0], cache["blocks.1.attn.hook_q"][6, 2].numpy(), atol=1e-6)
    assert np.allclose(by_name["k"], cache["blocks.1.attn.hook_k"][:7, 2].numpy(), atol=1e-6)
    assert np.allclose(by_name["v"], cache["blocks.1.attn.hook_v"][:7, 2].numpy(), atol=1e-6)
    table = by_name["score"]
    assert np.allclose(table[0, :7], s.dots.numpy()) and np.allclose(table[1, :7], s.dots.numpy() / math.sqrt(8))
    assert np.isnan(table[2, 7:]).all() and np.allclose(table[2, :7], table[1, :7])
    assert np.allclose(by_name["softmax"][0, :7], cache["blocks.1.attn.hook_pattern"][2, 6, :7].numpy(), atol=1e-6)
    assert np.allclose(by_name["z"][0], cache["blocks.1.attn.hook_z"][6, 2].numpy(), atol=1e-6)
    assert np.allclose(by_name["z W_O"][0], s.out.numpy())
    titles = [a.text for a in fig.layout.annotations]
    assert "2 · q = x[6] W_Q + b [1 × 8]" in titles and any("[4 × 12]" in t for t in titles)
    # the hover names each cell by its row and column, the categories of the panel's axes (no text per cell)
    k = next(t for t in fig.data if t.name == "k")
    assert list(k.y) == ["0 '&lt;b&gt;x&lt;/b&gt;'", "1 '␣the'", "2 '↵'", "3 '␣cat'", "4 '␣sat'", "5 '␣on'", "6 '␣the'"]
    assert list(k.x) == [f"dim {d}" for d in range(8)] and k.customdata is None and "%{y}, %{x}" in k.hovertemplate
    assert next(t for t in fig.data if t.name == "x").customdata is None
    score = next(t for t in fig.data if t.name == "score")  # numeric axes of its own: the texts in customdata
    assert score.customdata[2][9].tolist() == ["causal mask", "9 'A'"]
    assert fig.layout.margin.l >= common.label_px(["causal mask"])  # the row names' room, reserved up front


def test_the_neuron_views_sum_is_the_score(run):
    model, cache = run
    s = head_steps(model, cache, 1, 0, 9)
    fig = hv.neuron_view(s, 4, LABELS)
    q, k, product = np.asarray(fig.data[0].z, dtype=float)
    assert np.allclose(q, s.q.numpy()) and np.allclose(k, s.k[4].numpy()) and np.allclose(product, q * k)
    total, scaled, weight = map(float, re.findall(r"-?\d+\.\d+", fig.layout.title.text)[:3])
    assert total == pytest.approx(product.sum(), abs=1e-4)
    assert scaled == pytest.approx(s.scores[4].item(), abs=1e-4)
    assert weight == pytest.approx(cache["blocks.1.attn.hook_pattern"][0, 9, 4].item(), abs=1e-4)
    with pytest.raises(ValueError, match="key 10 is not one query 9 can see"):
        hv.neuron_view(s, 10, LABELS)
