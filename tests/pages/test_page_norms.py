"""AppTest for the pre-norm vs post-norm page: tiny settings through session_state."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

import gptviz.model.checkpoint
import gptviz.model.weights
from gptviz import PRESETS
from gptviz.app import keys as K
from gptviz.app import sidebar
from gptviz.figures.norms import WIRING_NAMES
from gptviz.methods import wiring
from gptviz.model.generate import generate
from gptviz.model.tokenizer import decode, get_tokenizer
from gptviz.training import xiong
from gptviz.training.train import TrainSettings, train_models, write_history
from tests.support import pagetest
from tests.support.norms_page import TINY, TINY_PAPER, TINY_PAPER_DEPTHS, array, markdown_text, open_page
from tests.support.pagetest import forward_calls


@pytest.fixture(scope="module")
def tiny_page() -> AppTest:
    """The page at TINY, run once for the tests that only read it (a test that clicks or reruns opens its own)."""
    return open_page(**TINY)


def expected_stats():
    cfg = PRESETS["tiny"].replace(n_layers=3, d_model=32)
    ids = wiring.random_tokens(64, cfg.vocab_size, 0)
    return wiring.compare_wirings(cfg, ids, 0, "gpt2")


@pytest.mark.slow
def test_same_weights_section_shows_measured_values_and_reruns_run_no_model():
    at = open_page(**TINY)
    stats = expected_stats()
    reading = wiring.describe_gradients(stats["pre"].grad("ffn"), stats["post"].grad("ffn"))
    text = markdown_text(at)
    for line in reading.statements:
        assert line in text
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["LM loss, pre-norm"] == f"{stats['pre'].loss:.3f}"
    assert metrics["LM loss, post-norm"] == f"{stats['post'].loss:.3f}"
    charts = at.get("plotly_chart")
    assert len(charts) >= 4
    # the first tab (the trained twins) draws its figures first: the gradient figure is found by its axis
    grad_fig = next(
        f
        for f in pagetest.figures(at)
        if (f["layout"].get("yaxis", {}).get("title") or {}).get("text") == "gradient L2 norm"
    )
    np.testing.assert_allclose(array(grad_fig["data"][0]["y"]), stats["pre"].grad("ffn"), rtol=1e-6)
    np.testing.assert_allclose(array(grad_fig["data"][1]["y"]), stats["post"].grad("ffn"), rtol=1e-6)

    # display-only changes reuse the cached measurement: no forward pass
    calls = forward_calls()
    at.selectbox(key=K.NORMS_GRAD_VIEW).set_value("block").run()
    at.number_input(key=K.NORMS_LAYER).set_value(2).run()
    assert not at.exception
    assert forward_calls() == calls
    block = wiring.describe_gradients(stats["pre"].grad("block"), stats["post"].grad("block"))
    assert block.statements[0] in markdown_text(at)
    titles = [pagetest.title_of(f) for f in pagetest.figures(at)]
    assert titles.index("Layer 2, head 0: pre-norm") + 1 == titles.index("Layer 2, head 0: post-norm")  # first of three


@pytest.mark.slow
def test_the_top_line_says_the_toggle_switches_between_two_trained_models(tiny_page):
    """Issue 33: a visitor who toggles the wiring must not read the twins' heads as one model's heads."""
    at = tiny_page
    top = at.caption[0]
    assert "two separately trained models" in top.value and "heads matched by role" in top.value
    assert "not by index" in top.help  # the longer story waits in the tooltip


@pytest.mark.slow
def test_prompt_input_and_the_init_control():
    at = open_page(**dict(TINY, norms_input="prompt", norms_init="xavier"))
    ids = get_tokenizer().encode(sidebar.DEFAULT_PROMPT)
    cfg = PRESETS["tiny"].replace(n_layers=3, d_model=32)
    stats = wiring.compare_wirings(cfg, ids, 0, "xavier")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["LM loss, pre-norm"] == f"{stats['pre'].loss:.3f}"


@pytest.mark.slow
def test_the_theory_box_states_nothing_the_run_on_screen_may_contradict():
    """At the page's defaults with Xavier init post-norm's gradients shrink with depth; the fixed prose must
    not say they stay level (the statements beside the chart are the ones computed from the run)."""
    at = open_page(**dict(TINY, norms_init="xavier"))
    theory = " ".join(m.value for m in at.markdown if "Xiong et al. (2020), *On Layer" in m.value)
    assert theory and "stay level, under both inits" not in theory and "states nothing about the run" in theory


@pytest.mark.slow
def test_a_big_model_waits_for_the_button_and_one_past_the_memory_budget_is_refused():
    calls = forward_calls()
    at = open_page(norms_preset="gpt2-xl", norms_depth=48, norms_width=1600)  # ~17 GiB against the default 8 GiB
    assert any("more than the 8,192 MiB this server allows" in e.value for e in at.error)
    assert not any(b.label == "Measure this model" for b in at.button) and not at.metric
    at = open_page(norms_preset="gpt2-medium", norms_depth=24, norms_width=1024)  # ~4 GiB: the visitor decides
    assert any("parameters" in w.value and "GiB" in w.value for w in at.warning)
    assert any(b.label == "Measure this model" for b in at.button)
    assert not at.metric
    assert forward_calls() == calls


@pytest.mark.slow
def test_depth_sweep():
    at = open_page(**dict(TINY, norms_sweep_depths=[1, 2, 4]))
    at.button(key=K.NORMS_SWEEP_RUN).click().run()
    assert not at.exception, at.exception
    cfg = PRESETS["tiny"].replace(n_layers=3, d_model=32)
    sweep = wiring.depth_sweep(cfg, [1, 2, 4], wiring.random_tokens(64, cfg.vocab_size, 0), 0, "gpt2")
    b = wiring.depth_exponent(sweep["depth"], sweep["pre"])
    assert f"pre-norm: b = {b:+.2f}" in markdown_text(at)


@pytest.mark.slow
def test_trained_twins_missing_shows_info(monkeypatch, tmp_path):
    monkeypatch.setattr(gptviz.model.checkpoint, "BUNDLED_DIR", tmp_path / "nothing")
    at = open_page(**TINY)
    assert any("not here yet" in i.value for i in at.info)


@pytest.fixture
def tiny_twins(tmp_path, monkeypatch):
    """A tiny pre/post pair trained for a few steps and saved as bundled models would be."""
    cfg = PRESETS["tiny"].replace(n_layers=1, d_model=32, n_heads=2, n_ctx=64)
    tokens = torch.tensor(get_tokenizer().encode(sidebar.DEFAULT_PROMPT * 20))
    settings = TrainSettings(steps=3, batch_size=2, block_size=16, eval_every=2, eval_batches=1)
    models, results = train_models({"pre": cfg.replace(norm="pre"), "post": cfg.replace(norm="post")}, settings, tokens)
    for norm, model in models.items():
        folder = tmp_path / f"twintest-{norm}"
        gptviz.model.weights.save_checkpoint(model, folder)
        write_history(results[norm], folder)
    monkeypatch.setattr(gptviz.model.checkpoint, "BUNDLED_DIR", tmp_path)
    return tmp_path, results


@pytest.mark.slow
def test_trained_twins_section(tiny_twins):
    folder, results = tiny_twins
    at = open_page(**TINY)
    frames = at.table
    assert frames, "the final-loss table is missing"
    table = frames[0].value
    assert list(table.columns) == ["twintest-pre", "twintest-post"]
    assert table.loc["final train loss"].tolist() == [
        f"{results[n].history[-1]['train_loss']:.3f}" for n in ("pre", "post")
    ]
    assert table.loc["steps"].tolist() == ["3", "3"]
    ids = get_tokenizer().encode(sidebar.DEFAULT_PROMPT)
    codes = [c.value for c in at.code]
    for norm in ("pre", "post"):
        model = gptviz.model.weights.load_checkpoint(folder / f"twintest-{norm}")
        out = generate(model, ids, 40, 0.8, 40, None, 0)
        assert decode(out[len(ids) :]) in codes
    titles = [json.loads(c.proto.spec)["layout"].get("title", {}).get("text") for c in at.get("plotly_chart")]
    assert f"Next token after position {len(ids) - 1}" in titles


@pytest.mark.slow
def test_bundled_twins_loss_phase_is_marked(tiny_page):
    """With the real bundled twins: the table and the note on the cheaper softmax come from history.json."""
    models = gptviz.model.weights.bundled_models()
    pairs = wiring.trained_twins(list(models))
    if not pairs:
        pytest.skip("no bundled twins in gptviz/bundled")
    at = tiny_page
    history = wiring.load_history(models[pairs[0].pre])["history"]
    switch = next((h["step"] for h in history if h.get("full_vocab", True)), None)
    vals = [h["val_loss"] for h in history if h["val_loss"] is not None]
    table = at.table[0].value
    assert table.loc["final validation loss", pairs[0].pre] == f"{vals[-1]:.3f}"
    notes = [c.value for c in at.caption if "cheaper softmax" in c.value]
    if any(h.get("full_vocab") is False for h in history):
        assert notes and f"Before step {switch} " in notes[0]
    else:
        assert not notes
    # the one setting the twins do not share (post-norm's longer warmup) is named with both values
    settings = {norm: wiring.load_history(models[getattr(pairs[0], norm)])["settings"] for norm in ("pre", "post")}
    differ = wiring.differing_settings(settings)
    said = [c.value for c in at.caption if c.value.startswith("Trained with different")]
    assert bool(said) == bool(differ)
    for key, by_norm in differ.items():
        assert f"{key} (" in said[0] and all(f"{n}-norm {v}" in said[0] for n, v in by_norm.items())


@pytest.mark.slow
def test_the_trial_of_training_the_twins_alike_is_shown_with_its_own_numbers(tiny_page):
    """The page says the twins were not trained alike, and why: the pre-norm twin retrained on post-norm's recipe
    fails the check's bars. Every value in that table is the check.json's, and each mark its bar's verdict."""
    import json

    from gptviz.training import evaluate, recipe_trials

    models = gptviz.model.weights.bundled_models()
    pairs = wiring.trained_twins(list(models))
    if not pairs:
        pytest.skip("no bundled twins in gptviz/bundled")
    at = tiny_page
    trial = json.loads((models[pairs[0].pre] / recipe_trials.OTHER_RECIPE_CHECK).read_text())
    bundled_post = json.loads((models[pairs[0].post] / "check.json").read_text())
    table = next(d.value for d in at.dataframe if "pre-norm on post-norm's recipe" in d.value.columns)
    rows = table.set_index("")
    column = rows["pre-norm on post-norm's recipe"]
    margin = next(r for r in rows.index if r.startswith("held-out loss below the bigram"))
    assert column[margin] == f"{trial['margin']:.3f} " + ("✓" if trial["margin"] >= evaluate.MARGIN_NATS else "✗")
    induction = next(r for r in rows.index if r.startswith("best induction head"))
    h = trial["best_induction_head"]
    assert column[induction].startswith(f"{h['score']:.3f} (L{h['layer']}H{h['head']}) ")
    assert f"(chance {h['chance']:.3f})" in induction
    assert column["bars cleared"] == f"{sum(trial['passes'].values())} of {len(trial['passes'])}"
    said = next(m.value for m in at.markdown if m.value.startswith("The smallest change found"))
    assert f"pre-norm clears {sum(trial['passes'].values())} of {len(trial['passes'])} of the check's bars" in said
    assert rows["post-norm (bundled)"]["bars cleared"] == f"{sum(bundled_post['passes'].values())} of 6"
    start, best, n = recipe_trials.logged_induction(models[pairs[0].post] / recipe_trials.OTHER_RECIPE_LOG)
    said = next(c.value for c in at.caption if "The other way round" in c.value)
    assert f"from {start:.3f} at the start to at best {best:.3f} over {n} logged evaluations" in said


def test_a_logged_induction_column_is_read_whole(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "step 1/10 loss 7.6 val 10.8 prev 0.035 ind 0.014 rep 10.9\nstep 2/10 loss 7.5\n"
        "step 5/10 loss 7.0 val 9.0 prev 0.2 ind 0.061 rep 9\nstep 9/10 val 8 ind 0.040\n"
    )
    from gptviz.training import recipe_trials

    assert recipe_trials.logged_induction(log) == (0.014, 0.061, 3)
    assert recipe_trials.logged_induction(tmp_path / "missing.log") is None


@pytest.mark.slow
def test_the_twins_heads_are_shown_beside_their_match_not_their_index():
    """The pre-norm twin's previous-token head L0H0 is drawn beside the post-norm head that does the same job (its
    previous-token heads sit in layer 1), and the table pairs every head with its scores."""
    if len(wiring.trained_twins(list(gptviz.model.weights.bundled_models()))) == 0:
        pytest.skip("no bundled twins in gptviz/bundled")
    at = open_page(**TINY)
    titles = [
        (json.loads(c.proto.spec)["layout"].get("title", {}).get("text") or "").replace("<br>", " ")
        for c in at.get("plotly_chart")
    ]  # a long title is broken between words
    assert "pre-norm L0H0" in titles  # short titles: a long one was cut off in its 300 px column
    assert any(t.startswith("post-norm match L1H") for t in titles)
    table = next(d.value for d in at.dataframe if "post-norm match" in d.value.columns)
    assert len(table) == 16 and table["post-norm match"].nunique() == 16
    prev = next(c for c in table.columns if c.startswith("previous-token"))
    # each id opens its own twin's unit page, in this session
    groups = {
        norm: next(g for g in at.button_group if g.key == K.per_item(K.UNIT_PILLS, f"norms_{norm}"))
        for norm in ("pre", "post")
    }
    assert groups["pre"].options == list(table["pre-norm head"])
    assert groups["post"].options == list(table["post-norm match"])
    first = table[table["pre-norm head"] == "L0H0"].iloc[0]
    assert all(float(x) > 0.5 for x in first[prev].split(" / "))  # both sides previous-token heads
    post_head = first["post-norm match"]
    at = groups["post"].set_value(post_head).run()  # the unit page opens on the post-norm twin's head
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["What does this unit do?"]
    assert at.session_state[K.UNIT] == post_head and at.session_state[K.NORM] == "post"
    assert at.session_state[K.MODEL_SPEC].name == "shakespeare-post"
    assert at.markdown[0].value.startswith(f"**{post_head}")


def mean_traces(fig: dict) -> dict[str, np.ndarray]:
    """A band figure's mean lines (not the ± sd fills), by wiring name."""
    return {t["name"]: array(t["y"]).astype(float) for t in fig["data"] if t.get("mode") == "lines+markers"}


@pytest.mark.slow
def test_the_papers_setting_tab_shows_what_the_library_measures(monkeypatch):
    """At a tiny probe setting: the per-layer bands, the checklist and the depth fit are xiong's own numbers."""
    from dataclasses import replace

    from gptviz.serve.training_jobs import corpus_tokens

    monkeypatch.setattr(xiong, "PAPER", TINY_PAPER)
    monkeypatch.setattr(xiong, "PAPER_DEPTHS", TINY_PAPER_DEPTHS)
    at = open_page(**TINY)
    at.button(key=K.NORMS_PAPER_RUN).click().run()
    assert not at.exception, at.exception
    tokens, base = corpus_tokens(), PRESETS["small-4l"]
    grads = {
        init: xiong.measure_ffn_gradients(replace(TINY_PAPER, init=init), base, tokens) for init in ("xavier", "gpt2")
    }
    scaling = xiong.depth_scaling(TINY_PAPER, base, tokens, TINY_PAPER_DEPTHS, "W2")
    figs = pagetest.figures(at)

    def profile(title: str) -> dict:
        return next(f for f in figs if any(a.get("text") == title for a in f["layout"].get("annotations", [])))

    for title, init in (("Xavier init (the paper)", "xavier"), ("GPT-2 init", "gpt2")):
        shown = mean_traces(profile(title))
        assert set(shown) == set(WIRING_NAMES.values())
        for norm, name in WIRING_NAMES.items():
            np.testing.assert_allclose(shown[name], grads[init].mean(norm, "W2"), rtol=1e-5)
    pairs = wiring.trained_twins(list(gptviz.model.weights.bundled_models()))
    if pairs:  # the bundled twins, measured on the same batches, in the third panel
        folders = gptviz.model.weights.bundled_models()
        twins = {
            norm: gptviz.model.weights.load_checkpoint(folders[getattr(pairs[0], norm)]) for norm in ("pre", "post")
        }
        trained = xiong.trained_ffn_gradients(twins, tokens, TINY_PAPER)
        shown = mean_traces(profile(f"trained twins ({pairs[0].stem})"))
        for norm, name in WIRING_NAMES.items():
            np.testing.assert_allclose(shown[name], trained.mean(norm, "W2"), rtol=1e-5)
    text = markdown_text(at)
    for claim in xiong.check_claims(grads["xavier"], "W2", scaling):
        mark = (
            ":green[:material/check_circle: reproduced]"
            if claim.reproduced
            else ":red[:material/cancel: not reproduced]"
        )
        assert f"{mark}: {claim.text}. Measured: {claim.measured}." in text
    depth_fig = next(f for f in figs if f["layout"].get("xaxis", {}).get("title", {}).get("text") == "layers L")
    fitted = [t["name"] for t in depth_fig["data"] if t.get("mode") == "lines+markers"]
    assert any(f"∝ L^{scaling.exponent('pre'):+.2f}" in n for n in fitted)
    assert any(f"∝ L^{scaling.exponent('post'):+.2f}" in n for n in fitted)
    note = next(m.value for m in at.markdown if m.value.startswith("Xiong et al. (2020) measured"))
    assert f"{TINY_PAPER.depth} layers, d_model {TINY_PAPER.width}" in note


@pytest.mark.slow
def test_the_activation_caption_reads_the_residual_trend_off_the_numbers(tiny_page):
    """It said the pre-norm stream 'grows block by block' whatever the numbers; now the word is trend()'s."""
    at = tiny_page
    resid = expected_stats()["pre"].resid_norm
    caption = next(c.value for c in at.caption if c.value.startswith("Pre-norm's residual stream is a running sum"))
    assert f"here its norm {wiring.trend(resid).word} (from {resid[0]:.3g} to {resid[-1]:.3g})" in caption


def bundled_twin_models():
    """The bundled twins loaded from their folders ({"pre": GPT, "post": GPT}), or a skip where there are none."""
    folders = gptviz.model.weights.bundled_models()
    pairs = wiring.trained_twins(list(folders))
    if not pairs:
        pytest.skip("no bundled twins in gptviz/bundled")
    names = {norm: getattr(pairs[0], norm) for norm in ("pre", "post")}
    return names, {norm: gptviz.model.weights.load_checkpoint(folders[name]).eval() for norm, name in names.items()}


@pytest.mark.slow
def test_the_first_tab_shows_the_twins_side_by_side_as_recomputed_here(tiny_page):
    """Issue 41: the page opens on the trained twins. The matched pairs are match_heads' own on the probe, the pair
    shown first is the most similar, and each twin's bars are the softmax of its logits after the prompt."""
    from gptviz import capture
    from gptviz import methods as analysis
    from gptviz.app.model_service import pattern_names
    from gptviz.model.weights import training_vocab as read_training_vocab

    names, twins = bundled_twin_models()
    at = tiny_page
    assert not at.exception, at.exception
    assert at.tabs[0].label == "Trained twins side by side"
    cfg = twins["pre"].config
    length = min(50, cfg.n_ctx // 2)
    vocab = read_training_vocab(str(gptviz.model.weights.bundled_models()[names["pre"]]))
    probe = analysis.induction_sequence(cfg.vocab_size, length, ids=vocab)[None]
    pats = {
        norm: torch.stack(
            [capture(m, probe, list(pattern_names(cfg.n_layers)))[1][name][0] for name in pattern_names(cfg.n_layers)]
        )
        for norm, m in twins.items()
    }
    matches = analysis.match_heads(pats["pre"], pats["post"])
    picker = at.selectbox(key=K.TWINS_PAIR)
    assert picker.options == [
        f"pre L{m.a[0]}H{m.a[1]} ↔ post L{m.b[0]}H{m.b[1]} (similarity {m.similarity:.2f})" for m in matches
    ]
    best = max(matches, key=lambda m: m.similarity)
    assert picker.value == matches.index(best)
    figs = pagetest.figures(at)
    titles = [(f["layout"].get("title") or {}).get("text", "") for f in figs]
    assert f"pre-norm L{best.a[0]}H{best.a[1]}<br>the picked head" in titles
    assert f"post-norm L{best.b[0]}H{best.b[1]}<br>similarity {best.similarity:.2f}" in titles

    ids = torch.tensor([get_tokenizer().encode(sidebar.DEFAULT_PROMPT)])
    bars = next(f for f in figs if (f["layout"].get("title") or {}).get("text", "").startswith("Next token after"))
    top = {}
    for trace, norm in zip(bars["data"], ("pre", "post"), strict=True):
        with torch.no_grad():
            probs = torch.softmax(twins[norm](ids)[0, -1].float(), -1)
        want = probs.topk(5)
        np.testing.assert_allclose(array(trace["x"]).astype(float), want.values.numpy(), rtol=1e-4)
        assert trace["name"] == f"{norm}-norm"
        top[norm] = float(want.values[0])
    sentence = at.markdown[0].value  # the one sentence, every number in it the figures'
    surer = "pre" if top["pre"] >= top["post"] else "post"
    assert f"the {surer}-norm twin is surer ({max(top.values()):.0%} against {min(top.values()):.0%})" in sentence
    assert f"(similarity {best.similarity:.2f} against" in sentence
    typical = float(analysis.pattern_similarity(pats["pre"], pats["post"]).median())
    assert f"against {typical:.2f})." in sentence
    # both wirings drawn, and the caveat names the init each twin started from (read from the model cards' records)
    assert {"Pre-norm (GPT-2)", "Post-norm (GPT-1)"} <= set(titles)
    caveat = next(c.value for c in at.caption if "Not trained alike" in c.value)
    assert "pre-norm from GPT-2's normal(0, 0.02)" in caveat and "post-norm from Xavier's" in caveat


def test_the_caveat_is_read_from_the_records():
    """Twins trained alike get no caveat; an init that differs is named with both inits, other differences after."""
    from gptviz.training.evaluate import twins_caveat

    alike = {"data": "x", "settings": {"lr": 0.001}}
    assert twins_caveat(alike, dict(alike)) is None
    said = twins_caveat(alike, dict(alike, init="xavier"))
    assert said == (
        "Not trained alike: stage 1 started pre-norm from GPT-2's normal(0, 0.02) random weights and "
        "post-norm from Xavier's, so not every difference is the wiring's."
    )
    said = twins_caveat(alike, {"data": "x", "settings": {"lr": 0.003}, "init": "xavier"})
    assert "post-norm from Xavier's; stage 1: lr 0.001 against 0.003, so" in said


def test_the_caveat_of_twins_trained_in_different_numbers_of_stages_says_so():
    """A twin continued for a second stage: the stages both have are compared (the first's init named) and the
    stage counts are said, not a length error."""
    from gptviz.training.evaluate import twins_caveat

    first = {"data": "x", "settings": {"lr": 0.001}}
    continued = {"data": "x", "settings": {"lr": 0.001}, "continued_from": dict(first)}
    assert twins_caveat(continued, first) == (
        "Not trained alike: the pre-norm model trained in 2 stages, the post-norm one in 1, "
        "so not every difference is the wiring's."
    )
    said = twins_caveat(first, dict(continued, continued_from=dict(first, init="xavier")))
    assert said.startswith("Not trained alike: stage 1 started pre-norm from GPT-2's normal(0, 0.02) random weights")
    assert "post-norm from Xavier's; the pre-norm model trained in 1 stage, the post-norm one in 2, so" in said


@pytest.mark.slow
def test_the_whole_history_and_heads_forming_show_the_same_formed_step(tiny_page):
    """One definition of the step a head formed (snapshots.formed_step): the twins' history table on this page and
    the detector curves on Heads forming name the same step for each twin's induction head."""
    from gptviz.training.snapshots import formed_step, load_snapshots

    names, _ = bundled_twin_models()
    folders = gptviz.model.weights.bundled_models()
    steps = {norm: formed_step(load_snapshots(folders[name]), "induction") for norm, name in names.items()}
    at = tiny_page
    table = next(t.value for t in at.table if "induction head formed" in list(t.value.columns))
    shown = {norm: table.loc[f"{norm}-norm", "induction head formed"] for norm in ("pre", "post")}
    timeline = pagetest.run_page("timeline")
    curves = next(
        f
        for f in pagetest.figures(timeline)
        if "score of every head" in (f["layout"].get("title") or {}).get("text", "")
    )
    marks = {a["text"] for a in curves["layout"]["annotations"] if "formed at step" in a.get("text", "")}
    for norm, (step, layer, head) in steps.items():
        assert shown[norm] == f"step {step:,}"
        assert f"L{layer}H{head} formed at step {step}" in marks
    assert any("Steps count from stage 1's start" in c.value for c in at.caption)
    assert any("steps count from its start" in c.value for c in timeline.caption)
