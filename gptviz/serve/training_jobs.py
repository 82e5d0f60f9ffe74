"""The server's training runs: a JobRegistry every session shares (its limits: runs at once, per visitor, per
address, tokens, seconds and memory), and the two runs the pages start besides the Train page's own: growing an
induction head (Heads forming) and the warmup scenario. One run is background_job.Job; its cost is job_sizes."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..training.train import TrainSettings

# The page's names for a run come from here with the registry's (a page deals with runs, not their modules).
from .background_job import (  # noqa: F401
    DONE,
    FAILED,
    FORMED_HOLD,
    LOADING,
    RUNNING,
    STOPPED,
    Job,
    JobLimitError,
    JobSnapshot,
    JobSpec,
    corpus_tokens,
)
from .job_sizes import job_nbytes, job_tokens
from .limits import LimitError
from .memory import MemoryAccountant, Reservation


class JobRegistry:
    """Every training job on this server, by id. Thread-safe."""

    def __init__(
        self,
        max_running: int = 2,
        max_kept: int = 24,
        per_owner: int | None = None,
        max_tokens: int | None = None,
        max_seconds: float | None = None,
        per_address: int | None = None,
        accountant: MemoryAccountant | None = None,
        busy_elsewhere: Callable[[], bool] | None = None,
    ):
        self.max_running, self.max_kept, self.per_owner = max_running, max_kept, per_owner
        # background work of this server outside the registry (the app: live generations running); a run is niced once
        # it or another run of the registry runs beside it (Job.crowded)
        self.busy_elsewhere = busy_elsewhere
        self.accountant = accountant  # a run reserves its memory there before it starts (gptviz.serve.memory)
        self.per_address = per_address  # runs at once from one client address: many tabs cannot hold every slot
        self.max_tokens, self.max_seconds = max_tokens, max_seconds
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(
        self,
        spec: JobSpec,
        tokens: torch.Tensor | None = None,
        owner: str | None = None,
        alive: Callable[[], bool] | None = None,
        address: str = "",
        job_type: type[Job] | None = None,
        on_models: Callable[[Job], None] | None = None,
    ) -> Job:
        """Start a job in a background thread and return it at once. JobLimitError, before anything starts,
        when the run is larger than the token budget, when the server is already running max_running jobs, or
        when `owner` (a session) already runs per_owner, or when the server's memory (`accountant`) has no room
        for it. The run stops by itself past max_seconds, and when `alive()` says its session is gone.
        `job_type`: a Job subclass with its own run (WarmupJob). `on_models`: see Job.on_models."""
        size = job_tokens(spec)
        if self.max_tokens is not None and size > self.max_tokens:
            raise JobLimitError(
                f"this run would train on {size:,} tokens; this server allows {self.max_tokens:,} "
                "per run: fewer steps, a smaller batch or shorter blocks fit"
            )
        with self._lock:
            running = [j for j in self._jobs.values() if not j.finished]
            if len(running) >= self.max_running:
                raise JobLimitError(
                    f"{len(running)} training runs are already going on this server (the "
                    f"limit is {self.max_running}, to keep pages responsive); wait for one to "
                    f"finish or stop yours"
                )
            own = [j for j in running if owner is not None and j.owner == owner]
            if self.per_owner is not None and len(own) >= self.per_owner:
                raise JobLimitError(
                    f"you already have {len(own)} run{'s' if len(own) > 1 else ''} going (the limit "
                    f"is {self.per_owner} a visitor); stop it or wait for it to finish"
                )
            same_address = [j for j in running if j.address == address]
            if self.per_address is not None and len(same_address) >= self.per_address:
                raise JobLimitError(
                    f"your address already has {len(same_address)} run"
                    f"{'s' if len(same_address) > 1 else ''} going (the limit is {self.per_address}, "
                    "so one visitor's tabs cannot take every slot); stop one or wait for it to finish"
                )
            reservation = self._reserve(spec)  # under the lock: no run starts unaccounted beside this one
            job = (job_type or Job)(
                f"run{next(self._ids)}",
                spec,
                owner=owner,
                max_seconds=self.max_seconds,
                alive=alive,
                address=address,
                reservation=reservation,
                on_models=on_models,
                crowded=self._crowded,
            )
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

    def _crowded(self) -> bool:
        """Is more than one run of the registry going, or other background work of the server (busy_elsewhere)?"""
        return len(self.running()) > 1 or (self.busy_elsewhere is not None and self.busy_elsewhere())

    def _reserve(self, spec: JobSpec) -> Reservation | None:
        """The run's memory, reserved now or refused (JobLimitError): no waiting, the page is waiting for it."""
        if self.accountant is None:
            return None
        models = len(spec.configs)
        try:
            return self.accountant.acquire(
                job_nbytes(spec), f"a training run of {models} model{'s' if models > 1 else ''}", wait_s=0
            )
        except LimitError as err:
            raise JobLimitError(f"{err}; a smaller batch, shorter blocks or a smaller model need less") from None

    def _prune(self) -> None:
        """Forget the oldest finished jobs beyond max_kept (their models stay wherever else they are held)."""
        finished = sorted((j for j in self._jobs.values() if j.finished), key=lambda j: j.created)
        for job in finished[: max(0, len(self._jobs) - self.max_kept)]:
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
# first-stage recipe (d_model 128, batch 64, lr 1e-3 after 100 warmup steps) with 2 layers instead of 4, the fewest an
# induction head needs (one head to find the previous token, one to look after it), windows of 64 instead of 128, and
# the 1,000 most frequent ids instead of 2,000 (the logits' width: at 2,000 the unembedding was about two fifths of a
# step's arithmetic). Together they cut a step's time to well under half without delaying the head (issue 60: the
# default run within 3 minutes on a busy 2-core machine); the steps it forms at and the seconds, per seed and load,
# are in docs/benchmarks-history.md (`python -m benchmarks grow`), with the settings that did not form it sooner.
# Copy windows only, every step's softmax over the copy ids and no weight decay: the trainer steps those ids' embedding
# rows alone (gptviz.training.train.Trainer.trained_rows), the same model without the optimiser's passes over the
# other 49,000-odd rows, which no step can change and which were a large share of a step (issue 60.4).
# The run ends once the head has formed (issue 60: the whole 800 steps took minutes on a busy machine): every model's
# best induction score on the snapshots at or above the bar that defines "formed" (snapshots.FORMED_THRESHOLD) for
# background_job.FORMED_HOLD snapshots in a row; 0 runs every step.
GROWTH = dict(
    layers=2,
    d_model=128,
    heads=4,
    block=64,
    batch=64,
    lr=1e-3,
    warmup=100,
    steps=800,
    copy_vocab=1000,
    snapshot_every=10,
    stop_when_formed=0.5,
)
# One batch of held-out text for the trainer's own validation loss at the first and last step (the default 8 took a
# large share of the scenario's time at the full vocabulary; `python -m benchmarks grow` times the run); the snapshots
# measure what the scenario is about.
GROWTH_EVAL_BATCHES = 1


def induction_growth_spec(wirings=("pre",), seed: int = 0, init: str = "gpt2", **overrides) -> JobSpec:
    """The scenario as a job: each wiring one model, the same batches; `overrides` replace GROWTH's values."""
    g = {**GROWTH, **overrides}
    from ..model.config import PRESETS

    base = PRESETS["tiny"].replace(
        n_layers=g["layers"],
        d_model=g["d_model"],
        n_heads=g["heads"],
        n_ctx=g["block"],
        dropout=0.0,
        name=f"grow-{g['layers']}L-d{g['d_model']}",
    )
    configs = {norm: base.replace(norm=norm, name=f"{base.name}-{norm}") for norm in wirings}
    settings = TrainSettings(
        steps=g["steps"],
        batch_size=g["batch"],
        block_size=g["block"],
        lr=g["lr"],
        warmup=g["warmup"],
        min_lr_ratio=1.0,
        weight_decay=0.0,
        eval_every=10**6,
        seed=seed,
        corpus_vocab_steps=g["steps"],
        copy_fraction=1.0,
        copy_vocab=g["copy_vocab"],
        eval_batches=GROWTH_EVAL_BATCHES,
    )
    label = (
        f"grow an induction head: {g['layers']}L d{g['d_model']} {g['heads']}h, {', '.join(wirings)}-norm, "
        f"copy-only windows of {g['block']}, lr {g['lr']:g}, seed {seed}"
    )
    return JobSpec(
        configs, settings, init, label, snapshot_every=g["snapshot_every"], stop_when_formed=g["stop_when_formed"]
    )


def growth_wirings(choice: str) -> tuple[str, ...]:
    """The models the Heads forming page's wiring choice trains ("pre", "post", or "both": the two on the same
    batches)."""
    return ("pre", "post") if choice == "both" else (choice,)


@dataclass
class WarmupJob(Job):
    """The warmup scenario (gptviz.training.warmup) as a background run: its spec's configs are one per arm and seed (so
    the token budget and the progress count every run), and `scenario` says what to train. No model is kept."""

    scenario: object = None

    def run(self, tokens: torch.Tensor | None = None) -> None:
        from ..training.warmup import run_scenario
        from .live_generation import run_in_background, torch_threads

        background = threading.current_thread() is not threading.main_thread()
        if background:
            run_in_background()  # the pages' threads first, as Job.run
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
            if self.reservation is not None:  # the memory reserved at start (gptviz.serve.memory), as Job.run does
                self.reservation.release()

    def _on_record(self, name: str, record: dict) -> None:
        with self._lock:
            self._logs.setdefault(name, []).append(record)


def warmup_spec(scenario) -> JobSpec:
    """The JobSpec a WarmupJob runs under: one config per arm and seed, the steps, batch and block it trains."""
    from ..training.warmup import ARMS, split_name

    configs = {name: scenario.config(ARMS[split_name(name)[0]][0]) for name in scenario.run_names()}
    settings = TrainSettings(
        steps=scenario.steps,
        batch_size=scenario.batch_size,
        block_size=scenario.block,
        lr=scenario.lr,
        warmup=scenario.warmup,
        grad_clip=0.0,
        beta2=scenario.beta2,
    )
    return JobSpec(configs, settings, scenario.init, scenario.label)


def start_warmup(registry: JobRegistry, scenario, tokens: torch.Tensor | None = None, **kwargs) -> Job:
    """Start the warmup scenario under the registry's limits (JobLimitError as for any run)."""
    job = registry.start(warmup_spec(scenario), tokens, job_type=_bound_warmup(scenario), **kwargs)
    return job


def _bound_warmup(scenario) -> type[Job]:
    def make(*args, **kwargs) -> Job:
        return WarmupJob(*args, scenario=scenario, **kwargs)

    return make
