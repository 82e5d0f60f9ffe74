"""Generation that runs beside the page instead of inside its script run.

The page starts a LiveGeneration and redraws what it has produced so far at a steady rate (a fragment with
run_every), so the model runs at the library's speed whatever drawing costs, and a widget change (layer, head,
tab, colour scale) redraws without stopping it. Stop ends it before the next token and can keep only the
steps the page had shown (`stop(keep=...)`), so the text stops where the reader saw it stop.

Bounded: a session holds at most one (starting another stops the first), the server runs at most
`GenerationSlots.limit` at once, and each one stops by itself when `alive()` turns false (its browser session
closed) or its owner asks it to. `threads` sets torch's CPU threads for the generation's own thread only.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import torch

from .generate import StepSummary, step_summary, stream
from .model import GPT


# The generation thread releases the GIL inside every torch op and must take it back after each; while a page's
# script runs, Python's default 5 ms switch interval makes it wait up to that long each time (a forward pass has
# about a hundred ops). A shorter interval lets it back in sooner; the script loses little.
GIL_SWITCH_S = 0.0005


class GenerationSlots:
    """How many generations the server runs at once; `take()` is False when every slot is in use."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"need at least one generation slot, got {limit}")
        self.limit = limit
        self._free = threading.BoundedSemaphore(limit)

    def take(self) -> bool:
        return self._free.acquire(blocking=False)

    def give(self) -> None:
        self._free.release()


class LiveGeneration:
    """One generation in a background thread: `steps` grows as tokens arrive (a list only this thread appends
    to; readers take `snapshot()`), `stop()` ends it before the next token, `running` is False once it is over
    (finished, stopped, failed: `error`, or abandoned: `alive()` false).

    settings: max_new_tokens, temperature, top_k, top_p, seed and stream's other options; they and the prompt
    are checked here, before the thread starts (ValueError)."""

    def __init__(self, model: GPT, prompt_ids, settings: dict, *, owner: str = "", slots: GenerationSlots | None = None,
                 alive: Callable[[], bool] = lambda: True, on_token: Callable[[], None] | None = None,
                 threads: int | None = None):
        records = stream(model, list(prompt_ids), attention=True, **settings)  # checks prompt and settings now
        self.prompt = tuple(int(i) for i in prompt_ids)
        self.settings = dict(settings)
        self.owner = owner
        self.steps: list[StepSummary] = []
        self.error: str | None = None
        self.stopped = False          # ended by stop() or by its session going away, not by reaching the end
        self.shown = 0                # steps the page has drawn so far (set by its live view)
        self._keep: int | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self.started_at = self.finished_at = None  # time.perf_counter() at the thread's start and end
        self._slots, self._alive, self._on_token, self._threads = slots, alive, on_token, threads
        if slots is not None and not slots.take():
            raise RuntimeError(f"the server is already running {slots.limit} generations; try again in a moment")
        if sys.getswitchinterval() > GIL_SWITCH_S:
            sys.setswitchinterval(GIL_SWITCH_S)  # process-wide, once
        self._thread = threading.Thread(target=self._run, args=(records,), name="gptviz-generation", daemon=True)
        self._thread.start()

    def _run(self, records) -> None:
        self.started_at = time.perf_counter()
        if self._threads:
            # torch's intra-op thread count is per calling thread (OpenMP): this sets it for this generation only.
            # On a server whose cores are shared with the script, the browser and other sessions, more than one
            # thread per small-model generation makes OpenMP's threads wait on each other (a 64-token stream on
            # the bundled model ran at 10 tokens/s with two threads beside a busy process, 149 with one).
            torch.set_num_threads(self._threads)
        try:
            for record in records:
                if self._stop.is_set() or not self._alive():
                    self.stopped = True
                    break
                self.steps.append(step_summary(record))
                if self._on_token is not None:
                    self._on_token()
        except Exception as err:  # shown on the page; the thread must not die silently
            self.error = f"{type(err).__name__}: {err}"
        finally:
            if self.stopped and self._keep is not None:
                del self.steps[self._keep:]  # before _done: a reader that sees it over sees the kept steps
            self.finished_at = time.perf_counter()
            if self._slots is not None:
                self._slots.give()
            self._done.set()

    @property
    def seconds(self) -> float | None:
        """How long the model took for the steps so far (to its end once it is over), None before it starts."""
        if self.started_at is None:
            return None
        return (self.finished_at or time.perf_counter()) - self.started_at

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def stop(self, keep: int | None = None) -> None:
        """End it before the next token. `keep`: keep only the first `keep` steps (what the page showed when
        Stop was pressed: the model runs ahead of the redraws, and the text must not jump on after the click)."""
        if keep is not None:
            if not isinstance(keep, int) or keep < 0:
                raise ValueError(f"keep must be a whole number of steps >= 0, got {keep!r}")
            self._keep = keep
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until it is over (True) or `timeout` seconds pass (False)."""
        return self._done.wait(timeout)

    def snapshot(self) -> list[StepSummary]:
        """The steps so far, as a list of their own (the thread may append while the page draws)."""
        return self.steps[:]
