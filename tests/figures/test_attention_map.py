"""The Attention page's heatmap component: what it sends the browser (gptviz.attention_map.payload)."""

from __future__ import annotations

import numpy as np
import plotly.colors as pcolors
import pytest

from gptviz.figures.browser import attention_map as amap


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
    assert np.all(w[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0)  # the future carries nothing
    assert (data["layer"], data["head"], data["query"], data["Q"], data["K"]) == (1, 2, 3, 5, 5)
    assert data["row_start"] == [0] * 5 and data["row_end"] == [1, 2, 3, 4, 5]


def test_the_mean_head_is_the_last_index_and_names_follow():
    data = amap.payload(patterns(), list("abcde"), layer=0, head="mean", query=0, scale="sqrt")
    assert data["head"] == 3 and data["head_names"] == ["head 0", "head 1", "head 2", "mean of all heads"]


def test_large_captures_send_only_the_picked_layer():
    L, H = 12, 12
    T_all = int((amap.SEND_ALL_CELLS / (L * (H + 1))) ** 0.5)  # the longest prompt that sends every layer
    assert amap.layers_to_send(L, H, T_all**2, 5) == list(range(L))
    assert amap.layers_to_send(L, H, (T_all + 1) ** 2, 5) == [5]
    data = amap.payload(patterns(L=3, H=2, T=4), list("abcd"), layer=2, head=0, query=9, scale="max")
    assert data["query"] == 3  # out of range: the last token, as the page does


def test_a_layer_too_large_to_send_whole_sends_the_picked_head_in_full_and_pooled_thumbnails():
    L, H = 2, 3
    T = int((amap.SEND_ALL_CELLS / (H + 1)) ** 0.5) + 1  # one layer's heads and mean just over the limit
    p = patterns(L=L, H=H, T=T, seed=1)
    labels = [f"t{i}" for i in range(T)]
    data = amap.payload(p, labels, layer=1, head=2, query=0, scale="linear")
    assert data["layers"] == [1] and data["heads"] == [2]
    full = amap.decode_weights(data)
    assert full.shape == (1, 1, T, T)
    np.testing.assert_allclose(full[0, 0], p[1, 2], atol=0.5 / amap.LEVELS + 1e-7)
    thumbs = amap.decode_thumbs(data)
    b = data["thumbs"]["block"]
    assert b == -(-T // amap.THUMB_SIZE) and thumbs.shape == (1, H + 1, -(-T // b), -(-T // b))
    # each thumbnail cell is the largest weight of its block, for every head and the mean
    with_mean = np.concatenate([p[1], p[1].mean(0, keepdims=True)])
    for h, (i, j) in [(0, (0, 0)), (3, (5, 2)), (2, (thumbs.shape[2] - 1, thumbs.shape[3] - 1))]:
        block = with_mean[h, i * b : (i + 1) * b, j * b : (j + 1) * b]
        assert thumbs[0, h, i, j] == pytest.approx(block.max(), abs=0.5 / amap.LEVELS + 1e-7)
    assert len(data["weights"]) < 3 * T * T  # one head's base64, not the layer's (H + 1) x as much
    mean = amap.payload(p, labels, layer=0, head="mean", query=0, scale="linear")
    np.testing.assert_allclose(amap.decode_weights(mean)[0, 0], p[0].mean(0), atol=0.5 / amap.LEVELS + 1e-7)
    small = amap.payload(patterns(), list("abcde"), layer=0, head=0, query=0, scale="linear")
    assert small["heads"] == [0, 1, 2, 3] and small["thumbs"] is None and amap.decode_thumbs(small) is None


def test_max_pooling_keeps_one_strong_weight_and_pads_the_edges():
    w = np.zeros((5, 7), dtype=np.float32)
    w[4, 6] = 0.9
    w[1, 1] = 0.3
    pooled, b = amap.max_pooled(w, size=3)
    assert b == 3 and pooled.shape == (2, 3)
    np.testing.assert_allclose(pooled, [[0.3, 0, 0], [0, 0, 0.9]], rtol=1e-6)


def test_nan_and_out_of_range_weights_are_clamped_not_wrapped():
    q = amap.quantize(np.array([np.nan, -0.1, 0.0, 0.5, 1.0, 1.5]))
    assert q.dtype == np.dtype("<u2") and q.tolist() == [0, 0, 0, 32768, 65535, 65535]


def test_colours_are_the_plotly_figures_scale():
    stops = amap.colour_stops()
    blues = pcolors.get_colorscale("Blues")
    assert [s for s, _ in stops] == [s for s, _ in blues]
    assert stops[0][1] == [247, 251, 255] and stops[-1][1] == [8, 48, 107]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(scale="log"), "scale must be one of"),
        (dict(layer=2), "layer 2 is not in 0..1"),
        (dict(head=4), "head 4 is not in"),
        (dict(head_names=["a"]), "1 head names for 3 heads"),
        (dict(head_notes=[["a"] * 4]), r"head_notes must be 2 layers x 4 entries"),
        (dict(head_notes=[["a"] * 3] * 2), r"head_notes must be 2 layers x 4 entries"),
    ],
)
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
    from gptviz.figures.browser import asset

    js, css = asset("attention_map", "js"), asset("attention_map", "css")
    assert "export default function" in js and ".gv-map" in css


def test_a_generation_places_each_step_row_at_its_window():
    """Real steps from stream(attention=True) on a model with an 8-token context, so the window slides: each row
    of the payload is that step's attention row at key positions window_start .. its own query position."""
    from gptviz import GPT, GPTConfig, stream
    from gptviz.model.tokenizer import token_labels

    model = GPT(GPTConfig(vocab_size=64, n_ctx=8, n_layers=2, n_heads=2, d_model=16), seed=0).eval()
    prompt = [1, 2, 3, 4, 5, 6]
    steps = list(stream(model, prompt, 5, temperature=0.0, attention=True))
    labels = token_labels(prompt + [s.token_id for s in steps])
    data = amap.generation_payload(steps, labels, len(prompt), layer=1, head="mean", scale="linear")
    w = amap.decode_weights(data)
    assert (data["Q"], data["K"], data["head"]) == (5, 10, 2) and data["layers"] == [0, 1]
    assert [s.window_start for s in steps] == [0, 0, 0, 1, 2]  # the context slid from step 3 on
    for i, step in enumerate(steps):
        q, w0 = len(prompt) - 1 + i, step.window_start
        assert (data["row_start"][i], data["row_end"][i], data["row_positions"][i]) == (w0, q + 1, q)
        att = step.attention.numpy()
        np.testing.assert_allclose(w[:, :2, i, w0 : q + 1], att, atol=0.5 / amap.LEVELS + 1e-7)
        np.testing.assert_allclose(w[:, 2, i, w0 : q + 1], att.mean(1), atol=0.5 / amap.LEVELS + 1e-7)
        assert not w[:, :, i, :w0].any() and not w[:, :, i, q + 1 :].any()
    assert data["row_labels"] == labels[len(prompt) :] and data["col_labels"] == labels[:10]
    assert data["divider"] == len(prompt)
    with pytest.raises(ValueError, match="at least one step"):
        amap.generation_payload([], labels, 6, layer=0, head=0, scale="linear")


def test_head_notes_travel_as_plain_strings_per_layer_and_head():
    notes = [[f"layer {layer} head {h}" for h in range(3)] + [""] for layer in range(2)]
    data = amap.payload(patterns(), list("abcde"), layer=1, head=0, query=0, scale="linear", head_notes=notes)
    assert data["head_notes"] == notes
    assert amap.payload(patterns(), list("abcde"), layer=1, head=0, query=0, scale="linear")["head_notes"] is None
