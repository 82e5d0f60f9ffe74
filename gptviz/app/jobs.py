"""What a visitor must not be able to reset: the server's generation slots, its training jobs and the models they
trained, each one object per process.

Not in st.cache_resource: any client can clear every Streamlit cache (the menu's "Clear cache", or the message
behind it), which handed out fresh slots past the server's caps, orphaned running jobs and restarted run ids, so
another visitor's trained models appeared in a victim's sidebar. Plain module objects survive that; they are built
on first use (the limits are read then) and live until the process ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from ..model.hooks import model_nbytes
from ..model.model import GPT
from ..serve import limits, memory
from ..serve.live_generation import GenerationSlots
from ..serve.training_jobs import JobRegistry

T = TypeVar("T")
_lock = threading.Lock()
_made: dict[str, object] = {}


def process_wide(name: str, make: Callable[[], T]) -> T:
    """The one object `name` of this process, made by `make()` on first use (thread-safe)."""
    with _lock:
        if name not in _made:
            _made[name] = make()
        return _made[name]  # type: ignore[return-value]


def session_id() -> str | None:
    """This browser session's id (None outside a Streamlit script run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def client_address() -> str:
    """The visitor's address as the server sees it ("" outside a browser session, e.g. AppTest)."""
    try:
        return st.context.ip_address or ""
    except Exception:  # no script run context
        return ""


def session_alive(sid: str | None) -> bool:
    """Whether session `sid` is still connected to this server (True where there is no server: AppTest)."""
    from streamlit import runtime

    if sid is None or not runtime.exists():
        return True
    return runtime.get_instance().is_active_session(sid)


class TrainedModels:
    """Models trained on the Train page, in memory, by run id (unique on the server), each with the session that
    trained it: the sidebar lists a session's own. At most `kept` are held; the oldest go first. What they hold
    counts in the server's memory budget (`accountant`), never dropped to make room for other work."""

    def __init__(self, kept: int, accountant: memory.MemoryAccountant | None = None):
        self.kept, self.accountant = kept, accountant
        self._models: dict[str, tuple[str | None, GPT]] = {}
        self._lock = threading.Lock()

    def add(self, run_id: str, model: GPT, owner: str | None) -> None:
        with self._lock:
            self._forget(run_id)
            self._models[run_id] = (owner, model.eval())
            self._count(model, +1)
            while len(self._models) > self.kept:
                self._forget(next(iter(self._models)))

    def _forget(self, run_id: str) -> None:
        entry = self._models.pop(run_id, None)
        if entry is not None:
            self._count(entry[1], -1)

    def _count(self, model: GPT, sign: int) -> None:
        if self.accountant is not None:
            self.accountant.stored(sign * model_nbytes(model))

    def get(self, run_id: str) -> GPT | None:
        with self._lock:
            entry = self._models.get(run_id)
        return entry[1] if entry is not None else None

    def of(self, owner: str | None) -> list[str]:
        with self._lock:
            return [run for run, (who, _) in self._models.items() if who == owner]


def trained_models() -> TrainedModels:
    return process_wide(
        "trained_models", lambda: TrainedModels(limits.server_limits().trained_kept, memory.accountant())
    )


def my_trained_models() -> dict[str, GPT]:
    """This session's trained models by run id."""
    store = trained_models()
    return {run: model for run in store.of(session_id()) if (model := store.get(run)) is not None}


def trained_run_id(job, name: str, model: GPT) -> str:
    """The id a job's trained model is listed under in the sidebar (unique on the server: run ids are)."""
    return f"{job.id} {name}-norm ({model.config.n_layers}L d{model.config.d_model})"


def register_job_models(job) -> None:
    """Offer a finished job's models to the session that trained it (Job.on_models: runs in the job's thread)."""
    for name, model in job.models.items():
        trained_models().add(trained_run_id(job, name, model), model, job.owner)


def generation_slots() -> GenerationSlots:
    """The server's live-generation slots (GPTVIZ_GENERATIONS), its queue and its per-address cap, shared by every
    session."""

    def make() -> GenerationSlots:
        lim = limits.server_limits()
        return GenerationSlots(lim.generations, lim.generations_per_address, lim.generation_queue)

    return process_wide("generation_slots", make)


def training_registry() -> JobRegistry:
    """The server's background training jobs; running jobs survive reruns, cache clears and code reloads."""

    def make() -> JobRegistry:
        lim = limits.server_limits()
        return JobRegistry(
            max_running=lim.training_jobs,
            per_owner=lim.jobs_per_session,
            max_tokens=lim.training_tokens,
            max_seconds=lim.training_seconds,
            per_address=lim.jobs_per_address,
            accountant=memory.accountant(),
            busy_elsewhere=lambda: generation_slots().running > 0,
        )

    return process_wide("training_registry", make)
