"""The Heads forming page: the bundled twins' shipped formation snapshots (heads forming in a jump they record),
the page drawing what they hold at the chosen step, a step from a link, and a live run of the "grow an induction
head" scenario read while it trains."""

from __future__ import annotations

import numpy as np
import pytest

from gptviz.app import keys as K
from gptviz.figures import timeline as ft
from gptviz.model.weights import bundled_models
from gptviz.serve.training_jobs import JobRegistry, induction_growth_spec
from gptviz.training.snapshots import formed_step, load_snapshots
from tests.support.pagetest import array, figures, run_page

TWINS = ("shakespeare-pre", "shakespeare-post")


@pytest.fixture(scope="module")
def shipped():
    return {name: load_snapshots(bundled_models()[name]) for name in TWINS}


@pytest.mark.parametrize("name", TWINS)
def test_the_shipped_snapshots_record_the_heads_forming_in_a_jump(shipped, name):
    """Issue 34's bar: the best induction score below 0.1 before the jump and above 0.8 after it, and the loss
    drop inside the same window (the step numbers are in the model card)."""
    snaps = shipped[name]
    best = snaps.score_array()[:, snaps.detector_index("induction")].max(axis=(1, 2))
    steps, loss = np.array(snaps.steps), np.array(snaps.train_loss)
    before = steps[best < 0.1].max()  # the last snapshot before the head formed
    after = steps[best > 0.8].min()  # the first one after
    assert before < after and best[steps < before].max() < 0.1 and best[steps >= after].min() > 0.6
    window = (steps >= before) & (steps <= after)
    assert loss[steps == before][0] - loss[steps == after][0] > 1.5  # nats: the copy loss falls with the head
    assert loss[steps <= before].max() - loss[steps <= before].min() < 0.8  # flat before the window
    assert window.sum() >= 5  # dense snapshots where the model changes fast
    assert snaps.share_recording() < 0.10


@pytest.mark.slow
def test_the_page_draws_what_the_snapshots_hold_at_the_step(shipped):
    pre = shipped["shakespeare-pre"]
    step = pre.steps[len(pre) // 2]
    at = run_page("timeline", **{K.TL_STEP: step})
    assert not at.exception
    i = ft.index_at(pre, step)
    scores = pre.score_array()[i, pre.detector_index("induction")]
    layer, head = np.unravel_index(int(scores.argmax()), scores.shape)
    line = f"step {pre.steps[i]}: best induction head L{layer}H{head} {scores[layer, head]:.2f}"
    assert any(line in m.value for m in at.markdown), [m.value for m in at.markdown][:3]
    grid = figures(at)[0]
    z = array(grid["data"][0]["z"])
    T = len(pre.probes[0].ids)
    expected = pre.pattern(i, 0)[0, 0]  # layer 0, head 0: the grid's top-left panel
    np.testing.assert_allclose(z[:T, :T][np.tril_indices(T)], expected[np.tril_indices(T)], atol=1e-6)
    curves = [f for f in figures(at) if "score of every head" in (f["layout"].get("title") or {}).get("text", "")]
    assert len(curves) == 1
    marked = [s for s in curves[0]["layout"]["shapes"] if s.get("x0") == step and s.get("x1") == step]
    assert marked, "the viewed step is marked on the curves"


@pytest.mark.slow
def test_the_named_heads_open_the_finished_models_unit_page(shipped):
    """Each twin's best head at the step and the heads that formed (snapshots.formed_step) are pills that open the unit
    page on that
    twin (the finished bundled model)."""
    post = shipped["shakespeare-post"]
    step = post.steps[-1]
    at = run_page("timeline", **{K.TL_STEP: step})
    i = ft.index_at(post, step)
    scores = post.score_array()[i, post.detector_index("induction")]
    best = "L{}H{}".format(*np.unravel_index(int(scores.argmax()), scores.shape))
    hits = [formed_step(post, name) for name in K.TIMELINE_DETECTORS]
    want = list(dict.fromkeys([best] + [f"L{h[1]}H{h[2]}" for h in hits if h]))
    group = next(g for g in at.button_group if g.key == K.per_item(K.UNIT_PILLS, "tl", "post-norm"))
    assert group.options == want
    at = group.set_value(want[-1]).run()
    assert at.session_state[K.UNIT] == want[-1] and at.session_state[K.NORM] == "post"
    assert at.session_state[K.MODEL_SOURCE] == K.SOURCE_BUNDLED and at.session_state[K.UNIT_NAV_PENDING]


@pytest.mark.slow
def test_a_step_between_snapshots_shows_the_last_one_before_it(shipped):
    pre = shipped["shakespeare-pre"]
    at = run_page("timeline", **{K.TL_STEP: pre.steps[3] + 1})
    assert at.session_state[K.TL_STEP] <= pre.steps[3] + 1
    step = at.session_state[K.TL_STEP]  # the header names the slider's step, and the snapshot when it differs
    header = f"step {step}:" if step == pre.steps[3] else f"step {step} (its snapshot of step {pre.steps[3]}):"
    assert any(header in m.value for m in at.markdown)


@pytest.mark.slow
def test_the_growth_run_is_read_while_it_trains():
    """A few steps of the scenario at a tiny size: the job's snapshots fill in while it runs, in the file format's
    structure, and the tab draws them."""
    spec = induction_growth_spec(
        ("pre", "post"), seed=0, steps=12, layers=2, d_model=32, block=16, batch=4, snapshot_every=4
    )
    registry = JobRegistry(max_running=1)
    job = registry.start(spec)
    assert job.wait(120) and job.status == "done", job.error
    assert set(job.snapshots) == {"pre", "post"}
    for snaps in job.snapshots.values():
        assert snaps.steps == [1, 4, 8, 12]
        assert snaps.score_array().shape == (4, 4, 2, 4)
        assert all(len(p.ids) <= 16 for p in snaps.probes)


@pytest.mark.slow
def test_the_grow_tab_starts_a_run_and_draws_its_snapshots(monkeypatch):
    from gptviz.app import jobs
    from gptviz.serve import training_jobs

    for key, value in dict(steps=8, layers=2, d_model=32, block=16, batch=4, snapshot_every=4).items():
        monkeypatch.setitem(training_jobs.GROWTH, key, value)
    at = run_page("timeline")
    at.button(key=K.TL_GROW_START).click().run()
    assert not at.exception, at.exception
    # the click's own run shows the run: its progress (a Stop button while it trains); before, nothing showed
    # until the visitor touched the page again
    assert any(p.proto.text.startswith(("Running", "Loading", "Done", "Waiting")) for p in at.get("progress")) or [
        b for b in at.button if b.key == K.TL_GROW_STOP
    ], [b.key for b in at.button]
    job = jobs.training_registry().get(at.session_state[K.TL_GROW_JOB])
    assert job is not None and job.wait(120) and job.status == "done", job.error
    at.run()
    snaps = job.snapshots["pre"]
    assert snaps.steps == [1, 4, 8]
    best = snaps.score_array()[-1, snaps.detector_index("induction")].max()
    assert any("best induction head" in m.value and f"{best:.2f}" in m.value for m in at.markdown)
    assert any("none formed yet" in c.value or "formed at step" in c.value for c in at.caption)


def test_the_header_agrees_with_the_slider_where_a_run_has_no_snapshot(shipped):
    """At the last step (post-norm's 650), pre-norm's last snapshot is older: its header says the slider's step and
    names the snapshot shown, instead of the snapshot's step alone."""
    pre, post = shipped["shakespeare-pre"], shipped["shakespeare-post"]
    last = max(pre.steps[-1], post.steps[-1])
    at = run_page("timeline", **{K.TL_STEP: last})
    headers = [m.value for m in at.markdown if m.value.startswith(("**pre-norm**", "**post-norm**"))]
    for name, snaps in (("pre-norm", pre), ("post-norm", post)):
        want = (
            f"**{name}**, step {last}:"
            if snaps.steps[-1] == last
            else f"**{name}**, step {last} (its snapshot of step {snaps.steps[-1]}):"
        )
        assert any(h.startswith(want) for h in headers), headers
