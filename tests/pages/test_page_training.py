"""AppTest for the Train page: a tiny run started from the form, finished in the background, then offered
to the other pages and as a download; a long run stopped from the page."""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest

from gptviz.app import jobs, sidebar
from gptviz.app import keys as K
from gptviz.model.generate import generate
from gptviz.model.tokenizer import decode, get_tokenizer
from gptviz.serve.training_jobs import DONE, STOPPED
from tests.support import pagetest
from tests.support.pagetest import APP
from tests.support.small_configs import TRAIN_FORM

REGISTRY = jobs.training_registry()
TINY = TRAIN_FORM


def open_page(**state) -> AppTest:
    return pagetest.open_page("app_pages/training.py", **state)


def start(at: AppTest) -> None:
    next(b for b in at.button if b.label == "Start training").click().run()
    assert not at.exception, at.exception


@pytest.mark.slow
def test_a_tiny_run_from_the_page(monkeypatch):
    at = open_page(**TINY)
    assert any("No run yet" in i.value for i in at.info)
    start(at)
    job = REGISTRY.get(at.session_state[K.TRAIN_JOB])
    assert job is not None and set(job.spec.configs) == {"pre", "post"}
    assert job.spec.configs["post"].n_layers == 1 and job.spec.settings.steps == 4
    assert job.wait(120) and job.status == DONE, job.error
    at.run()
    assert not at.exception, at.exception
    assert any("Finished after 4 of 4 steps" in s.value for s in at.success)
    # the trained models are offered to the other pages, by run id
    run_ids = [f"{job.id} {n}-norm (1L d32)" for n in ("pre", "post")]
    store = jobs.trained_models()
    assert all(store.get(r) is job.models[r.split()[1][:-5]] for r in run_ids)
    assert job.owner is not None and set(run_ids) <= set(store.of(job.owner))  # kept for the session that trained it
    # the samples are the models' own generations from the sidebar prompt
    ids = get_tokenizer().encode(sidebar.DEFAULT_PROMPT)[-16:]
    codes = [c.value for c in at.code]
    for model in job.models.values():
        assert decode(generate(model, ids, 40, temperature=0.8, top_k=40, seed=0)[len(ids) :]) in codes
    data_buttons = [b for b in at.get("download_button") if b.proto.label != "Interactive HTML"]
    assert len(data_buttons) == 2  # beside each figure's own HTML download
    # "Open in the other pages" selects the run in the shared sidebar
    at.button(key=f"train_open_{job.id}_post").click().run()
    assert not at.exception, at.exception
    assert at.session_state[K.MODEL_SOURCE] == K.SOURCE_TRAINED
    assert at.session_state[K.TRAINED_RUN] == run_ids[1]
    # "trained in this session" is true: another visitor's session does not see the run, even when asking for it
    # (AppTest gives every AppTest the same session id, so the other visitor's is set here)
    monkeypatch.setattr(jobs, "session_id", lambda: "another visitor")
    other = AppTest.from_file(APP, default_timeout=120)
    other.session_state[K.MODEL_SOURCE] = K.SOURCE_TRAINED
    other.session_state[K.TRAINED_RUN] = run_ids[1]
    other.run()
    assert not other.exception, other.exception
    assert K.SOURCE_TRAINED not in other.selectbox(key=K.MODEL_SOURCE).options
    assert other.session_state[K.MODEL_SPEC].source != K.SOURCE_TRAINED


def test_scenario_buttons_fill_the_form():
    at = open_page(**TINY)
    at.button(key="train_scenario_Deep and narrow, no warmup").click().run()
    assert not at.exception
    assert (at.session_state[K.TRAIN_LAYERS], at.session_state[K.TRAIN_WARMUP], at.session_state[K.TRAIN_CLIP]) == (
        12,
        0,
        0.0,
    )
    assert at.slider(key=K.TRAIN_LAYERS).value == 12


@pytest.mark.slow
def test_the_caption_under_the_scenarios_describes_the_one_the_form_holds():
    """Under "Quick start" the caption described the deep-and-narrow scenario."""
    at = open_page(**TINY)
    captions = " ".join(c.value for c in at.caption)
    assert "Quick start: 2 layers" in captions and "Deep and narrow" not in captions
    at.button(key="train_scenario_Deep and narrow, no warmup").click().run()
    captions = " ".join(c.value for c in at.caption)
    assert "Deep and narrow, no warmup: 12 layers" in captions and "Quick start" not in captions


@pytest.mark.slow
def test_stop_from_the_page():
    at = open_page(**dict(TINY, train_steps=5000, train_wiring="pre"))
    start(at)
    job = REGISTRY.get(at.session_state[K.TRAIN_JOB])
    deadline = time.monotonic() + 60
    while job.snapshot().steps_done < 2:
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)
    at.run()
    at.button(key=K.TRAIN_STOP).click().run()
    assert not at.exception, at.exception
    assert job.wait(60) and job.status == STOPPED
    at.run()
    assert any(s.value.startswith("Stopped after") for s in at.success)
    assert job.snapshot().steps_done < 5000


@pytest.mark.slow
def test_the_form_keeps_its_values_after_leaving_the_page_and_says_which_wiring_it_trains():
    at = open_page(**TINY)
    at.session_state[K.TRAIN_LAYERS] = 5
    at.session_state[K.TRAIN_WIRING] = "pre"
    at.session_state[K.NORM] = "post"
    at.run()
    at.switch_page("app_pages/parameters.py").run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception
    assert at.slider(key=K.TRAIN_LAYERS).value == 5 and at.radio(key=K.TRAIN_WIRING).value == "pre"
    assert any(
        "The sidebar's LayerNorm placement is post-norm; this run trains pre-norm" in c.value for c in at.caption
    )


@pytest.mark.slow
def test_coming_back_shows_the_running_run_not_an_older_stopped_one():
    at = open_page(**dict(TINY, train_steps=5000, train_wiring="pre"))
    start(at)
    first = REGISTRY.get(at.session_state[K.TRAIN_JOB])
    first.request_stop()
    assert first.wait(60) and first.status == STOPPED
    at.run()
    start(at)  # a second run, still running
    second = REGISTRY.get(at.session_state[K.TRAIN_JOB])
    assert second.id != first.id and not second.finished
    at.switch_page("app_pages/parameters.py").run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception, at.exception
    assert at.subheader[0].value.startswith(f"{second.id}:")
    assert at.selectbox(key=K.TRAIN_RUN_PICK).value == second.id
    at.selectbox(key=K.TRAIN_RUN_PICK).set_value(first.id).run()  # the older run, on request
    assert not at.exception, at.exception
    assert at.subheader[0].value.startswith(f"{first.id}:")
    if first.snapshot().steps_done == 0:  # stopped at once, as here usually: the page says so instead of failing
        assert any("before its first step" in i.value for i in at.info)
    else:
        assert any(s.value.startswith("Stopped after") for s in at.success)
    assert at.number_input(key=K.TRAIN_STEPS).value == 5000  # the form kept its values too
    second.request_stop()
    assert second.wait(60)


WARMUP_SMALL = dict(layers=2, width=32, heads=2, lr=1e-2, warmup=4, steps=12, batch_size=2, block=8, seeds=2)


@pytest.mark.slow
def test_the_warmup_scenario_shows_what_the_library_computes(monkeypatch):
    """The page's outcome line and loss bands are gptviz.training.warmup's own, on the same (here tiny) scenario."""
    import numpy as np

    from gptviz.serve.training_jobs import corpus_tokens
    from gptviz.training import warmup

    small = warmup.Scenario(**WARMUP_SMALL)
    monkeypatch.setattr(warmup, "PAGE_SCENARIO", small)
    at = open_page(**TINY)
    caption = next(c for c in at.caption if c.value.startswith("Post-norm with and without warmup"))
    assert f"{len(small.run_names())} runs in the background" in caption.value
    assert f"peak lr {small.lr:g}, AdamW betas (0.9, {small.beta2:g})" in caption.help
    at.button(key=K.TRAIN_WARMUP_RUN).click().run()
    assert not at.exception, at.exception
    job = REGISTRY.get(at.session_state[K.TRAIN_WARMUP_JOB])
    assert job is not None and job.scenario == small
    assert job.wait(120) and job.status == DONE, job.error
    at.run()
    assert not at.exception, at.exception
    expected = warmup.run_scenario(small, corpus_tokens())
    baseline = warmup.frequency_baseline(corpus_tokens())
    out = warmup.outcome(expected, baseline)
    shown = [m.value for m in at.markdown if m.value.startswith("**Loss over steps")]
    assert shown == [f"**{out.sentence}** {warmup.baseline_line(out, baseline)} {out.verdict}"]
    losses = next(
        f
        for f in pagetest.figures(at)
        if f["layout"]["yaxis"].get("title", {}).get("text", "").startswith("training loss, mean ± sd")
    )
    means = {t["name"]: pagetest.array(t["y"]) for t in losses["data"] if t.get("mode") == "lines+markers"}
    reference = [t for t in losses["data"] if t.get("name", "").startswith("frequency-only loss")]
    assert [pagetest.array(t["y"]).tolist() for t in reference] == [pytest.approx([baseline, baseline])]
    assert set(means) == set(warmup.ARMS)
    for arm in warmup.ARMS:
        np.testing.assert_allclose(means[arm], warmup.mean_band(expected, arm)[0], rtol=1e-6)
    # one heatmap per arm, every one on the same colour scale
    heatmaps = {
        t["name"] if "name" in t else f["layout"]["annotations"][0]["text"]: t
        for f in pagetest.figures(at)
        for t in f["data"]
        if t["type"] == "heatmap"
    }
    assert set(heatmaps) == set(warmup.ARMS)
    grids = {arm: warmup.ffn_grad_grid(expected, arm) for arm in warmup.ARMS}
    lo, hi = (min(np.log10(g).min() for g in grids.values()), max(np.log10(g).max() for g in grids.values()))
    for arm, trace in heatmaps.items():
        np.testing.assert_allclose(pagetest.array(trace["z"]), np.log10(grids[arm]), rtol=1e-5)
        assert trace["zmin"] == pytest.approx(lo) and trace["zmax"] == pytest.approx(hi)
