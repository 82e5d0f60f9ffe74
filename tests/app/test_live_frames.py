"""The live view's frames (gptviz.app.live.wait_for_frame, issue 60): each fragment run waits for tokens the last
frame did not show, draws every token that arrived since in one frame, and the job's end is drawn at once."""

from __future__ import annotations

import threading
import time

import pytest


class Job:
    """A LiveGeneration's surface as live_frames reads it; a thread appends a token every `every` s."""

    def __init__(self, n: int, every: float):
        self.steps, self.n, self.every = [], n, every
        self.prompt, self.settings, self.enc = (1, 2), {"max_new_tokens": n}, None  # enc: the model's tokenizer
        self.stopped, self.error, self.seconds, self.ahead, self.waiting_for_click, self.pace = (
            False,
            None,
            0.0,
            None,
            False,
            None,
        )
        self.started_at, self.finished_at, self.shown = time.perf_counter(), None, 0
        self.contributors = None  # started without explain
        self._done = threading.Event()
        threading.Thread(target=self._write, daemon=True).start()

    def _write(self):
        for i in range(self.n):
            time.sleep(self.every)
            self.steps.append(i)
        self.finished_at = time.perf_counter()
        self._done.set()

    @property
    def running(self):
        return not self._done.is_set()

    def snapshot(self):
        return list(self.steps)

    def wait(self, timeout=None):
        return self._done.wait(timeout)


def frames_of(job, live) -> list[tuple[int, bool]]:
    """What the live fragment's runs draw, run after run (live_fragment's tick without Streamlit)."""
    frames, last = [], {}
    while True:
        if last:
            live.wait_for_frame(job, last)
        started = time.monotonic()
        run = live.generation_view(job)
        frames.append((len(run["steps"]), run["running"]))
        last.update(at=started, cost=time.monotonic() - started, steps=len(run["steps"]))
        if not run["running"]:
            return frames


@pytest.mark.slow  # importing the app's live module (Streamlit) takes about a second
def test_frames_batch_the_tokens_that_arrived_and_the_last_state_is_drawn():
    from gptviz.app import live

    job = Job(n=30, every=0.01)  # 100 tokens/s: several arrive between two frames (DRAW_GAP_S apart)
    frames = frames_of(job, live)
    assert frames[-1] == (30, False)  # the last state, drawn once the job is over
    counts = [c for c, _ in frames]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)  # no frame without news
    assert len(frames) < 30  # tokens came faster than frames: batched
    assert all(running for _, running in frames[:-1])


@pytest.mark.slow
def test_the_jobs_end_wakes_a_frames_wait():
    from gptviz.app import live

    job = Job(n=3, every=0.1)
    started = time.monotonic()
    live.wait_for_frame(job, {"at": started, "cost": 100.0, "steps": 0})  # a 300 s gap after a costly frame
    assert not job.running and time.monotonic() - started < 30


@pytest.mark.slow
def test_a_frame_waits_the_gap_then_for_news():
    from gptviz.app import live

    job = Job(n=3, every=0.3)
    started = time.monotonic()
    live.wait_for_frame(job, {"at": started, "cost": 0.0, "steps": 0})
    assert time.monotonic() - started >= live.DRAW_GAP_S and len(job.steps) >= 1  # the first token: news
    shown = len(job.steps)
    started = time.monotonic()
    live.wait_for_frame(job, {"at": started, "cost": 0.05, "steps": shown})
    assert time.monotonic() - started >= live.FRAME_COST_X * 0.05  # a costlier frame: a longer gap
    assert job.wait(30)


class AskedJob:
    """A running job at `pace` that records how long each of the frame's waits asks to sleep (and sleeps none)."""

    def __init__(self, pace):
        self.pace, self.steps, self.asked, self.running = pace, [0], [], True

    def wait(self, timeout=None):
        self.asked.append(timeout)
        return False


@pytest.mark.slow
@pytest.mark.parametrize("pace", [None, 20.0, 5.0, 0.0])
def test_the_free_pace_spaces_its_frames_wider(pace):
    """At the free pace a frame comes FREE_DRAW_GAP_S after the last at the soonest; at a set pace (or by clicks)
    DRAW_GAP_S; a frame that cost more waits FRAME_COST_X times its cost either way."""
    from gptviz.app import live

    gap = live.FREE_DRAW_GAP_S if pace is None else live.DRAW_GAP_S
    assert live.FREE_DRAW_GAP_S > live.DRAW_GAP_S
    job = AskedJob(pace)
    live.wait_for_frame(job, {"at": 100.0, "cost": 0.0, "steps": 5}, clock=lambda: 100.0)
    assert job.asked[0] == pytest.approx(gap)
    job = AskedJob(pace)
    live.wait_for_frame(job, {"at": 100.0, "cost": 1.0, "steps": 5}, clock=lambda: 100.0)
    assert job.asked[0] == pytest.approx(live.FRAME_COST_X * 1.0)
