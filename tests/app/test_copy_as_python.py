"""Copy as Python (issue 45): every page offers the library calls that reproduce its numbers. Each test runs a page
with AppTest at a non-default setting and a prompt with quotes and a newline, executes the snippet the page shows in
a fresh namespace, and compares its `result` with the numbers the page drew."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.model.tokenizer import encode
from tests.support import pagetest
from tests.support.small_configs import TRAIN_FORM
from tests.support.snippets import run_snippet, snippet_of

PROMPT = 'JULIET:\nSay "Romeo" twice, Romeo: it\'s the name, the name.'


def page_and_result(page: str, **state):
    """The page run on PROMPT with `state` (no exception), and its one snippet's `result`."""
    at = pagetest.run_page(page, prompt=PROMPT, **state)
    assert not at.exception
    return at, run_snippet(snippet_of(at))


def test_the_snippet_keeps_the_prompt_a_string_whatever_it_holds():
    from gptviz.app.reproduce.core import prompt_lines

    hostile = "'''\"\"\"\\n'); import os; os.system('x') #"
    line = prompt_lines(encode(hostile), hostile)
    namespace: dict = {}
    exec(compile("from gptviz import get_tokenizer\n" + line, "<line>", "exec"), namespace)  # noqa: S102
    assert namespace["ids"] == encode(hostile) and "os" not in namespace


@pytest.mark.slow
def test_the_attention_pages_snippet_gives_its_map_and_detector_scores():
    at, result = page_and_result("attention", **{S.ATT_LAYER.key: 1, S.ATT_HEAD.key: 2})
    data, weights = pagetest.attention_map(at)
    shown = weights[data["layers"].index(1), data["heads"].index(2)]
    np.testing.assert_allclose(shown, result["map"].numpy(), atol=1 / data["levels"])
    table = next(d.value for d in at.dataframe if "head" in d.value.columns)
    for column in table.columns[1:]:
        name = column.split(" (chance")[0]
        if name not in result:  # the random-sequence induction test: its own sequence, not this prompt
            continue
        for row, value in zip(table["head"], table[column], strict=True):
            layer, head = (int(part.split()[-1]) for part in row.split(","))
            assert value == pytest.approx(float(result[name][layer, head]), abs=1e-6), (column, row)


@pytest.mark.slow
def test_the_generation_pages_snippet_gives_its_next_token_distribution():
    at, result = page_and_result("generation", **{S.GEN_TEMP.key: 0.7, S.GEN_TOPK.key: 5})
    bars = pagetest.figure(at, "After the prompt")
    shown = sorted((float(v) for trace in bars["data"] for v in pagetest.array(trace["x"])), reverse=True)
    wanted = [p for _, p, _ in result]
    np.testing.assert_allclose(shown[: len(wanted)], wanted, rtol=1e-5)
    assert sum(allowed for *_, allowed in result) == 5  # top-k 5: five tokens may be drawn


@pytest.mark.slow
def test_the_parameters_pages_snippets_give_its_counts():
    at = pagetest.run_page(
        "parameters",
        **{
            S.PAR_MODEL.key: "gpt2-medium",
            S.PAR_PRESETS.key: ["gpt1", "gpt2-xl"],
            S.CALC_LAYERS.key: 7,
            S.CALC_TIE.key: False,
        },
    )
    assert not at.exception
    shown = [t.value for t in at.table if "made of" in t.value.columns]  # by group (not the finer split)
    for view, table in zip(("gpt2-medium", "your model"), shown, strict=True):  # the Breakdown tab, then the Calculator
        result = run_snippet(snippet_of(at, view))
        assert list(table["group"]) == list(result["group"])
        assert list(table["count"]) == list(result["count"]), view
    presets = next(d.value for d in at.dataframe if "model" in d.value.columns)
    result = run_snippet(snippet_of(at, "presets"))
    assert list(presets["model"]) == list(result) == ["gpt1", "gpt2-xl"]
    assert int(presets["total"].iloc[1]) == sum(result["gpt2-xl"].values()) == 1_557_611_200


@pytest.mark.slow
def test_the_whole_model_pages_snippet_gives_every_blocks_numbers():
    at, result = page_and_result("overview", **{S.OV_POSITION.key: 5})
    assert result.position == 5
    drawn = " ".join(json.dumps(f) for f in pagetest.figures(at))
    for i, b in enumerate(result.blocks):
        assert f"Layer {i}'s strongest weight from this token: head {b.head} puts {b.weight:.2f} on " in drawn
        assert f"(position {b.target}; uniform over the 6 visible tokens: {result.attn_chance:.2f})" in drawn


@pytest.mark.slow
def test_the_why_pages_snippets_give_its_attributions_and_ablated_probabilities():
    from gptviz.app.services.why import pieces

    at = pagetest.run_page("why", prompt=PROMPT)
    assert not at.exception
    dla = run_snippet(snippet_of(at, "direct attribution"))
    shown = next(m.value for m in at.metric if m.label == "Logit difference (model)")
    assert shown == f"{dla.logit_diff:+.3f}"
    bars = pagetest.figure(at, "Direct attribution")
    drawn = sorted(
        float(v) for t in bars["data"] for v in pagetest.array(t["y" if t.get("orientation") != "h" else "x"])
    )
    np.testing.assert_allclose(drawn, sorted(dla.values.tolist()), rtol=1e-5, atol=1e-6)

    at = pagetest.run_page(
        "why",
        prompt=PROMPT,
        **{S.WHY_VIEW.key: "Ablate heads", S.WHY_ABLATED.key: [(0, 2), (1, 0)], S.WHY_MODE.key: "mean"},
    )
    assert not at.exception
    result = run_snippet(snippet_of(at, "ablate heads"))
    table = next(d.value for d in at.dataframe if "after" in d.value.columns)
    assert pieces(list(result["after"])) == list(table["token"])  # the page's rows, in its order
    for column in ("before", "after"):
        np.testing.assert_allclose(table[column], list(result[column].values()), rtol=1e-5)


@pytest.mark.slow
def test_the_why_pages_patching_snippet_gives_both_sweeps_on_the_visitors_pair():
    """The sidebar's prompt (quotes, a newline) and the same with one token swapped, as the page opens on them."""
    at = pagetest.run_page("why", prompt=PROMPT, **{S.WHY_VIEW.key: "Patching"})
    assert not at.exception and not at.error
    code = snippet_of(at, "patching")
    assert repr(PROMPT) in code  # the visitor's text, not its ids
    result = run_snippet(code)
    np.testing.assert_allclose(
        pagetest.array(pagetest.figure(at, "Residual stream patched")["data"][0]["z"]),
        result["residual stream"].numpy(),
        atol=1e-4,
    )
    np.testing.assert_allclose(
        pagetest.array(pagetest.figure(at, "One head's output patched")["data"][0]["z"]),
        result["heads"].numpy(),
        atol=1e-4,
    )
    clean, corrupted = result["logit difference"]
    assert any(
        c.value.startswith(f"Logit difference: clean {clean:+.3f}, corrupted {corrupted:+.3f}.") for c in at.caption
    )


@pytest.mark.slow
def test_the_why_pages_saliency_snippet_gives_both_strips():
    """On a trained model (on random weights the path is nearly straight: the number of points hardly shows)."""
    from gptviz.app import model_service

    bundled = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    at = pagetest.run_page("why", PROMPT, bundled, **{S.WHY_VIEW.key: "Saliency"})
    assert not at.exception and not at.error
    result = run_snippet(snippet_of(at, "saliency"))
    for title, name in (("Integrated gradients", "integrated gradients"), ("Gradient x input", "gradient x input")):
        z = pagetest.array(pagetest.figure(at, title)["data"][0]["z"]).ravel()
        np.testing.assert_allclose(z[~np.isnan(z)], result[name].numpy(), atol=1e-5)


@pytest.mark.slow
def test_the_why_pages_flow_snippet_gives_its_graph_at_the_threshold():
    from gptviz.app import model_service

    bundled = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    at = pagetest.run_page(
        "why", PROMPT, bundled, **{S.WHY_VIEW.key: "Information flow", S.WHY_FLOW_THRESHOLD.key: 0.07}
    )
    assert not at.exception and not at.error
    code = snippet_of(at, "information flow")
    assert "load_pretrained('shakespeare-pre')" in code and "threshold=0.07" in code
    graph = run_snippet(code)
    attention = sorted((e.importance for e in graph.edges if e.kind == "attention"), reverse=True)
    assert attention and list(at.dataframe[0].value["share"]) == attention
    counts = next(c.value for c in at.caption if "edges at share" in c.value)
    assert counts.startswith(f"{len(graph.edges)} edges at share > 0.07")


@pytest.mark.slow
def test_the_activations_pages_snippet_gives_every_tabs_numbers():
    at, result = page_and_result("activations", **{S.ACT_FOCUS.key: 4, S.ACT_TOPK.key: 7})
    bars = pagetest.figure(at, "Most active neurons")
    drawn = sorted(
        (float(v) for t in bars["data"] for v in pagetest.array(t["x" if t.get("orientation") == "h" else "y"])),
        reverse=True,
    )
    assert len(result["top neurons"]) == 7
    np.testing.assert_allclose(drawn, [v for *_, v in result["top neurons"]], rtol=1e-5)
    heat = pagetest.figure(at, "Residual-stream norm")
    np.testing.assert_allclose(pagetest.array(heat["data"][0]["z"]), result["residual stream"].numpy(), rtol=1e-5)
    lens = pagetest.figure(at, "Logit lens")
    np.testing.assert_allclose(pagetest.array(lens["data"][0]["z"]), result["logit lens"].top_probs.numpy(), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("spec", [pagetest.TINY, None], ids=["preset", "bundled"])
def test_the_embeddings_pages_snippet_gives_its_pca_and_position_similarity(spec):
    from gptviz.app import model_service
    from gptviz.model.weights import bundled_models

    if spec is None:
        if "shakespeare-pre" not in bundled_models():
            pytest.skip("no bundled model")
        spec = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    at = pagetest.run_page("embeddings", prompt=PROMPT, spec=spec, **{S.EMB_PCA_N.key: 500})
    assert not at.exception
    result = run_snippet(snippet_of(at))
    pos = next(
        f
        for f in pagetest.figures(at)
        if f["data"]
        and f["data"][0].get("type") == "heatmap"
        and len(pagetest.array(f["data"][0]["z"])) == model_service.load_model(spec).config.n_ctx
    )
    np.testing.assert_allclose(pagetest.array(pos["data"][0]["z"]), result["position similarity"].numpy(), atol=1e-5)
    sample, coords, explained = result["pca"]
    pca = next(f for f in pagetest.figures(at) if any(t.get("type") in ("scatter", "scattergl") for t in f["data"]))
    drawn = np.concatenate(
        [
            np.stack([pagetest.array(t["x"]), pagetest.array(t["y"])], 1)
            for t in pca["data"]
            if t.get("type") in ("scatter", "scattergl")
        ]
    )
    np.testing.assert_allclose(np.sort(drawn, 0), np.sort(coords.numpy(), 0), atol=1e-5)
    prompt_ids = set(encode(PROMPT))
    assert not prompt_ids & set(sample) and len(sample) + len(prompt_ids) == len(coords)


@pytest.mark.slow
def test_the_norms_pages_snippet_gives_the_twins_pair_maps_and_next_tokens():
    from gptviz.methods import wiring
    from gptviz.model.weights import bundled_models

    pairs = wiring.trained_twins(list(bundled_models()))
    if not pairs:
        pytest.skip("no bundled twins")
    at = pagetest.run_page("norms", prompt=PROMPT, **{S.TWINS_PAIR.key: 3})
    assert not at.exception
    result = run_snippet(snippet_of(at, "twins side by side"))
    pair = result["pair"]
    titles = [pagetest.title_of(f) for f in pagetest.figures(at)]
    assert f"pre-norm L{pair.a[0]}H{pair.a[1]} the picked head" in titles
    assert f"post-norm L{pair.b[0]}H{pair.b[1]} similarity {pair.similarity:.2f}" in titles
    maps = [f for f in pagetest.figures(at) if pagetest.title_of(f).startswith(("pre-norm L", "post-norm L"))]
    maps = maps[:2]  # the first tab's pair (the twins tab in depth draws its own after)
    assert len(maps) == 2
    for fig, which in zip(maps, ("pre map", "post map"), strict=True):
        np.testing.assert_allclose(np.nan_to_num(pagetest.array(fig["data"][0]["z"])), result[which].numpy(), atol=1e-6)
    bars = next(f for f in pagetest.figures(at) if f["data"] and f["data"][0].get("name") == "pre-norm")
    for trace in bars["data"]:
        norm = trace["name"].split("-")[0]
        np.testing.assert_allclose(pagetest.array(trace["x"]), result["next token"][norm].values.numpy(), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["prompt", "random"])
def test_the_norms_pages_same_weights_snippet_gives_its_losses_and_gradients(source):
    """A small tiny model (3 layers, width 32), seed 5, xavier init, the gradient of whole blocks."""
    shape = {
        S.NORMS_PRESET.key: "tiny",
        S.NORMS_DEPTH.key: 3,
        S.NORMS_WIDTH.key: 32,
        S.NORMS_INPUT.key: source,
        S.NORMS_SEED.key: 5,
        S.NORMS_INIT.key: "xavier",
        S.NORMS_GRAD_VIEW.key: "block",
    }
    at = pagetest.run_page("norms", prompt=PROMPT, **shape)
    assert not at.exception and not at.error
    code = snippet_of(at, "same weights")
    assert (repr(PROMPT) in code) == (source == "prompt")
    result = run_snippet(code)
    metrics = {m.label: m.value for m in at.metric}
    for norm in ("pre", "post"):
        assert metrics[f"LM loss, {norm}-norm"] == f"{result[norm]['loss']:.3f}"
    assert (
        metrics["Embedding grad, post/pre"]
        == f"{result['post']['embedding gradient'] / result['pre']['embedding gradient']:.3g}×"
    )
    grad = next(
        f
        for f in pagetest.figures(at)
        if (f["layout"].get("yaxis", {}).get("title") or {}).get("text") == "gradient L2 norm"
    )
    for trace, norm in zip(grad["data"][:2], ("pre", "post"), strict=True):
        np.testing.assert_allclose(pagetest.array(trace["y"]), result[norm]["gradient per layer"], rtol=1e-6)


@pytest.mark.slow
def test_the_unit_pages_snippet_gives_its_summary_examples_and_share():
    from gptviz.app import model_service
    from gptviz.model.weights import bundled_models

    if "shakespeare-pre" not in bundled_models():
        pytest.skip("no bundled model")
    spec = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    at = pagetest.run_page("units", spec=spec, **{K.UNIT: "L3N47"})
    assert not at.exception
    result = run_snippet(snippet_of(at))
    from gptviz.app.display import md_text

    assert any(m.value == f"**{md_text(result['summary'])}**" for m in at.markdown)
    rows = pagetest.token_rows(at, K.UNIT_EXAMPLES)["rows"]
    assert len(rows) == len(result["top examples"])
    for row, example in zip(rows, result["top examples"], strict=True):
        assert max(v for v in row["values"] if v is not None) == pytest.approx(example.value, abs=1e-4)
    for band in result["bands"]:  # L3N47 is active on 3 tokens: its bands show what there is, and say so
        shown = pagetest.token_rows(at, K.per_item(K.UNIT_BANDS, band.number))["rows"] if band.examples else []
        assert [row["values"][row["peak"]] for row in shown] == pytest.approx(
            [e.value for e in band.examples], abs=1e-4
        )
    assert sum(len(b.examples) for b in result["bands"]) == 3


@pytest.mark.slow
def test_the_unit_pages_snippet_rebuilds_an_index_the_server_built(tmp_path, monkeypatch):
    """For a model without a shipped index the snippet runs the server's own scan (the start of every play) and
    gets the same numbers."""
    from gptviz.app import unit_index as ui
    from gptviz.serve import limits

    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    small = limits.ServerLimits(index_tokens=3_000, index_mb=2048)
    monkeypatch.setattr(limits, "server_limits", lambda: small)
    ui.index_store().clear()
    ui.build(pagetest.TINY, 3_000, lambda done, total: None)
    at = pagetest.run_page("units", **{K.UNIT: "L1N5"})
    assert not at.exception
    result = run_snippet(snippet_of(at))
    from gptviz.app.display import md_text

    assert any(m.value == f"**{md_text(result['summary'])}**" for m in at.markdown)
    rows = pagetest.token_rows(at, K.UNIT_EXAMPLES)["rows"]
    assert [row["values"][row["peak"]] for row in rows] == pytest.approx(
        [e.value for e in result["top examples"]], abs=1e-4
    )


@pytest.mark.slow
def test_the_heads_forming_pages_snippet_gives_each_twins_scores_at_the_step():
    from gptviz.model.weights import bundled_models
    from gptviz.training.snapshots import load_snapshots

    if "shakespeare-pre" not in bundled_models():
        pytest.skip("no bundled twins")
    steps = load_snapshots(bundled_models()["shakespeare-pre"]).steps
    step = steps[len(steps) // 2] + 1  # between two snapshots: the page shows the one before
    at = pagetest.run_page("timeline", **{S.TL_STEP.key: step, S.TL_DETECTOR.key: "previous-token"})
    assert not at.exception
    result = run_snippet(snippet_of(at))
    lines = [m.value for m in at.markdown if m.value.startswith("**")]
    for wiring, got in result.items():
        layer, head = np.unravel_index(int(got["scores"].argmax()), got["scores"].shape)
        line = next(v for v in lines if v.startswith(f"**{wiring}**"))
        assert f"step {got['snapshot step']}" in line  # the slider snaps to a snapshot
        assert f"best previous-token head L{layer}H{head} {got['scores'][layer, head]:.2f}" in line
        assert f"loss {got['loss']:.2f}" in line


@pytest.mark.slow
def test_the_train_pages_snippet_trains_the_same_run_step_for_step():
    from gptviz.app import jobs
    from gptviz.serve.training_jobs import DONE

    small = dict(TRAIN_FORM, train_lr=0.003)
    at = pagetest.open_page("app_pages/training.py", **small)
    next(b for b in at.button if b.label == "Start training").click().run()
    job = jobs.training_registry().get(at.session_state[K.TRAIN_JOB])
    assert job.wait(120) and job.status == DONE, job.error
    at.run()
    assert not at.exception
    result = run_snippet(snippet_of(at, "Train page"))
    for name, r in job.results.items():
        assert result[name] == pytest.approx([h["train_loss"] for h in r.history], rel=1e-6)
        assert len(result[name]) == 4


@pytest.mark.slow
def test_the_explainers_snippet_gives_its_curves_and_mask():
    at, result = page_and_result("explainers", **{S.EXP_RANGE.key: (-2.0, 3.0), S.EXP_MASK_N.key: 5})
    fig = pagetest.figures(at)[0]  # the activation functions come first
    for name, (y, _) in result["activations"].items():
        traces = [
            t
            for t in fig["data"]
            if pagetest.array(t["x"]).size == 801 and np.allclose(pagetest.array(t["y"]), y.numpy(), atol=1e-9)
        ]
        assert traces, name
    mask = next(f for f in pagetest.figures(at) if f["data"] and f["data"][0].get("type") == "heatmap")
    np.testing.assert_array_equal(pagetest.array(mask["data"][0]["z"]).astype(bool), result["causal mask"].numpy())


@pytest.mark.slow
def test_the_norms_pages_paper_snippet_gives_its_claims(monkeypatch):
    """At the page tests' tiny probe setting (the snippet writes the setting out, so it measures the same)."""
    from gptviz.training import xiong
    from tests.support.norms_page import TINY_PAPER, TINY_PAPER_DEPTHS

    monkeypatch.setattr(xiong, "PAPER", TINY_PAPER)
    monkeypatch.setattr(xiong, "PAPER_DEPTHS", TINY_PAPER_DEPTHS)
    at = pagetest.run_page("norms", prompt=PROMPT, **{K.NORMS_PAPER_ON: True})
    assert not at.exception
    code = snippet_of(at, "paper's setting")
    assert repr(TINY_PAPER.depth) in code and "xiong.PAPER" not in code  # the setting itself, not a name for it
    result = run_snippet(code)
    text = "\n".join(m.value for m in at.markdown)
    for claim in result["claims"]:
        assert f"{claim.text}. Measured: {claim.measured}." in text
    depth_fig = next(
        f for f in pagetest.figures(at) if f["layout"].get("xaxis", {}).get("title", {}).get("text") == "layers L"
    )
    fitted = [t["name"] for t in depth_fig["data"] if t.get("mode") == "lines+markers"]
    assert any(f"∝ L^{result['depth scaling'].exponent('post'):+.2f}" in n for n in fitted)


@pytest.mark.slow
def test_the_norms_pages_depth_sweep_snippet_gives_its_gradients_and_exponents():
    from tests.support.norms_page import TINY, markdown_text, open_page

    at = open_page(**dict(TINY, norms_sweep_depths=[1, 2, 4]))
    at.button(key=K.NORMS_SWEEP_RUN).click().run()
    assert not at.exception
    result = run_snippet(snippet_of(at, "depth sweep"))
    text = markdown_text(at)
    for norm in ("pre", "post"):
        assert f"{norm}-norm: b = {result[norm][1]:+.2f}" in text
    fig = next(
        f
        for f in pagetest.figures(at)
        if (f["layout"].get("xaxis", {}).get("title") or {}).get("text", "").startswith("layers")
        and len(f["data"]) >= 2
        and f["data"][0].get("name", "").startswith("pre")
    )
    np.testing.assert_allclose(pagetest.array(fig["data"][0]["y"]), result["pre"][0], rtol=1e-6)


@pytest.mark.slow
def test_the_unit_search_snippets_give_its_tables():
    from gptviz.app import model_service
    from gptviz.model.weights import bundled_models

    if "shakespeare-pre" not in bundled_models():
        pytest.skip("no bundled model")
    spec = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    at = pagetest.run_page(
        "units", prompt=PROMPT, spec=spec, **{K.UNIT_TAB: K.UNIT_TABS[1], S.UNIT_FOCUS.key: 6, K.UNIT_WORD: "king"}
    )
    assert not at.exception
    here = run_snippet(snippet_of(at, "most active here"))
    table = next(d.value for d in at.dataframe if "value here" in d.value.columns)
    assert list(table["value here"]) == pytest.approx([s.value for s in here], rel=1e-5)
    word = run_snippet(snippet_of(at, "a word"))
    table = next(d.value for d in at.dataframe if "z" in d.value.columns)
    assert list(table["z"]) == pytest.approx([f.z for f in word], rel=1e-5)


@pytest.mark.slow
def test_the_grow_snippet_trains_the_same_run(monkeypatch):
    """A small grow run (the page tests' sizes): the snippet writes the sizes out and gets the same snapshots."""
    from gptviz.app import jobs
    from gptviz.serve import training_jobs

    for key, value in dict(steps=8, layers=2, d_model=32, block=16, batch=4, snapshot_every=4).items():
        monkeypatch.setitem(training_jobs.GROWTH, key, value)
    at = pagetest.run_page("timeline")
    at.button(key=K.TL_GROW_START).click().run()
    job = jobs.training_registry().get(at.session_state[K.TL_GROW_JOB])
    assert job.wait(120) and job.status == "done", job.error
    at.run()
    code = snippet_of(at, "grow one yourself")
    assert "steps=8" in code and "d_model=32" in code
    monkeypatch.setitem(training_jobs.GROWTH, "steps", 800)  # the snippet's own values decide, not the defaults
    result = run_snippet(code)
    snaps, formed = result["pre-norm"]
    page = job.snapshots["pre"]
    assert snaps.steps == page.steps == [1, 4, 8]
    np.testing.assert_allclose(snaps.score_array(), page.score_array(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_the_attention_snippet_also_gives_the_value_weighted_and_entropy_tabs():
    state = {S.ATT_LAYER.key: 1, S.ATT_HEAD.key: 2}
    at = pagetest.run_page("attention", prompt=PROMPT, **state, **{S.ATT_VIEW.key: "Value-weighted"})
    assert not at.exception
    result = run_snippet(snippet_of(at))
    weighted = pagetest.figure(at, "Weight × ‖value · W_O‖")
    np.testing.assert_allclose(
        np.nan_to_num(pagetest.array(weighted["data"][0]["z"])), result["value-weighted"].numpy(), atol=1e-6
    )
    at = pagetest.run_page("attention", prompt=PROMPT, **state, **{S.ATT_VIEW.key: "Entropy map"})
    assert not at.exception
    entropy = pagetest.figure(at, "Attention entropy per head")
    np.testing.assert_allclose(pagetest.array(entropy["data"][0]["z"]), result["entropy"].mean(-1).numpy(), rtol=1e-5)
    steps = result["inside the head"]  # the query is the page's: its last token by default
    torch.testing.assert_close(steps.weights, result["map"][steps.query, : steps.query + 1], rtol=1e-5, atol=1e-7)
