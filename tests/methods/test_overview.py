"""The whole model at a glance (gptviz.methods.overview, gptviz.figures.overview): every value drawn equals a
recomputation from the model's weights or from a capture with the full [T, T] patterns and the full logit lens, in
both wirings; the diagram puts each block's LayerNorms where its wiring runs them."""

from __future__ import annotations

import pytest
import torch

from gptviz import GPT, PRESETS, capture
from gptviz import methods as analysis
from gptviz.figures.overview import overview_cells, overview_figure, short
from gptviz.methods.overview import forward_overview, overview_hook_names
from gptviz.model.hooks import ActivationCache, act_name
from gptviz.model.tokenizer import encode, position_labels, token_labels

IDS = encode("It is the east, and Juliet is the sun. It is the east, and")


def model_of(norm: str) -> GPT:
    # a random tiny model's probabilities sit near uniform; larger init spreads them so the top-k order is real
    model = GPT(PRESETS["tiny"].replace(norm=norm), seed=3).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    return model


def full_capture(model):
    """Everything, the one prompt of the batched capture (as the Overview page reads its cached capture)."""
    logits, cache = capture(model, torch.tensor([IDS]))
    return logits[0], cache.prompt(0)


def norm(x) -> float:
    return torch.linalg.vector_norm(x).item()


@pytest.mark.parametrize("wiring", ["pre", "post"])
@pytest.mark.parametrize("position", [0, 5, len(IDS) - 1])
def test_values_equal_a_recomputation(wiring, position):
    model = model_of(wiring)
    logits, cache = full_capture(model)
    # the overview reads its own, smaller capture (no patterns)
    names = overview_hook_names(model.config.n_layers, wiring)
    assert not any("pattern" in n for n in names)
    small_logits, small = capture(model, torch.tensor([IDS]), list(names))
    small = ActivationCache({k: v[0] for k, v in small.items()}, model.config.n_layers)
    ov = forward_overview(model, small, small_logits[0], position, ids=IDS)
    p = position
    # embeddings straight from the weights
    tok, pos = model.wte.weight[IDS[p]].detach(), model.wpe.weight[p].detach()
    assert ov.embed == pytest.approx(norm(tok), rel=1e-5)
    assert ov.pos_embed == pytest.approx(norm(pos), rel=1e-5)
    assert ov.resid_0 == pytest.approx(norm(tok + pos), rel=1e-5)
    lens = analysis.logit_lens(model, cache)  # the whole lens, every position, from the stacked stream
    assert ov.embed_lens_id == lens.top_ids[0, p]
    for b in ov.blocks:
        i, at = b.layer, (lambda kind, layer=b.layer: cache[act_name(kind, layer)][p])
        assert b.resid_in == pytest.approx(norm(at("resid_pre")), rel=1e-5)
        assert b.attn_out == pytest.approx(norm(at("attn_out")), rel=1e-5)
        assert b.mlp_out == pytest.approx(norm(at("mlp_out")), rel=1e-5)
        assert b.resid_out == pytest.approx(norm(at("resid_post")), rel=1e-5)
        ln_1 = model.blocks[i].ln_1
        if wiring == "pre":  # x = x + attn(ln_1(x)): the stream after the addition is resid_mid
            assert b.attn_sum == pytest.approx(norm(at("resid_mid")), rel=1e-5)
            assert b.ln_1 == pytest.approx(norm(ln_1(at("resid_pre")).detach()), rel=1e-5)
            assert b.mlp_sum == pytest.approx(b.resid_out, rel=1e-5)
        else:  # x = ln_1(x + attn(x)): the norm's output is resid_mid
            assert b.ln_1 == pytest.approx(norm(at("resid_mid")), rel=1e-5)
            assert b.ln_1 == pytest.approx(norm(ln_1(at("resid_pre") + at("attn_out")).detach()), rel=1e-5)
            assert b.ln_2 == pytest.approx(b.resid_out, rel=1e-5)
        # the strongest head and target: the largest weight of the captured [heads, T, T] pattern's row
        row = cache[act_name("pattern", i)][:, p, :]
        assert b.weight == pytest.approx(row.max().item(), rel=1e-5)
        assert row[b.head, b.target].item() == pytest.approx(row.max().item(), rel=1e-5)
        assert b.lens_id == lens.top_ids[i + 1, p]
        assert b.lens_prob == pytest.approx(lens.top_probs[i + 1, p].item(), rel=1e-4)
    assert ov.blocks[-1].lens_id == int(logits[p].argmax())  # the last state's lens is the model's own output
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([IDS]))[0, p], -1)  # a separate plain forward pass
    top = probs.topk(5)
    assert list(ov.top_ids) == top.indices.tolist()
    assert ov.top_probs == pytest.approx(top.values.tolist(), rel=1e-4)
    assert ov.attn_chance == pytest.approx(1 / (p + 1))
    assert ov.uniform_prob == pytest.approx(1 / model.config.vocab_size)
    if p + 1 < len(IDS):
        assert ov.next_prob == pytest.approx(probs[IDS[p + 1]].item(), rel=1e-4)
        assert ov.next_rank == int((probs > probs[IDS[p + 1]]).sum()) + 1
    else:
        assert ov.next_id is None


def test_a_position_outside_the_prompt_is_refused():
    model = model_of("pre")
    logits, cache = full_capture(model)
    with pytest.raises(ValueError, match="outside"):
        forward_overview(model, cache, logits, len(IDS), ids=IDS)


def drawn(wiring: str, layout: str, ids=IDS, position: int | None = None):
    model = model_of(wiring)
    logits, cache = capture(model, torch.tensor([ids]))
    cache = ActivationCache({k: v[0] for k, v in cache.items()}, model.config.n_layers)
    ov = forward_overview(model, cache, logits[0], len(ids) - 1 if position is None else position, ids=ids)
    wanted = sorted(
        {ov.token_id, ov.embed_lens_id, *ov.top_ids, *(b.lens_id for b in ov.blocks)}
        | ({ov.next_id} if ov.next_id is not None else set())
    )
    names = dict(zip(wanted, token_labels(wanted), strict=True))
    fig = overview_figure(ov, names, position_labels(ids), token_labels(ids), layout)
    return ov, fig.to_plotly_json()


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["wide", "tall"])
def test_the_diagram_runs_each_wiring_in_its_order(layout):
    kinds = {}
    for wiring in ("pre", "post"):
        ov, fig = drawn(wiring, layout)
        trace = fig["data"][0]
        kinds[wiring] = [c[0] for c in trace["customdata"]]
        block_0 = [c[0] for c in trace["customdata"] if c[1] == 0 and c[0] != "lens"]
        assert block_0 == (
            ["ln", "attn", "add", "ln", "mlp", "add"] if wiring == "pre" else ["attn", "add", "ln", "mlp", "add", "ln"]
        )
        texts = trace["text"]
        attn = [t for t, c in zip(texts, trace["customdata"], strict=True) if c[0] == "attn"]
        for b, text in zip(ov.blocks, attn, strict=True):  # each block's own head, weight and chance, as drawn
            assert f"H{b.head}" in text and f"{b.weight:.2f}" in text and f"{ov.attn_chance:.2f}" in text
        probs = [c for c in trace["customdata"] if c[0] == "prob"]
        assert [c[3] for c in probs][:5] == list(ov.top_ids)
        assert fig["layout"]["meta"]["groups"] == ["input", "block 0", "block 1", "output"]
    assert kinds["pre"] != kinds["post"]


def test_token_text_is_escaped_and_the_real_next_token_is_shown():
    ids = encode("<b>x</b> <script>alert(1)</script> & more")
    ov, fig = drawn("pre", "wide", ids, position=3)
    trace = fig["data"][0]
    everything = " ".join(trace["text"] + trace["hovertext"])
    assert "<script" not in everything and "</b" not in everything.replace("</b>", "")  # only the figure's own bold
    assert "&lt;" in everything
    # the prompt's own next token (a random model does not rank it in its top 5), by name, with its probability and
    # rank, closes the output
    assert ov.next_id not in ov.top_ids
    assert trace["customdata"][-1][0] == "next" and trace["customdata"][-1][3] == ov.next_id
    assert f"#{ov.next_rank}" in trace["text"][-1] and short(token_labels([ov.next_id])[0], 6) in trace["text"][-1]


def test_cells_group_input_blocks_and_output():
    ov, _ = drawn("post", "tall")
    names = {i: f"t{i}" for i in range(50257)}
    groups = overview_cells(ov, names, position_labels(IDS), token_labels(IDS))
    assert len(groups) == len(ov.blocks) + 2
    assert [c.kind for c in groups[0]] == ["token", "embed", "embed", "add", "lens"]
    assert groups[-1][0].kind == "ln_f" and groups[-1][0].lines[1] == f"{ov.ln_f:.3g}"
