"""Generation in a background thread (gptviz.serve.live_generation): the same tokens as the library, Stop before the
next token, a closed session stops it, the server's slots bound how many run, bad input fails before a thread."""

from __future__ import annotations

import threading
import time

import pytest
from streamlit.testing.v1 import AppTest

from gptviz import generate
from gptviz.serve.live_generation import GenerationSlots, LiveGeneration
from tests.support.models import build

PROMPT = [5, 17, 3, 42]
GREEDY = dict(max_new_tokens=6, temperature=0.0, top_k=None, top_p=None, seed=0)


class Gate:
    """on_token for a LiveGeneration: holds its thread after token `at` until released."""

    def __init__(self, at: int):
        self.at, self.count = at, 0
        self.reached, self.release = threading.Event(), threading.Event()

    def __call__(self):
        self.count += 1
        if self.count == self.at:
            self.reached.set()
            assert self.release.wait(30)


def test_it_writes_what_generate_writes_with_each_steps_attention():
    model = build(seed=3)
    job = LiveGeneration(model, PROMPT, GREEDY)
    assert job.wait(30) and not job.running and not job.stopped and job.error is None
    assert [s.token_id for s in job.steps] == generate(model, PROMPT, 6, temperature=0.0)[len(PROMPT) :]
    first = job.steps[0]
    assert first.attention.shape == (model.config.n_layers, model.config.n_heads, len(PROMPT))
    assert job.prompt == tuple(PROMPT) and job.settings == GREEDY


def test_stop_takes_effect_before_the_next_token():
    gate = Gate(at=3)
    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 12}, on_token=gate)
    assert gate.reached.wait(30) and job.running
    job.stop()
    gate.release.set()
    assert job.wait(30)
    assert job.stopped and len(job.steps) == 3


def test_stop_can_keep_only_what_the_page_had_shown():
    gate = Gate(at=5)
    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 12}, on_token=gate)
    assert gate.reached.wait(30) and len(job.steps) == 5
    job.stop(keep=2)  # the page had drawn 2 steps when Stop was pressed; the model had written 5
    gate.release.set()
    assert job.wait(30) and job.stopped
    full = generate(build(seed=3), PROMPT, 12, temperature=0.0)[len(PROMPT) :]
    assert [s.token_id for s in job.steps] == full[:2]
    with pytest.raises(ValueError, match="keep"):
        job.stop(keep=-1)


def test_keep_does_not_cut_a_generation_that_had_already_finished():
    job = LiveGeneration(build(seed=3), PROMPT, GREEDY)
    assert job.wait(30)
    job.stop(keep=1)
    assert not job.stopped and len(job.steps) == 6


def test_a_closed_session_stops_it():
    alive = threading.Event()
    alive.set()
    gate = Gate(at=2)
    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 12}, on_token=gate, alive=alive.is_set)
    assert gate.reached.wait(30)
    alive.clear()  # the browser went away
    gate.release.set()
    assert job.wait(30) and job.stopped and len(job.steps) == 2


def test_the_snapshot_is_a_copy_the_thread_cannot_grow():
    gate = Gate(at=2)
    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 5}, on_token=gate)
    assert gate.reached.wait(30)
    seen = job.snapshot()
    gate.release.set()
    assert job.wait(30)
    assert len(seen) == 2 and len(job.steps) == 5 and seen == job.steps[:2]


def test_the_servers_slots_bound_how_many_run_at_once():
    slots = GenerationSlots(1)
    gate = Gate(at=1)
    first = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 4}, slots=slots, on_token=gate)
    assert gate.reached.wait(30)
    with pytest.raises(RuntimeError, match="already running 1 generation"):
        LiveGeneration(build(seed=3), PROMPT, GREEDY, slots=slots)
    gate.release.set()
    assert first.wait(30)
    second = LiveGeneration(build(seed=3), PROMPT, GREEDY, slots=slots)  # the slot is free again
    assert second.wait(30) and len(second.steps) == 6
    with pytest.raises(ValueError, match="at least one"):
        GenerationSlots(0)


@pytest.mark.parametrize(
    "prompt, settings, match",
    [
        ([], GREEDY, "no tokens"),
        ([5, 10**6], GREEDY, "outside the vocabulary"),
        (PROMPT, {**GREEDY, "top_p": 1.5}, "top_p"),
        (PROMPT, {**GREEDY, "max_new_tokens": -1}, "max_new_tokens"),
    ],
)
def test_bad_input_fails_before_a_thread_or_a_slot(prompt, settings, match):
    slots = GenerationSlots(1)
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match=match):
        LiveGeneration(build(seed=3), prompt, settings, slots=slots)
    assert not [t for t in threading.enumerate() if t not in before and t.name == "gptviz-generation"]
    assert slots.running == 0 and slots.waiting == 0  # the slot was never taken


def test_an_error_inside_the_thread_is_kept_for_the_page():
    model = build(seed=3)

    def broken(*_):
        raise RuntimeError("out of memory")

    job = LiveGeneration(model, PROMPT, GREEDY, on_token=broken)
    assert job.wait(30) and job.error == "RuntimeError: out of memory" and len(job.steps) == 1


def test_a_session_has_one_generation_and_leaving_its_page_stops_it():
    def script():
        import threading

        import streamlit as st

        from gptviz.app import keys as K
        from gptviz.app import live, model_service

        spec = model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "pre")
        model = model_service.load_model(spec)
        hold = threading.Event()
        settings = dict(max_new_tokens=50, temperature=1.0, top_k=None, top_p=None, seed=0)
        first = live.start_generation(spec, model, [1, 2, 3], settings, "attention")
        live.stop_generation(unless_page="attention")  # still on its page: it goes on
        alive_on_its_page = first.running or len(first.steps) == 50
        second = live.start_generation(spec, model, [1, 2, 3], settings, "attention")  # stops the first
        first_done = first.wait(10)
        live.stop_generation(unless_page="generation")  # another page: it stops
        second.wait(10)
        hold.set()
        shown = live.stored_generation(spec, [1, 2, 3], "attention") is second
        other_page = live.stored_generation(spec, [1, 2, 3], "generation")
        other_prompt = live.stored_generation(spec, [1, 2], "attention")
        st.text(
            f"{alive_on_its_page} {first_done} {second.stopped or len(second.steps) == 50} {shown} "
            f"{other_page is None} {other_prompt is None}"
        )

    at = AppTest.from_function(script, default_timeout=60).run()
    assert not at.exception
    assert at.text[0].value == "True True True True True True"


def test_the_live_view_records_what_it_drew_for_stop_to_keep():
    from gptviz.app import live

    gate = Gate(at=4)
    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 12}, on_token=gate)
    assert gate.reached.wait(30)
    view = live.generation_view(job)  # a redraw while it runs
    assert view["running"] and job.shown == len(view["steps"]) == 4
    job.stop(keep=job.shown)  # what live.stop_generation does
    gate.release.set()
    assert job.wait(30) and len(job.steps) == 4
    assert len(live.generation_view(job)["steps"]) == 4 and job.shown == 4  # a finished view records nothing new


def test_one_address_cannot_hold_every_slot_and_the_rest_wait_in_line():
    """One visitor with four tabs re-pressing Generate held every slot, and a victim was refused 18 times in 90 s.
    Now an address runs or waits for at most `per_address`, and when every slot is busy a request waits in a
    first-come line (up to `queue`) instead of being refused."""
    slots = GenerationSlots(2, per_address=2, queue=2)
    mine = [slots.enter("10.0.0.1"), slots.enter("10.0.0.1")]
    assert all(t.granted for t in mine)
    with pytest.raises(RuntimeError, match="your address already has 2 generations running or waiting"):
        slots.enter("10.0.0.1")
    victim, third = slots.enter("10.0.0.2"), slots.enter("10.0.0.3")
    assert not victim.granted and (victim.ahead(), third.ahead()) == (0, 1)
    with pytest.raises(RuntimeError, match="already running 2 generations with 2 waiting"):
        slots.enter("10.0.0.4")  # the line is full
    mine[0].leave()
    assert victim.wait(1) and third.ahead() == 0 and not third.granted  # first come, first served
    third.leave()  # stepping out of the line frees its place
    assert slots.waiting == 0 and slots.running == 2
    for ticket in (mine[1], victim):
        ticket.leave()
    assert slots.running == 0


def test_a_waiting_generation_starts_when_a_slot_frees_and_stop_leaves_the_line():
    slots = GenerationSlots(1, queue=2)
    gate = Gate(at=1)
    first = LiveGeneration(
        build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 4}, slots=slots, on_token=gate, address="a"
    )
    assert gate.reached.wait(30)
    waiting = LiveGeneration(build(seed=3), PROMPT, GREEDY, slots=slots, address="b")
    leaving = LiveGeneration(build(seed=3), PROMPT, GREEDY, slots=slots, address="c")
    assert (waiting.ahead, leaving.ahead) == (0, 1) and waiting.running and not waiting.steps
    leaving.stop()
    assert leaving.wait(5) and leaving.stopped and not leaving.steps and waiting.ahead == 0
    gate.release.set()
    assert first.wait(30) and waiting.wait(30)
    assert len(waiting.steps) == GREEDY["max_new_tokens"] and waiting.ahead is None
    assert [s.token_id for s in waiting.steps] == generate(build(seed=3), PROMPT, 6, temperature=0.0)[len(PROMPT) :]
    assert slots.running == 0 and slots.waiting == 0


def test_no_more_than_the_limit_run_at_once_under_concurrent_enter_leave_and_cache_clears():
    """Issue 31: a page once showed 5 generations running against a limit of 4. Hammer the server's slots from
    many threads (entering, running, leaving the line early) while Streamlit's caches are cleared: no more than
    `limit` tickets are ever granted and not yet given back, and the slots are still the same object."""
    import random

    import streamlit as st

    from gptviz.app.jobs import generation_slots

    slots = generation_slots()
    limit = slots.limit
    inside, most, lock, errors = [0], [0], threading.Lock(), []

    def visitor(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            try:
                ticket = slots.enter(f"10.0.0.{seed}")
            except RuntimeError:
                continue
            if rng.random() < 0.2 or not ticket.wait(5):  # some step out of the line before their turn
                ticket.leave()
                continue
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(rng.random() * 0.002)
            with lock:
                inside[0] -= 1
            ticket.leave()

    threads = [threading.Thread(target=visitor, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for _ in range(5):
        st.cache_resource.clear()
        st.cache_data.clear()
        if generation_slots() is not slots:
            errors.append("the slots were replaced by a cache clear")
        time.sleep(0.01)
    for t in threads:
        t.join(60)
    assert not errors
    assert 1 <= most[0] <= limit
    assert slots.running == 0 and slots.waiting == 0


@pytest.mark.slow
def test_a_paced_generation_releases_tokens_at_its_pace_and_reports_the_models_own_time():
    import time

    started = time.perf_counter()
    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 5}, pace=10)
    assert job.wait(30) and not job.stopped
    took = time.perf_counter() - started
    assert took >= 0.4  # 4 gaps of 0.1 s between 5 tokens
    assert job.seconds < took - 0.3  # the waits are not the model's time
    assert [s.token_id for s in job.steps] == generate(build(seed=3), PROMPT, 5, temperature=0.0)[len(PROMPT) :]


@pytest.mark.slow
def test_paced_by_clicks_it_writes_one_token_per_advance_and_can_be_let_go():
    import time

    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 6}, pace=0)
    deadline = time.monotonic() + 30
    while not job.waiting_for_click and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert len(job.steps) == 1 and job.running  # the first token comes with Generate, then it waits
    job.advance()
    while len(job.steps) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert len(job.steps) == 2 and job.waiting_for_click
    job.set_pace(None)  # back to the model's own speed
    assert job.wait(30) and len(job.steps) == 6 and not job.stopped


def test_stop_ends_a_generation_waiting_for_a_click():
    job = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 6}, pace=0)
    import time

    deadline = time.monotonic() + 30
    while not job.waiting_for_click and time.monotonic() < deadline:
        time.sleep(0.01)
    job.stop()
    assert job.wait(5) and job.stopped and len(job.steps) == 1


@pytest.mark.parametrize("pace", [-1, float("nan"), 1e6, "fast", True])
def test_a_bad_pace_fails_before_a_thread(pace):
    with pytest.raises(ValueError, match="pace"):
        LiveGeneration(build(seed=3), PROMPT, GREEDY, pace=pace)


def _torch_threads_of_a_new_thread() -> int:
    import torch

    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    return seen[0]


def test_a_generation_on_one_thread_leaves_later_threads_the_servers_count(monkeypatch):
    """torch.set_num_threads also sets the count of every thread started later: a one-thread generation must not
    leave the pages' script threads (each run starts one) on a single thread once it is over."""
    import torch

    from gptviz.serve import live_generation

    SERVER_TORCH_THREADS = 2  # a 2-core server's default (the tests' own is one thread: conftest.py)
    monkeypatch.setattr(live_generation, "SERVER_TORCH_THREADS", SERVER_TORCH_THREADS)
    torch.set_num_threads(SERVER_TORCH_THREADS)
    gate = Gate(at=2)
    job = LiveGeneration(build(seed=3), PROMPT, GREEDY, on_token=gate, threads=1)
    assert gate.reached.wait(30)
    during = _torch_threads_of_a_new_thread()
    gate.release.set()
    assert job.wait(30) and job.error is None
    assert during == 1  # a page run started mid-generation takes one thread, on purpose (live_generation)
    assert _torch_threads_of_a_new_thread() == SERVER_TORCH_THREADS  # ...and, after it, the server's count again
    torch.set_num_threads(1)


@pytest.mark.slow  # importing the app's live module (Streamlit) takes about a second
def test_the_first_redraw_waits_for_the_first_token_but_not_longer():
    # Generate's run draws the live view at once: without a token yet, the first one showed only at the next redraw
    # (LIVE_REDRAW_S later); now that draw waits for it, and no longer than its bound
    from gptviz.app import live

    class Job:
        running, ahead = True, None

        def __init__(self, steps):
            self.steps = steps

    job = Job([])
    threading.Timer(0.05, lambda: job.steps.append("token")).start()
    started = time.perf_counter()
    live.wait_for_first_token(job, most=5.0)
    assert job.steps and time.perf_counter() - started < 2.0
    started = time.perf_counter()
    live.wait_for_first_token(Job([]), most=0.05)  # no token comes: back after its bound
    assert time.perf_counter() - started < 1.0
    waiting = Job([])
    waiting.ahead = 2  # in line for a slot: the page says so at once
    started = time.perf_counter()
    live.wait_for_first_token(waiting, most=5.0)
    assert time.perf_counter() - started < 1.0


def _nice_of(job: LiveGeneration) -> int:
    import os

    return os.getpriority(os.PRIO_PROCESS, job._thread.native_id)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_lone_generation_keeps_its_priority_and_yields_once_another_runs_beside_it():
    # alone, a generation runs at the page's priority (issue 60: niced on a busy machine the bundled model wrote
    # 2.2x slower than the engine); a second generation beside it sends both to the background (issue 57)
    import os

    from gptviz.serve.live_generation import BACKGROUND_NICE

    base = os.getpriority(os.PRIO_PROCESS, 0)
    slots = GenerationSlots(2)
    gate1, gate2 = Gate(at=1), Gate(at=1)
    first = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 3}, slots=slots, on_token=gate1)
    assert gate1.reached.wait(30)
    assert _nice_of(first) == base
    second = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 3}, slots=slots, on_token=gate2)
    assert gate2.reached.wait(30)
    assert _nice_of(second) == max(base, BACKGROUND_NICE)  # it started beside the first
    gate1.release.set()
    deadline = time.monotonic() + 30
    while first._thread.is_alive() and not first._niced and time.monotonic() < deadline:
        time.sleep(0.01)
    assert first._niced  # its next token found the second one running
    gate2.release.set()
    assert first.wait(30) and second.wait(30)
    assert len(first.steps) == len(second.steps) == 3
    alone = LiveGeneration(build(seed=3), PROMPT, {**GREEDY, "max_new_tokens": 2}, slots=slots)
    assert alone.wait(30) and not alone._niced
