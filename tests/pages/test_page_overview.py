"""The whole model page (AppTest, tiny preset): the diagram's numbers are the capture's, recomputed here; the
LayerNorm radio redraws it in the other wiring; the position picker moves it; every stage links to its page.

The page holds st.page_link, which needs the app's navigation: it opens through app.py (pagetest.open_page).
"""

from __future__ import annotations

import pytest
import torch

from gptviz import methods as analysis
from gptviz.app import keys as K
from gptviz.app import overview as service
from gptviz.app.sidebar import DEFAULT_PROMPT
from gptviz.figures.overview import pct
from gptviz.model.hooks import act_name
from gptviz.model.tokenizer import encode
from tests.support.pagetest import MARKUP, TINY, edge_prompts, figures, kept_of_edge_prompt, open_page

PAGE = "app_pages/overview.py"
N_LAYERS, N_CTX = 2, 128


def diagrams(at) -> dict[str, dict]:
    """The page's diagrams by layout ("wide", "tall")."""
    return {
        f["layout"]["meta"]["overview_layout"]: f
        for f in figures(at)
        if "overview_layout" in (f["layout"].get("meta") or {})
    }


def recomputed(prompt: str, norm: str, position: int):
    """Residual norms, lens top tokens and next-token probabilities from the app's full capture of the prompt."""
    spec = TINY._replace(norm=norm)
    ids = tuple(encode(prompt)[-N_CTX:])
    from gptviz.app import model_service

    logits, batched = model_service.capture_cache(spec, ids)  # every hook point: another capture than the page's
    logits, cache = logits[0], batched.prompt(0)  # the one prompt of the [1, ...] capture
    model = model_service.load_model(spec)
    lens = analysis.logit_lens(model, cache)
    probs = logits[position].softmax(-1)
    sums = [
        torch.linalg.vector_norm(
            cache[act_name("resid_pre", i)][position] + cache[act_name("attn_out", i)][position]
        ).item()
        for i in range(N_LAYERS)
    ]
    return ids, lens.top_ids[:, position].tolist(), probs.topk(5), sums


def drawn_values(fig: dict, kind: str) -> list[str]:
    trace = fig["data"][0]
    return [t for t, c in zip(trace["text"], trace["customdata"], strict=True) if c[0] == kind]


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_diagram_shows_the_capture_in_each_wiring(norm):
    at = open_page(PAGE, norm=norm)
    assert not at.exception and not at.error
    figs = diagrams(at)
    assert set(figs) == {"wide", "tall"}
    ids, lens_top, top, sums = recomputed(DEFAULT_PROMPT, norm, len(encode(DEFAULT_PROMPT)) - 1)
    for fig in figs.values():
        trace = fig["data"][0]
        kinds = [c[0] for c in trace["customdata"] if c[1] == 1 and c[0] != "lens"]
        assert kinds == (
            ["ln", "attn", "add", "ln", "mlp", "add"] if norm == "pre" else ["attn", "add", "ln", "mlp", "add", "ln"]
        )
        assert [c[3] for c in trace["customdata"] if c[0] == "lens"] == lens_top
        assert [c[3] for c in trace["customdata"] if c[0] == "prob"][:5] == top.indices.tolist()
        probs = drawn_values(fig, "prob")
        assert [text.split("<br>")[1] for text in probs[:5]] == [pct(p) for p in top.values.tolist()]
        # the stream right after each block's attention is added: its norm, as drawn
        adds = drawn_values(fig, "add")[1::2]  # input's "+" first, then two per block
        assert adds == [f"<b>+</b><br>{s:.3g}" for s in sums]
    assert any(f"{norm}-norm" in c.value for c in at.caption)


@pytest.mark.slow
def test_the_position_picker_moves_the_diagram():
    at = open_page(PAGE)
    at.selectbox(key=K.OV_POSITION).select(4).run()
    assert not at.exception
    ids, lens_top, top, _ = recomputed(DEFAULT_PROMPT, "pre", 4)
    trace = diagrams(at)["wide"]["data"][0]
    assert "token 4" in trace["text"][0]
    assert [c[3] for c in trace["customdata"] if c[0] == "lens"] == lens_top
    assert [c[3] for c in trace["customdata"] if c[0] == "prob"][:5] == top.indices.tolist()


@pytest.mark.slow
def test_every_stage_links_to_its_page():
    at = open_page(PAGE)
    links = {el.proto.label: el.proto.page for el in at.get("page_link")}
    assert links == {
        "Embeddings": "embeddings",
        "Attention": "",
        "Activations": "activations",
        "Why this token?": "why",
        "Generation": "generation",
    }  # "": the app's home, Attention


def test_a_box_opens_its_page_with_that_stage_chosen():
    ids = (5, 6, 7, 8)
    attn = service.stage_target({"customdata": ["attn", 1, 3, -1]}, 2, ids)
    assert attn == (
        "attention",
        {K.ATT_LAYER: 1, K.ATT_HEAD: 3, K.ATT_QUERY: 2, K.ATT_QUERY_POS: 2, K.ATT_QUERY_FOR: (ids, 2)},
    )
    assert service.stage_target({"customdata": ["mlp", 0, -1, -1]}, 1, ids) == ("activations", {K.ACT_FOCUS: 1})
    assert service.stage_target({"customdata": ["prob", -1, -1, 42]}, 3, ids) == ("why", {K.WHY_TARGET: 42})
    assert service.stage_target({"customdata": ["prob", -1, -1, 42]}, 1, ids) == ("why", {})
    assert service.stage_target({"customdata": ["embed", -1, -1, -1]}, 1, ids)[0] == "embeddings"
    assert service.stage_target({"customdata": ["ln", 0, -1, -1]}, 1, ids)[0] == "norms"


@pytest.mark.slow
@edge_prompts("empty", "one-token", "longer-than-context", "emoji-cjk", "markup")
def test_edge_prompts(prompt):
    at = open_page(PAGE, prompt=prompt)
    kept = kept_of_edge_prompt(at, prompt, N_CTX)
    figs = diagrams(at)
    if not kept:
        assert not figs
        return
    trace = figs["wide"]["data"][0]
    assert f"token {len(kept) - 1}" in trace["text"][0]
    if prompt == MARKUP:
        drawn = " ".join(trace["text"] + trace["hovertext"])
        assert "<script" not in drawn and "<img" not in drawn and "&lt;" in drawn
