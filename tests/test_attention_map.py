"""The Attention page's heatmap component: what it sends the browser (gptviz.attention_map.payload)."""
from __future__ import annotations

import numpy as np
import plotly.colors as pcolors
import pytest

from gptviz import attention_map as amap


def patterns(L=2, H=3, T=5, seed=0) -> np.ndarray:
    """Row-normalised causal patterns [L, H, T, T]."""
    rng = np.random.default_rng(seed)
    p = rng.random((L, H, T, T)).astype(np.float32) * np.tril(np.ones((T, T), dtype=np.float32))
    return p / p.sum(-1, keepdims=True)


def test_weights_round_trip_within_one_level_with_the_mean_last():
    p = patterns()
    data = amap.payload(p, list("abcde"), layer=1, head=2, query=3, scale="linear")
    w = amap.decode_weights(data)
    assert w.shape == (2, 4, 5, 5) and data["layers"] == [0, 1]
    np.testing.assert_allclose(w[:, :3], p, atol=0.5 / amap.LEVELS + 1e-7)
    np.testing.assert_allclose(w[:, 3], p.mean(1), atol=0.5 / amap.LEVELS + 1e-7)
    assert np.all(w[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0)   # the future carries nothing
    assert (data["layer"], data["head"], data["query"], data["Q"], data["K"]) == (1, 2, 3, 5, 5)
    assert data["row_start"] == [0] * 5 and data["row_end"] == [1, 2, 3, 4, 5]


def test_the_mean_head_is_the_last_index_and_names_follow():
    data = amap.payload(patterns(), list("abcde"), layer=0, head="mean", query=0, scale="sqrt")
    assert data["head"] == 3 and data["head_names"] == ["head 0", "head 1", "head 2", "mean of all heads"]


def test_large_captures_send_only_the_picked_layer():
    L, H = 12, 12
    T_all = int((amap.SEND_ALL_CELLS / (L * (H + 1))) ** 0.5)          # the longest prompt that sends every layer
    assert amap.layers_to_send(L, H, T_all ** 2, 5) == list(range(L))
    assert amap.layers_to_send(L, H, (T_all + 1) ** 2, 5) == [5]
    data = amap.payload(patterns(L=3, H=2, T=4), list("abcd"), layer=2, head=0, query=9, scale="max")
    assert data["query"] == 3   # out of range: the last token, as the page does


def test_nan_and_out_of_range_weights_are_clamped_not_wrapped():
    q = amap.quantize(np.array([np.nan, -0.1, 0.0, 0.5, 1.0, 1.5]))
    assert q.dtype == np.dtype("<u2") and q.tolist() == [0, 0, 0, 32768, 65535, 65535]


def test_colours_are_the_plotly_figures_scale():
    stops = amap.colour_stops()
    blues = pcolors.get_colorscale("Blues")
    assert [s for s, _ in stops] == [s for s, _ in blues]
    assert stops[0][1] == [247, 251, 255] and stops[-1][1] == [8, 48, 107]


@pytest.mark.parametrize("kwargs, message", [
    (dict(scale="log"), "scale must be one of"),
    (dict(layer=2), "layer 2 is not in 0..1"),
    (dict(head=4), "head 4 is not in"),
    (dict(head_names=["a"]), "1 head names for 3 heads"),
])
def test_bad_arguments_raise_clear_errors(kwargs, message):
    args = dict(layer=0, head=0, query=0, scale="linear") | kwargs
    with pytest.raises(ValueError, match=message):
        amap.payload(patterns(), list("abcde"), **args)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"\[layers, heads, T, T\]"):
        amap.payload(np.zeros((2, 3, 4)), list("abcd"), layer=0, head=0, query=0, scale="linear")
    with pytest.raises(ValueError, match="4 labels for 5 tokens"):
        amap.payload(patterns(), list("abcd"), layer=0, head=0, query=0, scale="linear")


def test_the_assets_ship_with_the_package():
    js, css = amap._asset("attention_map.js"), amap._asset("attention_map.css")
    assert "export default function" in js and ".gv-map" in css


def test_a_generation_places_each_step_row_at_its_window():
    """Real steps from stream(attention=True) on a model with an 8-token context, so the window slides: each row
    of the payload is that step's attention row at key positions window_start .. its own query position."""
    from gptviz import GPT, GPTConfig, stream
    from gptviz.tokenizer import token_labels
    model = GPT(GPTConfig(vocab_size=64, n_ctx=8, n_layers=2, n_heads=2, d_model=16), seed=0).eval()
    prompt = [1, 2, 3, 4, 5, 6]
    steps = list(stream(model, prompt, 5, temperature=0.0, attention=True))
    labels = token_labels(prompt + [s.token_id for s in steps])
    data = amap.generation_payload(steps, labels, len(prompt), layer=1, head="mean", scale="linear")
    w = amap.decode_weights(data)
    assert (data["Q"], data["K"], data["head"]) == (5, 10, 2) and data["layers"] == [0, 1]
    assert [s.window_start for s in steps] == [0, 0, 0, 1, 2]   # the context slid from step 3 on
    for i, step in enumerate(steps):
        q, w0 = len(prompt) - 1 + i, step.window_start
        assert (data["row_start"][i], data["row_end"][i], data["row_positions"][i]) == (w0, q + 1, q)
        att = step.attention.numpy()
        np.testing.assert_allclose(w[:, :2, i, w0:q + 1], att, atol=0.5 / amap.LEVELS + 1e-7)
        np.testing.assert_allclose(w[:, 2, i, w0:q + 1], att.mean(1), atol=0.5 / amap.LEVELS + 1e-7)
        assert not w[:, :, i, :w0].any() and not w[:, :, i, q + 1:].any()
    assert data["row_labels"] == labels[len(prompt):] and data["col_labels"] == labels[:10]
    assert data["divider"] == len(prompt)
    with pytest.raises(ValueError, match="at least one step"):
        amap.generation_payload([], labels, 6, layer=0, head=0, scale="linear")
