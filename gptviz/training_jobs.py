"""Background training runs for the Train page.

A training run must not hold up the script run of the session that started it, nor any other session's
pages, so each job trains in its own daemon thread (gptviz.train.train_models, the same loop the CLI uses)
and the page only reads snapshots of its progress. Jobs live in a JobRegistry shared by every session on
the server (the app holds one per process: gptviz.app.jobs.training_registry), guarded by a lock; a
session keeps the ids of its own jobs.

A training Job keeps the server's torch thread count. The warmup scenario runs on one thread while it runs: its
nine small models step one after another, and two OpenMP threads on a shared 2-core CPU wait on each other (a step
of its 12-layer model took 0.15 s on one thread and 0.37-4 s on two, at a load average of 2). torch.set_num_threads
sets the calling thread's count and also the default that threads started later take, so the job puts the
server's count back when it ends (gptviz.live_generation.torch_threads).
"""
from __future__ import annotations

import functools
import io
import itertools
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .config import GPTConfig
from .limits import LimitError
from .memory import MemoryAccountant, Reservation
from .model import GPT
from .train import StepLog, TrainResult, TrainSettings, format_eta, load_corpus, train_models, write_history
from .weights import save_checkpoint

QUEUED, LOADING, RUNNING, DONE, STOPPED, FAILED = "queued", "loading", "running", "done", "stopped", "failed"
FINISHED = (DONE, STOPPED, FAILED)
ALIVE_CHECK_S = 5.0  # how often a run asks whether the session that started it is still there


FLOAT32 = 4
# Resident memory a run holds beyond its tensors, as a share of its largest phase: the Heads forming run's RSS grew
# 3,514 MiB where torch's own records peaked at 3,247 MiB (8%), the allocator's pages around its 1.5 GiB logits.
RUN_OVERHEAD_SHARE = 0.1


def job_nbytes(spec: "JobSpec") -> int:
    """What a run reserves before it starts: run_nbytes."""
    return run_nbytes(spec)


def _softmax_width(config, settings) -> int:
    """The logits' width in a training step: the whole vocabulary, unless every step normalises over the repeated
    sequences' `copy_vocab` ids only (every row a copy window and every step within corpus_vocab_steps)."""
    copy_only = settings.copy_fraction == 1.0 and settings.copy_vocab and settings.corpus_vocab_steps >= settings.steps
    return min(settings.copy_vocab, config.vocab_size) if copy_only else config.vocab_size


def run_nbytes(spec: "JobSpec") -> int:
    """A run at its peak, phase by phase: every model's weights, gradients and AdamW's two moments (they train side
    by side), beside the largest of one model's training step (what autograd keeps, with logits as wide as its
    softmax: gptviz.train.subset_lm_loss) and its validation pass (no gradients, but the whole vocabulary's logits
    and their log-softmax for the batch: Trainer.evaluate), and the fixed overhead of the process's allocator.
    The Heads forming page's run trains on 2,000 ids but validates on 50,257: job_nbytes reserved 5,008 MiB for
    it, counting three full-vocabulary copies of the logits for a training step that never makes them, where the
    run peaked 3,389 MiB above its baseline (tests/test_training_memory.py measures it)."""
    from .memory import activation_nbytes, forward_nbytes
    from .params import total_params
    s = spec.settings
    block = s.block_size or min(c.n_ctx for c in spec.configs.values())
    held = sum(FLOAT32 * 4 * total_params(cfg) for cfg in spec.configs.values())
    phases = []
    for cfg in spec.configs.values():
        narrow = cfg.replace(vocab_size=_softmax_width(cfg, s))
        train = activation_nbytes(narrow, s.batch_size, block)
        validate = (2 * FLOAT32 * s.batch_size * block * cfg.vocab_size
                    + forward_nbytes(cfg, block, s.batch_size, patterns=False, all_logits=False))
        phases.append(max(train, validate))
    return held + int((1 + RUN_OVERHEAD_SHARE) * max(phases))


def job_tokens(spec: "JobSpec") -> int:
    """Tokens a run trains on: steps x batch x block, for each model it trains."""
    s = spec.settings
    block = s.block_size or min(c.n_ctx for c in spec.configs.values())
    return s.steps * s.batch_size * block * len(spec.configs)


class JobLimitError(RuntimeError):
    """Too many training runs are going on this server; the message says what to do."""


@functools.lru_cache(maxsize=1)
def corpus_tokens() -> torch.Tensor:
    """Tiny Shakespeare as GPT-2 ids, tokenised once per process."""
    return load_corpus()


@dataclass(frozen=True)
class JobSpec:
    configs: dict[str, GPTConfig]      # run name -> model config; all trained on the same batches
    settings: TrainSettings
    init: str = "gpt2"
    label: str = ""                    # a short description for people
    snapshot_every: int = 0            # record heads every K steps while training (gptviz.snapshots; 0 = none)

    def __post_init__(self):
        if not self.configs:
            raise ValueError("a training job needs at least one model config")
        if self.init not in ("gpt2", "xavier"):
            raise ValueError(f"init must be 'gpt2' or 'xavier', got {self.init!r}")
        block = self.settings.block_size
        for name, cfg in self.configs.items():
            if block is not None and block > cfg.n_ctx:
                raise ValueError(f"block size {block} is longer than {name}'s context of {cfg.n_ctx} positions")


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

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def fraction(self) -> float:
        return self.steps_done / self.total_steps if self.total_steps else 0.0

    @property
    def progress_text(self) -> str:
        """"Running: step 120 of 800, 45 s, about 4m15s left" (the time left from the pace so far, once there is one)."""
        text = f"{self.status.capitalize()}: step {self.steps_done} of {self.total_steps}, {self.elapsed_s:.0f} s"
        return text + (f", about {self.eta} left" if self.status == RUNNING and self.steps_done else "")


@dataclass
class Job:
    id: str
    spec: JobSpec
    created: float = field(default_factory=time.time)
    status: str = QUEUED
    error: str | None = None
    models: dict[str, GPT] = field(default_factory=dict)
    results: dict[str, TrainResult] = field(default_factory=dict)
    started_s: float | None = None     # perf_counter when training (not corpus loading) began
    finished_s: float | None = None
    _logs: dict[str, list[dict]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _zips: dict[str, bytes] = field(default_factory=dict, repr=False)
    owner: str | None = None               # the browser session that started it
    address: str = ""                      # the client address of that session (per-address fairness)
    max_seconds: float | None = None       # wall-time budget of the training loop
    alive: Callable[[], bool] | None = field(default=None, repr=False)  # is the owner still connected?
    stop_reason: str | None = None         # why the run ended early, for people ("stopped", "time", "left")
    _checked_alive: float = field(default=0.0, repr=False)
    reservation: Reservation | None = field(default=None, repr=False)  # its memory, released when it ends
    snapshots: dict = field(default_factory=dict)  # run name -> gptviz.snapshots.Snapshots, read while it trains
    # called with the job once its models exist (in its own thread, before anyone can see it finished): the app
    # offers them to the owner's other pages from here, not from a page run that a click may cut short
    on_models: Callable[["Job"], None] | None = field(default=None, repr=False)

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
        if self.max_seconds is not None and self.started_s is not None \
                and time.perf_counter() - self.started_s > self.max_seconds:
            self.request_stop("time")
        elif self.alive is not None and time.monotonic() - self._checked_alive > ALIVE_CHECK_S:
            self._checked_alive = time.monotonic()
            if not self.alive():
                self.request_stop("left")
        return self._stop.is_set()

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

    def snapshot(self) -> JobSnapshot:
        with self._lock:
            logs = {name: list(records) for name, records in self._logs.items()}
            status, error = self.status, self.error
            started, finished = self.started_s, self.finished_s
        total = self.spec.settings.steps
        done = min((len(logs.get(name, [])) for name in self.spec.configs), default=0)
        now = finished if finished is not None else time.perf_counter()
        elapsed = now - started if started is not None else 0.0
        eta = "0m00s" if status in FINISHED else format_eta(done, total, elapsed)
        return JobSnapshot(self.id, status, logs, done, total, elapsed, eta, error, self._stop.is_set())

    # ---- the run --------------------------------------------------------------------------------------------
    def _set(self, **fields) -> None:
        with self._lock:
            for key, value in fields.items():
                setattr(self, key, value)

    def run(self, tokens: torch.Tensor | None = None) -> None:
        """Train (in the calling thread); the registry calls this from a background thread."""
        if threading.current_thread() is not threading.main_thread():
            from .live_generation import run_in_background
            run_in_background()  # the pages' threads first
        try:
            self._set(status=LOADING)
            tokens = corpus_tokens() if tokens is None else tokens
            if self._stop.is_set():
                self._set(status=STOPPED, started_s=time.perf_counter(), finished_s=time.perf_counter())
                return
            recorders = self._recorders(tokens)
            self._set(status=RUNNING, started_s=time.perf_counter())
            models, results = train_models(self.spec.configs, self.spec.settings, tokens,
                                           on_step=self._on_step, should_stop=self._should_stop,
                                           init=self.spec.init, recorders=recorders)
            stopped = any(r.stopped_early for r in results.values())
            self._set(models=models, results=results)
            if self.on_models is not None and models:
                self.on_models(self)
            self._set(status=STOPPED if stopped else DONE, finished_s=time.perf_counter())
        except Exception as err:  # a background thread has no one to raise to: record it for the page
            self._set(status=FAILED, error=f"{type(err).__name__}: {err}", finished_s=time.perf_counter())
        finally:
            if self.reservation is not None:  # the trained models stay; whoever keeps them counts them
                self.reservation.release()

    def _recorders(self, tokens: torch.Tensor) -> dict | None:
        """Snapshot recorders for each run when the spec asks for them, on probes of the ids the run copies."""
        if not self.spec.snapshot_every:
            return None
        from .snapshots import SnapshotRecorder, default_probes, empty_snapshots
        from .train import most_frequent_ids, split
        s = self.spec.settings
        train, val = split(tokens, s.val_fraction)
        copy_ids = most_frequent_ids(train, s.copy_vocab) if s.copy_fraction else None
        block = s.block_size or min(c.n_ctx for c in self.spec.configs.values())
        probes = default_probes(train, val, copy_ids, max_tokens=block)
        recorders = {name: SnapshotRecorder(empty_snapshots(cfg, probes, self.spec.snapshot_every), val, block)
                     for name, cfg in self.spec.configs.items()}
        self._set(snapshots={name: r.snaps for name, r in recorders.items()})
        return recorders

    # ---- results --------------------------------------------------------------------------------------------
    def checkpoint_zip(self, name: str) -> bytes:
        """A zip of the trained model `name`: model.safetensors, config.json, history.json, history.csv.
        Load it with gptviz.weights.load_checkpoint(folder) after unzipping."""
        if name not in self.models:
            raise KeyError(f"no trained model {name!r} in job {self.id} (status {self.status})")
        if name not in self._zips:
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp) / f"{self.id}-{name}"
                result = self.results[name]
                save_checkpoint(self.models[name], folder, extra={"training": {
                    "settings": result.settings, "init": self.spec.init, "final": result.final,
                    "stopped_early": result.stopped_early}})
                if result.history:
                    write_history(result, folder)
                buffer = io.BytesIO()
                with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
                    for path in sorted(folder.iterdir()):
                        zf.write(path, f"{folder.name}/{path.name}")
                self._zips[name] = buffer.getvalue()
        return self._zips[name]


class JobRegistry:
    """Every training job on this server, by id. Thread-safe."""

    def __init__(self, max_running: int = 2, max_kept: int = 24, per_owner: int | None = None,
                 max_tokens: int | None = None, max_seconds: float | None = None, per_address: int | None = None,
                 accountant: MemoryAccountant | None = None):
        self.max_running, self.max_kept, self.per_owner = max_running, max_kept, per_owner
        self.accountant = accountant  # a run reserves its memory there before it starts (gptviz.memory)
        self.per_address = per_address  # runs at once from one client address: many tabs cannot hold every slot
        self.max_tokens, self.max_seconds = max_tokens, max_seconds
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(self, spec: JobSpec, tokens: torch.Tensor | None = None, owner: str | None = None,
              alive: Callable[[], bool] | None = None, address: str = "", job_type: type[Job] | None = None,
              on_models: Callable[[Job], None] | None = None) -> Job:
        """Start a job in a background thread and return it at once. JobLimitError, before anything starts,
        when the run is larger than the token budget, when the server is already running max_running jobs, or
        when `owner` (a session) already runs per_owner, or when the server's memory (`accountant`) has no room
        for it. The run stops by itself past max_seconds, and when `alive()` says its session is gone.
        `job_type`: a Job subclass with its own run (WarmupJob). `on_models`: see Job.on_models."""
        size = job_tokens(spec)
        if self.max_tokens is not None and size > self.max_tokens:
            raise JobLimitError(f"this run would train on {size:,} tokens; this server allows {self.max_tokens:,} "
                                "per run: fewer steps, a smaller batch or shorter blocks fit")
        with self._lock:
            running = [j for j in self._jobs.values() if not j.finished]
            if len(running) >= self.max_running:
                raise JobLimitError(f"{len(running)} training runs are already going on this server (the "
                                    f"limit is {self.max_running}, to keep pages responsive); wait for one to "
                                    f"finish or stop yours")
            own = [j for j in running if owner is not None and j.owner == owner]
            if self.per_owner is not None and len(own) >= self.per_owner:
                raise JobLimitError(f"you already have {len(own)} run{'s' if len(own) > 1 else ''} going (the limit "
                                    f"is {self.per_owner} a visitor); stop it or wait for it to finish")
            same_address = [j for j in running if j.address == address]
            if self.per_address is not None and len(same_address) >= self.per_address:
                raise JobLimitError(f"your address already has {len(same_address)} run"
                                    f"{'s' if len(same_address) > 1 else ''} going (the limit is {self.per_address}, "
                                    "so one visitor's tabs cannot take every slot); stop one or wait for it to finish")
            reservation = self._reserve(spec)  # under the lock: no run starts unaccounted beside this one
            job = (job_type or Job)(f"run{next(self._ids)}", spec, owner=owner, max_seconds=self.max_seconds, alive=alive,
                      address=address, reservation=reservation, on_models=on_models)
            self._jobs[job.id] = job
            self._prune()
        job._thread = threading.Thread(target=job.run, args=(tokens,), name=f"gptviz-train-{job.id}", daemon=True)
        try:
            job._thread.start()
        except BaseException:
            if reservation is not None:
                reservation.release()
            raise
        return job

    def _reserve(self, spec: JobSpec) -> Reservation | None:
        """The run's memory, reserved now or refused (JobLimitError): no waiting, the page is waiting for it."""
        if self.accountant is None:
            return None
        models = len(spec.configs)
        try:
            return self.accountant.acquire(job_nbytes(spec), f"a training run of {models} model"
                                           f"{'s' if models > 1 else ''}", wait_s=0)
        except LimitError as err:
            raise JobLimitError(f"{err}; a smaller batch, shorter blocks or a smaller model need less") from None

    def _prune(self) -> None:
        """Forget the oldest finished jobs beyond max_kept (their models stay wherever else they are held)."""
        finished = sorted((j for j in self._jobs.values() if j.finished), key=lambda j: j.created)
        for job in finished[:max(0, len(self._jobs) - self.max_kept)]:
            del self._jobs[job.id]

    def get(self, job_id: str | None) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id) if job_id is not None else None

    def jobs(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())

    def running(self) -> list[Job]:
        return [j for j in self.jobs() if not j.finished]

    def stop(self, job_id: str) -> bool:
        job = self.get(job_id)
        if job is None:
            return False
        job.request_stop()
        return True

    def owned_by(self, owner: str) -> list[Job]:
        return [j for j in self.jobs() if j.owner == owner]



# ---- the "grow an induction head" scenario ---------------------------------------------------------------------
# Copy-only training (every window a random sequence of frequent ids followed by its repeats): the bundled models'
# first-stage recipe (d_model 128, windows of 128, batch 64, lr 1e-3 after 100 warmup steps) with 2 layers instead
# of 4, the fewest an induction head needs (one head to find the previous token, one to look after it): half the
# cost of a step, and the head formed by step 290 (4 layers: 445; 3 layers: 340). Windows of 64 or batches of 32
# at a higher lr had not reached 0.5 in 600-1,460 steps (benchmarks/README.md).
GROWTH = dict(layers=2, d_model=128, heads=4, block=128, batch=64, lr=1e-3, warmup=100, steps=800, copy_vocab=2000,
              snapshot_every=10)
# One batch of held-out text for the trainer's own validation loss at the first and last step (the default 8 took
# ~20 s of a 3-minute scenario at the full vocabulary); the snapshots measure what the scenario is about.
GROWTH_EVAL_BATCHES = 1


def induction_growth_spec(wirings=("pre",), seed: int = 0, init: str = "gpt2", **overrides) -> JobSpec:
    """The scenario as a job: each wiring one model, the same batches; `overrides` replace GROWTH's values."""
    g = {**GROWTH, **overrides}
    from .config import PRESETS
    base = PRESETS["tiny"].replace(n_layers=g["layers"], d_model=g["d_model"], n_heads=g["heads"], n_ctx=g["block"],
                                   dropout=0.0, name=f"grow-{g['layers']}L-d{g['d_model']}")
    configs = {norm: base.replace(norm=norm, name=f"{base.name}-{norm}") for norm in wirings}
    settings = TrainSettings(steps=g["steps"], batch_size=g["batch"], block_size=g["block"], lr=g["lr"],
                             warmup=g["warmup"], min_lr_ratio=1.0, weight_decay=0.0, eval_every=10**6,
                             seed=seed, corpus_vocab_steps=g["steps"], copy_fraction=1.0, copy_vocab=g["copy_vocab"],
                             eval_batches=GROWTH_EVAL_BATCHES)
    label = (f"grow an induction head: {g['layers']}L d{g['d_model']} {g['heads']}h, {', '.join(wirings)}-norm, "
             f"copy-only windows of {g['block']}, lr {g['lr']:g}, seed {seed}")
    return JobSpec(configs, settings, init, label, snapshot_every=g["snapshot_every"])


@dataclass
class WarmupJob(Job):
    """The warmup scenario (gptviz.warmup) as a background run: its spec's configs are one per arm and seed (so
    the token budget and the progress count every run), and `scenario` says what to train. No model is kept."""
    scenario: "object" = None

    def run(self, tokens: torch.Tensor | None = None) -> None:
        from .live_generation import run_in_background, torch_threads
        from .warmup import run_scenario
        background = threading.current_thread() is not threading.main_thread()
        if background:
            run_in_background()        # the pages' threads first, as Job.run
        with torch_threads(1) if background else nullcontext():  # see the module's note
            self._run_scenario(tokens, run_scenario)

    def _run_scenario(self, tokens, run_scenario) -> None:
        try:
            self._set(status=LOADING)
            tokens = corpus_tokens() if tokens is None else tokens
            self._set(status=RUNNING, started_s=time.perf_counter())
            run_scenario(self.scenario, tokens, on_step=self._on_record, should_stop=self._should_stop)
            self._set(status=STOPPED if self._stop.is_set() else DONE, finished_s=time.perf_counter())
        except Exception as err:  # a background thread has no one to raise to: record it for the page
            self._set(status=FAILED, error=f"{type(err).__name__}: {err}", finished_s=time.perf_counter())
        finally:
            if self.reservation is not None:  # the memory reserved at start (gptviz.memory), as Job.run does
                self.reservation.release()

    def _on_record(self, name: str, record: dict) -> None:
        with self._lock:
            self._logs.setdefault(name, []).append(record)


def warmup_spec(scenario) -> JobSpec:
    """The JobSpec a WarmupJob runs under: one config per arm and seed, the steps, batch and block it trains."""
    from .warmup import ARMS, split_name
    configs = {name: scenario.config(ARMS[split_name(name)[0]][0]) for name in scenario.run_names()}
    settings = TrainSettings(steps=scenario.steps, batch_size=scenario.batch_size, block_size=scenario.block,
                             lr=scenario.lr, warmup=scenario.warmup, grad_clip=0.0, beta2=scenario.beta2)
    return JobSpec(configs, settings, scenario.init, scenario.label)


def start_warmup(registry: JobRegistry, scenario, tokens: torch.Tensor | None = None, **kwargs) -> Job:
    """Start the warmup scenario under the registry's limits (JobLimitError as for any run)."""
    job = registry.start(warmup_spec(scenario), tokens, job_type=_bound_warmup(scenario), **kwargs)
    return job


def _bound_warmup(scenario) -> type[Job]:
    def make(*args, **kwargs) -> Job:
        return WarmupJob(*args, scenario=scenario, **kwargs)
    return make
