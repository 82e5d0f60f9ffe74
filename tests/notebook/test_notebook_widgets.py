"""gptviz.notebook (gptviz[notebook]): the widgets carry the app's own JavaScript, and every accepted input (a gptviz
capture, a TransformerLens cache, Hugging Face's attentions tuple, plain tensors) gives the same weights and labels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("anywidget")

from gptviz import GPT, GPTConfig, capture  # noqa: E402
from gptviz.figures.browser import asset  # noqa: E402
from gptviz.figures.browser.attention_map import LEVELS, SEND_ALL_CELLS, decode_weights  # noqa: E402
from gptviz.model.tokenizer import get_tokenizer, token_labels  # noqa: E402
from gptviz.notebook import attention, attention_on_text  # noqa: E402
from gptviz.notebook.inputs import labels_of  # noqa: E402

TEXT = "To be, or not to be: that is the question."
CFG = GPTConfig(vocab_size=50257, n_ctx=64, d_model=32, n_layers=3, n_heads=4)


@pytest.fixture(scope="module")
def run():
    model = GPT(CFG, seed=1).eval()
    ids = get_tokenizer().encode(TEXT)
    _, cache = capture(model, ids)
    return model, ids, cache


def sent(widget) -> np.ndarray:
    """The weights the widget sends the browser, [layers sent, heads + mean, T, T]."""
    return decode_weights(widget.data)


def test_widgets_run_the_apps_own_javascript():
    w = attention(np.full((1, 1, 2, 2), 0.5, dtype=np.float32))
    app_js = asset("attention_map", "js")
    body = app_js.replace("export default function (component)", "function mount(component)")
    assert w._esm.startswith(body) and w._esm.count("export default") == 1
    assert asset("attention_map", "css") in w._css


def test_gptviz_capture(run):
    model, ids, cache = run
    w = attention(cache, ids, layer=2, head=1)
    p = cache.patterns()[:, 0].numpy()  # [layers, heads, T, T]
    assert w.data["layers"] == [0, 1, 2] and (w.data["layer"], w.data["head"]) == (2, 1)
    np.testing.assert_allclose(sent(w)[:, :4], p, atol=0.5 / LEVELS + 1e-7)
    np.testing.assert_allclose(sent(w)[:, 4], p.mean(axis=1), atol=0.5 / LEVELS + 1e-7)
    assert w.data["row_labels"] == token_labels(ids) and w.data["row_labels"][1] == "␣be"
    assert w.data["query"] == len(ids) - 1


@pytest.mark.slow
def test_transformer_lens_cache(run):
    pytest.importorskip("transformer_lens")
    from gptviz.interop.tlens import to_transformer_lens

    model, ids, cache = run
    bridge = to_transformer_lens(model)
    _, tl_cache = bridge.run_with_cache(torch.tensor([ids]))
    tokens = bridge.to_str_tokens(torch.tensor(ids))
    w = attention(tl_cache, tokens, head="mean")
    assert w.data["head"] == 4 and w.data["row_labels"] == token_labels(ids)
    np.testing.assert_allclose(sent(w), sent(attention(cache, ids, head="mean")), atol=1.0 / LEVELS)


def test_hugging_face_attentions(run):
    pytest.importorskip("transformers")
    pytest.importorskip("transformer_lens")  # gptviz.interop's tlens module builds the HF model
    from transformers import AutoTokenizer  # noqa: F401  (only to be sure transformers imports)

    from gptviz.interop.hf_tokenizer import gpt2_hf_tokenizer
    from gptviz.interop.tlens import to_hf_gpt2

    model, ids, cache = run
    hf = to_hf_gpt2(model)
    hf.config._attn_implementation = "eager"  # sdpa returns no weights
    out = hf(torch.tensor([ids]), output_attentions=True)
    assert len(out.attentions) == 3
    tokens = gpt2_hf_tokenizer().convert_ids_to_tokens(ids)  # byte-level spelling: "Ġbe"
    assert tokens[1] == "Ġbe"
    w = attention(out.attentions, tokens)
    assert w.data["row_labels"] == token_labels(ids)
    np.testing.assert_allclose(sent(w), sent(attention(cache, ids)), atol=1.0 / LEVELS)


def test_plain_tensors_and_token_text_stays_text():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(
        torch.randn(2, 3, 4, 4, generator=gen).masked_fill(~torch.ones(4, 4).tril().bool(), float("-inf")), dim=-1
    )
    tokens = ["<b>bold</b>", " <script>alert(1)</script>", "&amp;", "a\nb"]
    w = attention(p, tokens, layer=1, head=2, query=1)
    assert w.data["row_labels"] == ["<b>bold</b>", "␣<script>alert(1)</script>", "&amp;", "a↵b"]
    assert (w.data["layer"], w.data["head"], w.data["query"]) == (1, 2, 1)
    np.testing.assert_allclose(sent(w)[1, 2], p[1, 2].numpy(), atol=0.5 / LEVELS + 1e-7)
    one_layer = attention(p[1], tokens)  # [heads, T, T]
    assert one_layer.data["n_layers"] == 1
    np.testing.assert_allclose(sent(one_layer)[0, :3], p[1].numpy(), atol=0.5 / LEVELS + 1e-7)


def test_bad_input_gets_a_clear_message(run):
    model, ids, cache = run
    with pytest.raises(ValueError, match="hook_attn_scores"):
        attention(torch.randn(1, 2, 3, 3) - 5)
    with pytest.raises(ValueError, match=f"3 tokens for attention over {len(ids)} positions"):
        attention(cache, ["a", "b", "c"])
    with pytest.raises(ValueError, match="one string per token"):
        labels_of("To be", 2)
    with pytest.raises(ValueError, match="no attention patterns"):
        attention({"blocks.0.hook_resid_pre": torch.zeros(1, 2, 3)})
    with pytest.raises(ValueError, match="layer 5 is not in 0..2"):
        attention(cache, ids, layer=5)


def test_a_pick_of_a_layer_left_out_is_sent():
    T, L, H = 128, 8, 8
    assert L * (H + 1) * T * T > SEND_ALL_CELLS  # too large to send every layer: one at a time, as in the app
    p = torch.softmax(torch.randn(L, H, T, T, generator=torch.Generator().manual_seed(2)), dim=-1)
    w = attention(p, layer=0)
    assert w.data["layers"] == [0]
    w.pick = {"layer": 5, "head": 3}  # what the browser sets on a click
    assert w.data["layers"] == [5] and (w.data["layer"], w.data["head"]) == (5, 3)
    np.testing.assert_allclose(sent(w)[0, 3], p[5, 3].numpy(), atol=0.5 / LEVELS + 1e-7)
    assert (w.layer, w.head) == (5, 3)


def test_attention_on_text(run):
    model, ids, cache = run
    w = attention_on_text(cache, ids, layer=1, query=3)
    rows = w.data["rows"]
    assert [r["name"] for r in rows] == ["L1 head 0", "L1 head 1", "L1 head 2", "L1 head 3", "L1 mean"]
    p = cache.pattern(1)[0, :, 3].numpy()  # [heads, keys]
    for h, row in enumerate(rows[:4]):
        assert row["tokens"][row["peak"]] == "␣or"  # the query token (To ␣be , ␣or)
        shown = [v for v in row["values"] if v is not None]
        np.testing.assert_allclose(shown, p[h, :4], atol=1e-5)
        assert all(v is None for v in row["values"][row["peak"] + 1 :])  # later tokens: masked
