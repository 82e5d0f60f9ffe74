"""One background training run: its spec, its progress as snapshots for drawing, and its checkpoints as zips.

A training run must not hold up the script run of the session that started it, nor any other session's
pages, so each job trains in its own daemon thread (gptviz.training.train.train_models, the same loop the CLI uses)
and the page only reads snapshots of its progress. Jobs live in a JobRegistry shared by every session on
the server (the app holds one per process: gptviz.app.jobs.training_registry), guarded by a lock; a
session keeps the ids of its own jobs.

A training Job keeps the server's torch thread count. The warmup scenario runs on one thread while it runs: its
nine small models step one after another, and two OpenMP threads on a shared 2-core CPU wait on each other (a step
of its 12-layer model took several times as long on two threads as on one, and varied widely;
`python -m benchmarks warmup` runs the scenario). torch.set_num_threads
sets the calling thread's count and also the default that threads started later take, so the job puts the
server's count back when it ends (gptviz.serve.live_generation.torch_threads).
"""

from __future__ import annotations

import functools
import io
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..model.config import GPTConfig
from ..model.model import GPT
from ..model.weights import save_checkpoint
from ..training.train import StepLog, TrainResult, TrainSettings, load_corpus, train_models, write_history
from . import allocator
from .memory import Reservation

QUEUED, LOADING, RUNNING, DONE, STOPPED, FAILED = "queued", "loading", "running", "done", "stopped", "failed"
FINISHED = (DONE, STOPPED, FAILED)
ALIVE_CHECK_S = 5.0  # how often a run asks whether the session that started it is still there
# The time left comes from the pace of the last PACE_WINDOW steps, never from step 1: step 1 carries one-off work (the
# trainer's first validation, the first snapshot, torch's warm-up: as long as many later steps), and the whole run's
# average made the page promise several times the run's real length (issue 60; `python -m benchmarks grow` runs the
# Grow scenario). A recent window
# also follows a machine whose load changes; five snapshot intervals of the Grow run, so each window holds as many.
PACE_WINDOW = 50
FORMED_HOLD = 3  # snapshots in a row an induction score must hold its bar before a stop_when_formed run ends


class JobLimitError(RuntimeError):
    """Too many training runs are going on this server; the message says what to do."""


@functools.lru_cache(maxsize=1)
def corpus_tokens() -> torch.Tensor:
    """Tiny Shakespeare as GPT-2 ids, tokenised once per process."""
    return load_corpus()


@dataclass(frozen=True)
class JobSpec:
    configs: dict[str, GPTConfig]  # run name -> model config; all trained on the same batches
    settings: TrainSettings
    init: str = "gpt2"
    label: str = ""  # a short description for people
    snapshot_every: int = 0  # record heads every K steps while training (gptviz.training.snapshots; 0 = none)
    # end the run (done, not stopped) once every model's best induction score on the snapshots has held this bar for
    # FORMED_HOLD snapshots in a row (0: run every step); needs snapshot_every
    stop_when_formed: float = 0.0

    def __post_init__(self):
        if not self.configs:
            raise ValueError("a training job needs at least one model config")
        if self.init not in ("gpt2", "xavier"):
            raise ValueError(f"init must be 'gpt2' or 'xavier', got {self.init!r}")
        block = self.settings.block_size
        for name, cfg in self.configs.items():
            if block is not None and block > cfg.n_ctx:
                raise ValueError(f"block size {block} is longer than {name}'s context of {cfg.n_ctx} positions")
        if self.stop_when_formed and not self.snapshot_every:
            raise ValueError("stop_when_formed reads the snapshots: it needs snapshot_every")


@dataclass
class JobSnapshot:
    """A consistent copy of a job's state for drawing (the job keeps training meanwhile)."""

    id: str
    status: str
    logs: dict[str, list[dict]]
    steps_done: int
    total_steps: int
    elapsed_s: float
    eta: str
    error: str | None
    stop_requested: bool
    remaining_s: float | None = None  # seconds left at the recent pace (seconds_left); None before there is one
    may_end_sooner: bool = False  # the run ends early once its head has formed (JobSpec.stop_when_formed)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def fraction(self) -> float:
        return self.steps_done / self.total_steps if self.total_steps else 0.0

    @property
    def progress_text(self) -> str:
        """ "Running: step 120 of 800, 45 s, about 4m15s left" (the time left at the recent pace, once there is one;
        "at most" where the run may end sooner)."""
        text = f"{self.status.capitalize()}: step {self.steps_done} of {self.total_steps}, {self.elapsed_s:.0f} s"
        if self.status != RUNNING or self.remaining_s is None:
            return text
        return text + f", {'at most ' if self.may_end_sooner else ''}about {self.eta} left"


def clock(seconds: float) -> str:
    """4m15s."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def seconds_left(ends: list[float], total: int, now: float) -> float | None:
    """Seconds until step `total`, from `ends` (the clock when each finished step ended): the mean pace of the last
    PACE_WINDOW steps after step 1 (see PACE_WINDOW), less the part of the step in progress already spent (at most one
    step's worth, so a stall does not count the time down). None until two steps have ended."""
    done = len(ends)
    if done < 2:
        return None
    first = max(0, done - 1 - PACE_WINDOW)
    pace = (ends[-1] - ends[first]) / (done - 1 - first)
    return max(0.0, pace * (total - done) - min(max(0.0, now - ends[-1]), pace))


@dataclass
class Job:
    id: str
    spec: JobSpec
    created: float = field(default_factory=time.time)
    status: str = QUEUED
    error: str | None = None
    models: dict[str, GPT] = field(default_factory=dict)
    results: dict[str, TrainResult] = field(default_factory=dict)
    started_s: float | None = None  # perf_counter when training (not corpus loading) began
    finished_s: float | None = None
    _logs: dict[str, list[dict]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _zips: dict[str, bytes] = field(default_factory=dict, repr=False)
    _ends: list[float] = field(default_factory=list, repr=False)  # the clock when each step of every model had ended
    owner: str | None = None  # the browser session that started it
    address: str = ""  # the client address of that session (per-address fairness)
    max_seconds: float | None = None  # wall-time budget of the training loop
    alive: Callable[[], bool] | None = field(default=None, repr=False)  # is the owner still connected?
    stop_reason: str | None = None  # why the run ended early ("stopped", "time", "left", "formed")
    _checked_alive: float = field(default=0.0, repr=False)
    reservation: Reservation | None = field(default=None, repr=False)  # its memory, released when it ends
    snapshots: dict = field(
        default_factory=dict
    )  # run name -> gptviz.training.snapshots.Snapshots, read while it trains
    # called with the job once its models exist (in its own thread, before anyone can see it finished): the app
    # offers them to the owner's other pages from here, not from a page run that a click may cut short
    on_models: Callable[[Job], None] | None = field(default=None, repr=False)
    # is other background work running beside this run (another run, a live generation)? The run keeps the priority
    # of the page that started it while alone, and yields to the pages' threads once crowded (_yield_if_crowded).
    # None: crowded from the start (niced at once, as any background thread that cannot tell).
    crowded: Callable[[], bool] | None = field(default=None, repr=False)
    _niced: bool = field(default=False, repr=False)
    _one_thread: bool = field(default=False, repr=False)  # niced mid-run, it went to one torch thread

    # ---- control --------------------------------------------------------------------------------------------
    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the run to end after the step in progress (the models trained so far are kept)."""
        if not self._stop.is_set():
            self.stop_reason = reason
        self._stop.set()

    def _should_stop(self) -> bool:
        """Checked before every step: a stop request, the wall-time budget, or the owner's session gone (asked
        at most every ALIVE_CHECK_S seconds)."""
        if self._stop.is_set():
            return True
        if self._formed():
            self.request_stop("formed")
        elif (
            self.max_seconds is not None
            and self.started_s is not None
            and time.perf_counter() - self.started_s > self.max_seconds
        ):
            self.request_stop("time")
        elif self.alive is not None and time.monotonic() - self._checked_alive > ALIVE_CHECK_S:
            self._checked_alive = time.monotonic()
            if not self.alive():
                self.request_stop("left")
        return self._stop.is_set()

    def _formed(self) -> bool:
        """Every model's best induction score at or above spec.stop_when_formed in its last FORMED_HOLD snapshots."""
        bar = self.spec.stop_when_formed
        if not bar or not self.snapshots:
            return False
        for snaps in self.snapshots.values():
            d = snaps.detector_index("induction")
            with snaps.lock:
                last = snaps.scores[-FORMED_HOLD:]
            if len(last) < FORMED_HOLD or min(float(s[d].max()) for s in last) < bar:
                return False
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has finished (True) or the timeout passed (False)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.status in FINISHED

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    # ---- progress -------------------------------------------------------------------------------------------
    def _on_step(self, name: str, log: StepLog) -> None:
        with self._lock:
            self._logs.setdefault(name, []).append(asdict(log))
            if name == next(reversed(self.spec.configs)):  # the models step in turn: the last one ends the step
                self._ends.append(time.perf_counter())
        self._yield_if_crowded()  # another visitor's run or generation may have started since the last step
        # The step's activations are freed by now, but the heap holds them (gptviz.serve.allocator): this thread's arena
        # grows in 64 MiB heaps that its 4-16 MiB blocks fragment, and over a run the resident memory climbed to a
        # multiple of what the tensors need (issue 57; `python -m benchmarks replay` replays Grow's memory). Giving the
        # freed memory back after each step keeps the run's peak to one step's fragmentation, for a few per cent of the
        # step's time (docs/benchmarks-history.md, issue 57).
        allocator.release_freed_memory()

    def snapshot(self) -> JobSnapshot:
        with self._lock:
            logs = {name: list(records) for name, records in self._logs.items()}
            status, error = self.status, self.error
            started, finished = self.started_s, self.finished_s
            ends = list(self._ends)
        total = self.spec.settings.steps
        done = min((len(logs.get(name, [])) for name in self.spec.configs), default=0)
        now = finished if finished is not None else time.perf_counter()
        elapsed = now - started if started is not None else 0.0
        left = 0.0 if status in FINISHED else seconds_left(ends, total, now)
        eta = "?" if left is None else clock(left)
        return JobSnapshot(
            self.id,
            status,
            logs,
            done,
            total,
            elapsed,
            eta,
            error,
            self._stop.is_set(),
            left,
            bool(self.spec.stop_when_formed),
        )

    # ---- the run --------------------------------------------------------------------------------------------
    def _set(self, **fields) -> None:
        with self._lock:
            for key, value in fields.items():
                setattr(self, key, value)

    def run(self, tokens: torch.Tensor | None = None) -> None:
        """Train (in the calling thread); the registry calls this from a background thread."""
        self._yield_if_crowded()
        try:
            self._set(status=LOADING)
            tokens = corpus_tokens() if tokens is None else tokens
            if self._stop.is_set():
                self._set(status=STOPPED, started_s=time.perf_counter(), finished_s=time.perf_counter())
                return
            recorders = self._recorders(tokens)
            self._set(status=RUNNING, started_s=time.perf_counter())
            models, results = train_models(
                self.spec.configs,
                self.spec.settings,
                tokens,
                on_step=self._on_step,
                should_stop=self._should_stop,
                init=self.spec.init,
                recorders=recorders,
            )
            # a run that ended because its head formed is done: it did what it set out to
            stopped = any(r.stopped_early for r in results.values()) and self.stop_reason != "formed"
            self._set(models=models, results=results)
            if self.on_models is not None and models:
                self.on_models(self)
            self._set(status=STOPPED if stopped else DONE, finished_s=time.perf_counter())
        except Exception as err:  # a background thread has no one to raise to: record it for the page
            self._set(status=FAILED, error=f"{type(err).__name__}: {err}", finished_s=time.perf_counter())
        finally:
            if self._one_thread:  # threads started later take the server's count again
                from .live_generation import SERVER_TORCH_THREADS

                torch.set_num_threads(SERVER_TORCH_THREADS)
            if self.reservation is not None:  # the trained models stay; whoever keeps them counts them
                self.reservation.release()

    def _yield_if_crowded(self) -> None:
        """Run in the background (live_generation.run_in_background) once other background work runs beside this
        run; before that, keep the priority of the page that started it. Issue 60: niced from its start, the Heads
        forming page's run barely moved on a machine other programs kept busy (`python -m benchmarks grow` under load,
        docs/benchmarks-history.md); issue 57: beside other visitors' generations and runs, the pages' threads come
        first. One way, as for generations: a thread may lower its priority, not raise it. Niced mid-run, it also goes
        to one torch thread: the OpenMP workers it started at full priority would keep it, and the niced thread alone
        computes."""
        if self._niced or threading.current_thread() is threading.main_thread():
            return
        if self.crowded is not None and not self.crowded():
            return
        from .live_generation import run_in_background

        # niced before its first step, it keeps its threads: the OpenMP workers it starts later inherit the nice value
        if self.crowded is not None and self.status == RUNNING:
            torch.set_num_threads(1)
            self._one_thread = True
        run_in_background()  # the pages' threads first
        self._niced = True

    def _recorders(self, tokens: torch.Tensor) -> dict | None:
        """Snapshot recorders for each run when the spec asks for them, on probes of the ids the run copies."""
        if not self.spec.snapshot_every:
            return None
        from ..training.snapshots import SnapshotRecorder, default_probes, empty_snapshots
        from ..training.train import most_frequent_ids, split

        s = self.spec.settings
        train, val = split(tokens, s.val_fraction)
        copy_ids = most_frequent_ids(train, s.copy_vocab) if s.copy_fraction else None
        block = s.block_size or min(c.n_ctx for c in self.spec.configs.values())
        probes = default_probes(train, val, copy_ids, max_tokens=block)
        recorders = {
            name: SnapshotRecorder(empty_snapshots(cfg, probes, self.spec.snapshot_every), val, block)
            for name, cfg in self.spec.configs.items()
        }
        self._set(snapshots={name: r.snaps for name, r in recorders.items()})
        return recorders

    # ---- results --------------------------------------------------------------------------------------------
    def checkpoint_zip(self, name: str) -> bytes:
        """A zip of the trained model `name`: model.safetensors, config.json, history.json, history.csv.
        Load it with gptviz.model.weights.load_checkpoint(folder) after unzipping."""
        if name not in self.models:
            raise KeyError(f"no trained model {name!r} in job {self.id} (status {self.status})")
        if name not in self._zips:
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp) / f"{self.id}-{name}"
                result = self.results[name]
                save_checkpoint(
                    self.models[name],
                    folder,
                    extra={
                        "training": {
                            "settings": result.settings,
                            "init": self.spec.init,
                            "final": result.final,
                            "stopped_early": result.stopped_early,
                        }
                    },
                )
                if result.history:
                    write_history(result, folder)
                buffer = io.BytesIO()
                with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
                    for path in sorted(folder.iterdir()):
                        zf.write(path, f"{folder.name}/{path.name}")
                self._zips[name] = buffer.getvalue()
        return self._zips[name]
