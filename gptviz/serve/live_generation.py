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

import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext

import torch

from ..methods.graph_direct import direct_hooks
from ..model.generate import StepSummary, step_summary, stream
from ..model.model import GPT
from ..model.tokenizer import tokenizer_for
from .live_contributors import LiveContributors

# The generation thread releases the GIL inside every torch op and must take it back after each; while a page's
# script runs, Python's default 5 ms switch interval makes it wait up to that long each time (a forward pass has
# about a hundred ops). A shorter interval lets it back in sooner; the script loses little.
GIL_SWITCH_S = 0.0005
# A generation paced one token per click stops by itself when no click comes for this long: it holds a server slot.
STEP_WAIT_S = 600.0

# Background work (generations, training runs) yields the CPU to the threads that serve pages: on a server with
# fewer cores than busy threads, a visitor's page switch waited behind four other visitors' generations, several times
# as long as alone (docs/benchmarks-history.md, "Hostile load"; `python -m benchmarks hostile` replays it). Linux sets
# a thread's nice value per thread.
BACKGROUND_NICE = 10

# torch's CPU thread count as the process started (recorded at import, before any thread changes it).
# torch.set_num_threads sets the calling thread's count and also the count every thread started later takes: a
# background thread that sets its own must put this back for them (the threads already running keep theirs). A page's
# script thread started while a one-thread generation runs takes one thread too, and that is kept on purpose: beside
# busy threads on a shared CPU, two OpenMP threads wait on each other (page switches under a four-generation load
# took about twice as long with the server's two threads restored in every page run; `python -m benchmarks hostile`).
SERVER_TORCH_THREADS = torch.get_num_threads()


@contextmanager
def torch_threads(n: int):
    """Run the block on `n` torch threads, then give threads started later the server's count again."""
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(SERVER_TORCH_THREADS)


def run_in_background() -> None:
    """Lower the calling thread's CPU priority to BACKGROUND_NICE (Linux; elsewhere, or when refused, nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(BACKGROUND_NICE, os.getpriority(os.PRIO_PROCESS, tid)))
    except (OSError, AttributeError):
        pass


class GenerationSlots:
    """How many generations the server runs at once (`limit`), how many one client address may run or wait for
    (`per_address`: a visitor with many tabs cannot hold every slot), and a first-come queue of at most `queue`
    waiting for a slot (a short wait instead of a refusal). `enter()` gives a Ticket or refuses (RuntimeError)."""

    def __init__(self, limit: int, per_address: int | None = None, queue: int = 0):
        if limit < 1:
            raise ValueError(f"need at least one generation slot, got {limit}")
        self.limit, self.per_address, self.queue = limit, per_address, queue
        self._cond = threading.Condition()
        self._running = 0
        self._waiting: list[Ticket] = []
        self._by_address: dict[str, int] = {}

    def enter(self, address: str = "") -> Ticket:
        with self._cond:
            held = self._by_address.get(address, 0)
            if self.per_address is not None and held >= self.per_address:
                raise RuntimeError(
                    f"your address already has {held} generation{'s' if held > 1 else ''} running or "
                    f"waiting (the limit is {self.per_address}); stop one first"
                )
            if self._running >= self.limit and len(self._waiting) >= self.queue:
                raise RuntimeError(
                    f"the server is already running {self.limit} generation"
                    f"{'s' if self.limit > 1 else ''}"
                    + (f" with {self.queue} waiting" if self.queue else "")
                    + "; try again in a moment"
                )
            ticket = Ticket(self, address)
            self._by_address[address] = held + 1
            self._waiting.append(ticket)
            self._grant()
            return ticket

    def _grant(self) -> None:
        while self._running < self.limit and self._waiting:
            self._waiting.pop(0).granted = True
            self._running += 1
        self._cond.notify_all()

    def _leave(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket.left:
                return
            ticket.left = True
            if ticket.granted:
                self._running -= 1
            else:
                self._waiting.remove(ticket)
            self._by_address[ticket.address] -= 1
            if not self._by_address[ticket.address]:
                del self._by_address[ticket.address]
            self._grant()

    @property
    def running(self) -> int:
        with self._cond:
            return self._running

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)


class Ticket:
    """One generation's place: granted a slot, or waiting in line."""

    def __init__(self, slots: GenerationSlots, address: str):
        self.slots, self.address = slots, address
        self.granted = self.left = False

    def ahead(self) -> int:
        """How many wait before this one (0 when it is next or already running)."""
        with self.slots._cond:
            return self.slots._waiting.index(self) if not self.granted and not self.left else 0

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the slot; True once it is granted."""
        with self.slots._cond:
            self.slots._cond.wait_for(lambda: self.granted or self.left, timeout)
            return self.granted

    def leave(self) -> None:
        """Give the slot back, or step out of the line."""
        self.slots._leave(self)


class LiveGeneration:
    """One generation in a background thread: `steps` grows as tokens arrive (a list only this thread appends
    to; readers take `snapshot()`), `stop()` ends it before the next token, `running` is False once it is over
    (finished, stopped, failed: `error`, or abandoned: `alive()` false).

    settings: max_new_tokens, temperature, top_k, top_p, seed and stream's other options; they and the prompt
    are checked here, before the thread starts (ValueError).

    pace: tokens per second the steps are released at (None: as fast as the model writes; 0: one token per
    `advance()`, the first at once), so a reader can watch the map grow; `set_pace` changes it while it runs.
    The model's time (`seconds`) leaves out the time spent waiting for the pace.

    explain: each step's top three contributors, found in this thread a batch at a time (`contributors`: a
    LiveContributors, whose `found` holds them by step; None without)."""

    def __init__(
        self,
        model: GPT,
        prompt_ids,
        settings: dict,
        *,
        owner: str = "",
        slots: GenerationSlots | None = None,
        alive: Callable[[], bool] = lambda: True,
        on_token: Callable[[], None] | None = None,
        threads: int | None = None,
        address: str = "",
        on_end: Callable[[], None] | None = None,
        pace: float | None = None,
        explain: bool = False,
    ):
        check_pace(pace)
        capture = direct_hooks(model.config) if explain else ()
        # checks the prompt and settings now
        records = stream(model, list(prompt_ids), attention=True, capture=capture, **settings)
        self.prompt = tuple(int(i) for i in prompt_ids)
        self.enc = tokenizer_for(model)  # the pages decode its text with the model's tokenizer, not the model held
        self.settings = dict(settings)
        self.owner = owner
        self.steps: list[StepSummary] = []
        self.error: str | None = None
        self.stopped = False  # ended by stop() or by its session going away, not by reaching the end
        self.shown = 0  # steps the page has drawn so far (set by its live view)
        self._keep: int | None = None
        self.pace = pace
        self._allowed = 1  # steps released so far when paced by clicks (the first comes at once)
        self._last_step_at = 0.0
        self._niced = False  # run_in_background() done (_yield_if_crowded)
        self._waited = 0.0  # seconds spent waiting for the pace, left out of `seconds`
        self._turn = threading.Condition()  # wakes a paced wait on set_pace, advance or stop
        self._stop = threading.Event()
        self._done = threading.Event()
        self.started_at = self.finished_at = None  # time.perf_counter() at the thread's start and end
        self._slots, self._alive, self._on_token, self._threads = slots, alive, on_token, threads
        self._on_end = on_end  # called once when it is over, however it ends (the app releases the model it held)
        self._ticket = slots.enter(address) if slots is not None else None  # RuntimeError when refused
        self.contributors = LiveContributors(model) if explain else None
        if sys.getswitchinterval() > GIL_SWITCH_S:
            sys.setswitchinterval(GIL_SWITCH_S)  # process-wide, once
        self._thread = threading.Thread(target=self._run, args=(records,), name="gptviz-generation", daemon=True)
        self._thread.start()

    def _run(self, records) -> None:
        if not self._wait_for_slot():
            self._ticket.leave()
            self._end()
            return
        self.started_at = time.perf_counter()
        # On a server whose cores are shared with the script, the browser and other sessions, more than one torch
        # thread per small-model generation makes OpenMP's threads wait on each other (a stream on the bundled model
        # ran an order of magnitude slower with two threads beside a busy process than with one;
        # `python -m benchmarks live-pace` measures the live page's pace against the engine's).
        threads = torch_threads(self._threads) if self._threads else nullcontext()
        self._yield_if_crowded()
        try:
            with threads:  # the server's count is back for later threads before anyone sees the run end
                self._generate(records)
        finally:
            if self.contributors is not None:
                self.contributors.release()  # the run's page keeps the job: it must not keep the model
            if self.stopped and self._keep is not None:
                del self.steps[self._keep :]  # before _done: a reader that sees it over sees the kept steps
            self.finished_at = time.perf_counter()
            if self._ticket is not None:
                self._ticket.leave()
            self._end()

    def _generate(self, records) -> None:
        try:
            for record in records:
                if self._stop.is_set() or not self._alive() or not self._wait_for_turn():
                    self.stopped = True
                    break
                self.steps.append(step_summary(record))
                if self.contributors is not None:
                    self.contributors.submit(len(self.steps) - 1, record)  # in this thread, a batch at a time
                    if self._ahead_of_pace():
                        self.contributors.flush()  # it waits for its pace anyway: no step's are left waiting
                self._yield_if_crowded()
                if self._on_token is not None:
                    self._on_token()
            if self.contributors is not None and self._alive():
                self.contributors.flush()  # the last steps' (a stopped run's too: its page still shows them)
        except Exception as err:  # shown on the page; the thread must not die silently
            self.error = f"{type(err).__name__}: {err}"

    def _yield_if_crowded(self) -> None:
        """Run in the background (run_in_background) once another generation runs beside this one: generations then
        yield to the pages' threads (issue 57's hostile load). Alone, it keeps the priority of the page that watches it,
        so the page keeps the engine's pace on a busy machine (issue 60: niced alone, the bundled model wrote at half
        the engine's pace on a loaded machine; `python -m benchmarks live-pace` compares the two). One way: a thread may
        lower its priority, not raise it."""
        if not self._niced and (self._slots is None or self._slots.running > 1):
            run_in_background()
            self._niced = True

    def _end(self) -> None:
        if self._on_end is not None:
            self._on_end()
        self._done.set()

    def _ahead_of_pace(self) -> bool:
        """Whether the next step will wait for the pace (a click, or its time)."""
        if self.pace is None:
            return False
        if self.pace == 0:
            return len(self.steps) >= self._allowed
        return time.perf_counter() < self._last_step_at + 1 / self.pace

    def _wait_for_turn(self) -> bool:
        """Hold the next step until the pace releases it; False when stopped, abandoned, or left waiting for a
        click for STEP_WAIT_S."""
        started = last = time.perf_counter()
        with self._turn:
            while True:
                if self._stop.is_set() or not self._alive():
                    return False
                now = time.perf_counter()
                if self.pace is None or not self.steps:
                    break
                if self.pace == 0:
                    if len(self.steps) < self._allowed:
                        break
                    if now - started > STEP_WAIT_S:
                        return False
                    wait = 0.1
                else:
                    due = self._last_step_at + 1 / self.pace
                    if now >= due:
                        break
                    wait = min(0.1, due - now)
                self._turn.wait(wait)  # short: a closed session (alive() false) is noticed within 0.1 s
                last = time.perf_counter()
        self._waited += last - started
        self._last_step_at = time.perf_counter()
        return True

    def set_pace(self, pace: float | None) -> None:
        """Change the pace while it runs (None: the model's own speed; 0: one token per advance())."""
        check_pace(pace)
        with self._turn:
            if pace == 0 and self.pace != 0:
                self._allowed = len(self.steps)  # from now on, each click releases one more
            self.pace = pace
            self._turn.notify_all()

    def advance(self, n: int = 1) -> None:
        """Release `n` more steps of a generation paced by clicks."""
        with self._turn:
            self._allowed = max(self._allowed, len(self.steps)) + n
            self._turn.notify_all()

    def _wait_for_slot(self) -> bool:
        """Wait in line for a server slot; False when stopped or abandoned first."""
        while self._ticket is not None and not self._ticket.wait(0.1):
            if self._stop.is_set() or not self._alive():
                self.stopped = True
                return False
        return True

    @property
    def ahead(self) -> int | None:
        """Generations waiting before this one for a server slot; None once it has one (or needs none)."""
        if self._ticket is None or self._ticket.granted or self._ticket.left:
            return None
        return self._ticket.ahead()

    @property
    def seconds(self) -> float | None:
        """How long the model took for the steps so far (to its end once it is over), None before it starts."""
        if self.started_at is None:
            return None
        return (self.finished_at or time.perf_counter()) - self.started_at - self._waited

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
        with self._turn:
            self._turn.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until it is over (True) or `timeout` seconds pass (False)."""
        return self._done.wait(timeout)

    @property
    def waiting_for_click(self) -> bool:
        """Paced by clicks and holding its next step for one."""
        return self.running and self.pace == 0 and len(self.steps) >= self._allowed

    def snapshot(self) -> list[StepSummary]:
        """The steps so far, as a list of their own (the thread may append while the page draws)."""
        return self.steps[:]


def check_pace(pace: float | None) -> None:
    """A pace is None (free), 0 (by clicks) or a positive number of tokens per second up to 1,000."""
    if pace is not None and (isinstance(pace, bool) or not isinstance(pace, (int, float)) or not 0 <= pace <= 1000):
        raise ValueError(f"pace must be None, 0 or tokens per second up to 1000, got {pace!r}")
