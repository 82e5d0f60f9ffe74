"""One accountant for every large allocation the server makes, so its peak stays under GPTVIZ_MEMORY_MB whatever
visitors do.

The caches bound what they keep (gptviz.serve.bounded_cache), but work in flight holds memory too: a capture's forward
pass and its patterns before they are stored, a generation's keys and values, a training run's model, gradients,
optimiser state and activations, a patching sweep, the Norms page's measurements. Each of these reserves its
estimate here before it allocates and gives it back when it ends (`reserve`, a context manager; `acquire` for work
that ends in another thread), and the caches report what they store, so one total covers both:

    stored (models, captures, trained models) + reserved (work in flight) <= budget

A reservation that does not fit first asks the caches to drop their least recently used entries (never one in
use), then, when values the caches dropped are still alive (`lingering`), runs Python's full collection once (what
holds them may be garbage: the reference cycles an ended visitor's session leaves; a full collection is costly in a
server, so only then),
then waits up to `wait_s` for other work to end, then is refused with a LimitError that says what was asked and
what holds the rest. The estimates (gptviz.model.sizes) are computed from the config and the sizes before anything runs;
they count float32 tensors at their peak, so what they miss is the fixed overhead: the interpreter, torch and the
page's own drawing (docs/benchmarks-history.md, "Hostile load", measures it). Memory the C allocator keeps after work
ends is resident too: before admitting work, the process's accountant counts it beside the rest and, when the work
would not fit beside it, gives it back to the kernel first (gptviz.serve.allocator).

The library never reserves by itself: the app does (gptviz.app.model_service, jobs, live), so scripts and notebooks run
unbounded. No Streamlit here: the accountant is a module object no client can clear.
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Protocol

from . import allocator
from .limits import LimitError, server_limits

# The share of the budget left for what no estimate counts (the pages' drawing, Python objects, a capture's transient
# beyond its estimate): past the rest, the allocator's freed memory goes back to the kernel.
UNCOUNTED_HEADROOM = 0.1


class Store(Protocol):
    """A cache whose stored bytes count against the budget (it reports them with `accountant.stored(delta)`). An
    optional `drop_order` attribute: lower ones are asked for room first (0 when absent); an optional `lingering`:
    bytes of entries it dropped that are still alive, and still counted."""

    def make_room(self, nbytes: int) -> int:
        """Drop least recently used entries not in use until `nbytes` are freed or none is left; bytes freed."""


class Reservation:
    """Bytes held for one piece of work; `release()` gives them back (once; later calls do nothing)."""

    def __init__(self, accountant: MemoryAccountant, nbytes: int, what: str):
        self.accountant, self.nbytes, self.what = accountant, nbytes, what
        self._released = False

    def release(self) -> None:
        self.accountant._release(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class MemoryAccountant:
    """The server's memory budget: what the caches store plus what work in flight has reserved. Thread-safe."""

    def __init__(
        self,
        budget_bytes: int,
        wait_s: float = 30.0,
        *,
        resident: Callable[[], int | None] | None = None,
        release_freed: Callable[[], object] | None = None,
    ):
        """`resident` reads the process's resident bytes and `release_freed` gives the allocator's freed memory back
        to the kernel (gptviz.serve.allocator's, for the server; None: only what is counted is looked at). The
        resident size at creation is the fixed overhead; whatever grows beyond it and the count is uncounted."""
        if budget_bytes < 1:
            raise ValueError("the memory budget must be at least one byte")
        self.budget, self.wait_s = budget_bytes, wait_s
        self._resident, self._release_freed = resident, release_freed
        self._overhead = (resident() or 0) if resident is not None else 0
        self.releases_of_freed = 0  # how often kept memory went back to the kernel to make room
        self._cond = threading.Condition()
        self._stored = 0
        self._work: dict[int, Reservation] = {}
        self._stores: list[Store] = []
        self.peak = 0  # the most ever accounted at once (stored + reserved)

    # ---- what is held ---------------------------------------------------------------------------------------
    @property
    def reserved(self) -> int:
        with self._cond:
            return sum(r.nbytes for r in self._work.values())

    @property
    def stored_bytes(self) -> int:
        with self._cond:
            return self._stored

    @property
    def in_use(self) -> int:
        with self._cond:
            return self._total()

    def holders(self) -> list[str]:
        """What the work in flight is, for messages."""
        with self._cond:
            return [r.what for r in self._work.values()]

    def _total(self) -> int:
        return self._stored + sum(r.nbytes for r in self._work.values())

    # ---- caches ---------------------------------------------------------------------------------------------
    def add_store(self, store: Store) -> None:
        """Count a cache in the budget: it reports its stored bytes (`stored`) and drops entries on request."""
        with self._cond:
            self._stores.append(store)

    def stored(self, delta: int) -> None:
        """A cache stored (`delta` > 0) or dropped (< 0) bytes. Storing is never refused here: the cache's work
        reserved its estimate first and releases it just after, so the peak was already accounted."""
        with self._cond:
            self._stored += delta
            self.peak = max(self.peak, self._total())
            if delta < 0:
                self._cond.notify_all()

    # ---- work in flight -------------------------------------------------------------------------------------
    def acquire(self, nbytes: int, what: str, wait_s: float | None = None) -> Reservation:
        """Hold `nbytes` for `what` (a phrase: "a capture of 682 tokens on gpt2-small"), dropping cached entries
        and then waiting up to `wait_s` (the accountant's default) for room; LimitError when it cannot fit.
        Release it with `.release()` or use it as a context manager."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot reserve a negative number of bytes ({nbytes})")
        if nbytes > self.budget:
            raise LimitError(
                f"{what} needs about {mib(nbytes)}, more than this server's whole memory budget of "
                f"{mib(self.budget)} (GPTVIZ_MEMORY_MB): try a shorter prompt or a smaller model"
            )
        wait_s = self.wait_s if wait_s is None else wait_s
        deadline = time.monotonic() + wait_s
        collected = False
        while True:
            with self._cond:
                short = self._total() + nbytes - self.budget
                if short <= 0:
                    self._give_back_freed_memory_if_over(nbytes)
                    reservation = Reservation(self, nbytes, what)
                    self._work[id(reservation)] = reservation
                    self.peak = max(self.peak, self._total())
                    return reservation
                stores = list(self._stores)
            # outside our lock: a cache takes its own lock, then reports back here (one lock order only)
            if self._drop_for(short, stores) >= short:
                continue
            if not collected and any(getattr(store, "lingering", 0) for store in stores):
                collected = True
                gc.collect()  # outside our lock: finalizers report back here
                continue
            with self._cond:
                if self._total() + nbytes <= self.budget:
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LimitError(self._refusal(nbytes, what))
                self._cond.wait(min(left, 0.5))  # woken by a release; a cache dropping entries re-checks too

    @staticmethod
    def _drop_for(short: int, stores: list[Store]) -> int:
        """Ask the caches for `short` bytes, cheapest to rebuild first, and no more than that: each drops only what
        the ones before it did not free. The bytes freed."""
        freed = 0
        for store in sorted(stores, key=lambda store: getattr(store, "drop_order", 0)):
            if freed >= short:
                break
            freed += store.make_room(short - freed)
        return freed

    def _give_back_freed_memory_if_over(self, nbytes: int) -> None:
        """Give the allocator's freed memory back when the process, with `nbytes` more, would hold more than
        (1 - UNCOUNTED_HEADROOM) of the budget beyond its fixed overhead: at admission, and after work ends. Called
        under the lock, so two admissions cannot both skip it. Never a refusal: only the count decides that."""
        if self._resident is None or self._release_freed is None:
            return
        held = (self._resident() or 0) - self._overhead
        if max(held, self._total()) + nbytes > self.budget * (1 - UNCOUNTED_HEADROOM):
            self._release_freed()
            self.releases_of_freed += 1

    @contextmanager
    def reserve(self, nbytes: int, what: str, wait_s: float | None = None):
        """`with accountant.reserve(n, what):` holds n bytes for the block and releases them however it ends."""
        reservation = self.acquire(nbytes, what, wait_s)
        try:
            yield reservation
        finally:
            reservation.release()

    def _release(self, reservation: Reservation) -> None:
        with self._cond:
            if reservation._released:
                return
            reservation._released = True
            self._work.pop(id(reservation), None)
            self._cond.notify_all()
            self._give_back_freed_memory_if_over(0)

    def _refusal(self, nbytes: int, what: str) -> str:
        work = [r.what for r in self._work.values()]
        busy = f"; in progress: {', '.join(work[:3])}{' and more' if len(work) > 3 else ''}" if work else ""
        return (
            f"the server's memory is busy: {what} needs about {mib(nbytes)} and {mib(self._total())} of its "
            f"{mib(self.budget)} (GPTVIZ_MEMORY_MB) are held by models in use and other visitors' work{busy}. "
            "Try again in a moment, or with a shorter prompt"
        )


@functools.lru_cache(maxsize=1)
def accountant() -> MemoryAccountant:
    """The process's accountant, its budget GPTVIZ_MEMORY_MB (made on first use, never cleared)."""
    return MemoryAccountant(
        server_limits().memory_mb * 2**20,
        resident=allocator.resident_bytes,
        release_freed=allocator.release_freed_memory,
    )


def reserve(nbytes: int, what: str, wait_s: float | None = None):
    """`with memory.reserve(n, what):` on the process's accountant."""
    return accountant().reserve(nbytes, what, wait_s)


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"
