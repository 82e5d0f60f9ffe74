"""The live view's frames (gptviz.app.live.live_frames, issue 60): within one fragment run it redraws as tokens
arrive, every token since the last frame in one redraw, and the moment the job is over it draws the last state."""
from __future__ import annotations

import threading
import time

import pytest


class Job:
    """A LiveGeneration's surface as live_frames reads it; a thread appends a token every `every` s."""

    def __init__(self, n: int, every: float):
        self.steps, self.n, self.every = [], n, every
        self.prompt, self.settings = (1, 2), {"max_new_tokens": n}
        self.stopped, self.error, self.seconds, self.ahead, self.waiting_for_click, self.pace = False, None, 0.0, None, \
            False, None
        self.started_at, self.finished_at, self.shown = time.perf_counter(), None, 0
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


@pytest.mark.slow  # importing the app's live module (Streamlit) takes about a second
def test_frames_batch_the_tokens_that_arrived_and_the_end_is_drawn_at_once():
    from gptviz.app import live
    job = Job(n=30, every=0.01)  # 100 tokens/s: several arrive between two frames (DRAW_GAP_S apart)
    frames = []
    started = time.monotonic()
    last = live.live_frames(job, lambda run: frames.append((len(run["steps"]), run["running"])), slice_s=60.0)
    assert time.monotonic() - started < 30  # it returned when the job ended, not at the slice's end
    assert last["running"] is False and len(last["steps"]) == 30
    assert frames[-1] == (30, False)            # the last state, drawn once the job is over
    counts = [c for c, _ in frames]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)  # no frame without news
    assert len(frames) < 30                      # tokens came faster than frames: batched
    assert all(running for _, running in frames[:-1])


@pytest.mark.slow
def test_a_slice_ends_while_the_job_runs_and_the_page_runs_once_first():
    from gptviz.app import live
    job = Job(n=5, every=0.5)
    frames = []
    last = live.live_frames(job, lambda run: frames.append(len(run["steps"])), slice_s=0.0)  # the page's own run
    assert len(frames) == 1 and last["running"]      # one frame, then the page's other parts
    last = live.live_frames(job, lambda run: frames.append(len(run["steps"])), slice_s=0.3)
    assert last["running"] and job.running          # the slice ended first: the next run draws on
    assert job.wait(30)
    last = live.live_frames(job, lambda run: frames.append(len(run["steps"])), slice_s=5.0)
    assert not last["running"] and frames[-1] == 5


@pytest.mark.slow
def test_each_frame_keys_its_elements_apart():
    # Streamlit allows a key once a run; frame n > 0 of a live run suffixes it (CSS matches the prefix)
    from gptviz.app import display
    assert display.frame_key("gv_mono_next") == "gv_mono_next"
    with display.frame(3):
        assert display.frame_key("gv_mono_next") == "gv_mono_next_f3"
    assert display.frame_key("gv_mono_next") == "gv_mono_next"
