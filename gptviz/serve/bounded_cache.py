"""A least-recently-used cache bounded by bytes, not entries, safe to share between Streamlit sessions' threads.

Streamlit's own caches bound the number of entries: 32 captures of gpt2-small at 1,024 tokens are ~17 GB. Here each
entry is weighed when it is stored, the oldest entries go until the new one fits, and an entry larger than the whole
budget is refused before it is built (the caller passes an estimate). Values are shared, not copied: callers treat
them as read-only. One key is built by one thread at a time; others wait for that result instead of building it
again (the second visitor of a new large model does not build a second copy). A build in progress holds its
estimate against the budget until it is stored, so ten visitors' captures built at once cannot pass it together:
a build that does not fit beside the others waits for them (up to `wait_s`), then is refused.

With an `accountant` (gptviz.serve.memory), what the cache stores counts in the server's one memory budget beside work
in flight: a build reserves its working memory there too before it runs (`work`, the estimate by default), and the
accountant may ask the cache to drop its least recently used entries (`make_room`) to fit other work. A value still
in use when it is dropped (a page drawing a capture) is not freed by the drop: with a `witness`, an object that lives
as long as anything uses the value, its bytes stay counted there until that object is gone (issue 43: three pages
drawing long captures of gpt2-small held two the cache had dropped, hundreds of MiB the budget no longer saw).

Something still holding a dropped value may be garbage: a reference cycle (what a visitor's ended session keeps of
its pages) that only Python's full collection frees, and a server's full collection comes rarely (after its
long-lived objects grow by a quarter; a model is a few thousand objects, however many bytes). With `collect_garbage`
(the model store), a drop that leaves a value alive runs that collection once the cache's lock is released: before,
twenty 100 MiB model folders opened one after another kept every model (issue 57). What is truly in use stays, and
stays counted; `lingering` is what the dropped values still alive hold, for the accountant (gptviz.serve.memory)."""

from __future__ import annotations

import gc
import itertools
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from .limits import LimitError
from .memory import MemoryAccountant

V = TypeVar("V")


class BoundedCache(Generic[V]):
    def __init__(
        self,
        budget_bytes: int,
        what: str = "entry",
        wait_s: float = 30.0,
        accountant: MemoryAccountant | None = None,
        witness: Callable[[V], object] | None = None,
        drop_order: int = 0,
        collect_garbage: bool = False,
    ):
        """`drop_order`: when the accountant needs room, caches with a lower one drop entries first (what is cheapest
        to rebuild: derived results, then captures, then models). `collect_garbage`: run Python's full collection when
        a dropped value outlives its drop (needs a witness; for large values dropped rarely: a collection on a
        server takes tens of milliseconds)."""
        if budget_bytes < 1:
            raise ValueError("a cache needs a budget of at least one byte")
        self.budget, self.what, self.wait_s = budget_bytes, what, wait_s
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified when a build in progress ends
        self._building: dict[Hashable, threading.Lock] = {}
        self._reserved = 0  # estimates of the builds in progress
        self._held: dict[Hashable, int] = {}  # entries in use (a running generation's model): never dropped
        self.accountant, self.witness, self.drop_order = accountant, witness, drop_order
        self.collect_garbage = collect_garbage
        # dropped values still alive, by their finalizer: their bytes, still counted (dict operations are atomic,
        # and a finalizer may run inside any allocation, so it takes no lock)
        self._lingering: dict[int, int] = {}
        self._tokens = itertools.count()
        self._collect_wanted = False
        if accountant is not None:
            accountant.add_store(self)

    @property
    def reserved(self) -> int:
        """Bytes held for builds in progress."""
        with self._lock:
            return self._reserved

    @property
    def lingering(self) -> int:
        """Bytes of dropped entries still alive (a witness not yet gone), still counted in the accountant."""
        return sum(list(self._lingering.values()))

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def peek(self, key: Hashable) -> V | None:
        """The value stored under `key`, or None; never builds."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def clear(self) -> None:
        with self._lock:
            self._drop([self._entries.popitem(last=False)[1] for _ in range(len(self._entries))])
        self._collect_dropped()

    def discard(self, which: Callable[[Hashable], bool]) -> int:
        """Drop the entries not in use whose key `which` accepts (a visitor's upload, gone with its session); how many
        were dropped."""
        with self._lock:
            keys = [key for key in self._entries if key not in self._held and which(key)]
            self._drop([self._entries.pop(key) for key in keys])
        self._collect_dropped()
        return len(keys)

    def make_room(self, nbytes: int) -> int:
        """Drop the least recently used entries not in use until `nbytes` are freed or none is left (the
        accountant asks, for other work); the bytes freed."""
        with self._lock:
            total = self._total()
            self._drop_oldest(total - nbytes)
            freed = total - self._total()
        self._collect_dropped()
        return freed

    def _report(self, delta: int) -> None:
        if delta and self.accountant is not None:
            self.accountant.stored(delta)

    def get_or_build(
        self,
        key: Hashable,
        build: Callable[[], V],
        size_of: Callable[[V], int],
        estimate: int | None = None,
        work: int | None = None,
        what: str | None = None,
    ) -> V:
        """The cached value for `key`, or `build()` stored under it. `estimate`, when given, is checked against
        the budget before building (LimitError when it cannot fit even alone), and the least recently used entries
        are dropped first until it fits beside the rest, so the peak stays within the budget while it is built.
        With an accountant, `work` bytes (the build's peak; `estimate` when not given) are reserved there for
        `what` before building and released once the value is stored (counted as stored from then on)."""
        if estimate is not None and estimate > self.budget:
            raise LimitError(
                f"this {self.what} would take about {_mib(estimate)}, more than the "
                f"{_mib(self.budget)} this server keeps for them"
            )
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
            gate = self._building.setdefault(key, threading.Lock())
        with gate:  # one builder per key; the others find its result when they get the gate
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key][0]
            if estimate is not None:
                self._reserve(estimate)
                self._collect_dropped()  # what made room for this build goes before it allocates
            reservation = None
            try:
                work = estimate if work is None else work
                if self.accountant is not None and work is not None:
                    reservation = self.accountant.acquire(work, what or f"building a {self.what}")
                value = build()
                size = int(size_of(value))
                if size > self.budget:
                    raise LimitError(
                        f"this {self.what} takes {_mib(size)}, more than the {_mib(self.budget)} "
                        "this server keeps for them"
                    )
                with self._lock:  # stored before the gate is dropped, so no later caller builds it again
                    self._entries[key] = (value, size)
                    self._report(size)
                    self._drop_oldest(self.budget - max(0, self._in_flight() - (estimate or 0)))
            finally:
                if reservation is not None:  # after storing: the value is counted as stored before this goes
                    reservation.release()
                with self._lock:
                    self._building.pop(key, None)
                    if estimate is not None:
                        self._reserved -= estimate
                        self._room.notify_all()
            self._collect_dropped()
            return value

    def _reserve(self, estimate: int) -> None:
        """Hold `estimate` bytes for a build: drop the least recently used entries until it fits beside the rest
        and the other builds in progress; when those builds alone leave no room, wait for one to end (LimitError
        after wait_s), so the peak stays within the budget while things are built. With an accountant too: letting
        the accountant alone bound three long captures of gpt2-small at once raised the server's peak by hundreds of
        MiB (the pages drawing them hold copies the budget does not see; docs/benchmarks-history.md, "Hostile load";
        `python -m benchmarks hostile` runs concurrent large captures)."""
        with self._lock:
            deadline = None
            while True:
                self._drop_oldest(self.budget - self._in_flight() - estimate)
                if self._total() + self._in_flight() + estimate <= self.budget:
                    self._reserved += estimate
                    return
                deadline = deadline or (time.monotonic() + self.wait_s)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LimitError(
                        f"the server is building other {self.what}s that fill the "
                        f"{_mib(self.budget)} it keeps for them; try again in a moment"
                    )
                self._room.wait(left)

    def hold(self, key: Hashable) -> Callable[[], None]:
        """Keep `key`'s entry while it is in use (a generation still running on a model): it is not dropped to
        make room, so what it holds stays counted, and builds that do not fit beside it wait or are refused.
        Returns the release function (call it once, when done); a key not stored holds nothing."""
        with self._lock:
            if key not in self._entries:
                return lambda: None
            self._held[key] = self._held.get(key, 0) + 1
        released = threading.Event()

        def release() -> None:
            if released.is_set():
                return
            released.set()
            with self._lock:
                self._held[key] -= 1
                if not self._held[key]:
                    del self._held[key]
                self._room.notify_all()

        return release

    def _in_flight(self) -> int:
        """Bytes of builds in progress, counted against this cache's budget (lock held)."""
        return self._reserved

    def _total(self) -> int:
        return sum(size for _, size in self._entries.values())

    def _freed(self, value: V, size: int) -> tuple[int | None, int]:
        """(None, size) for a dropped entry whose bytes are free now; with a witness, (its token, size): they stay
        counted, as `lingering`, until the witness is gone (then they are reported freed)."""
        if self.accountant is None or self.witness is None or size == 0:
            return None, size
        token = next(self._tokens)
        self._lingering[token] = size
        weakref.finalize(self.witness(value), self._gone, token)
        return token, size

    def _gone(self, token: int) -> None:
        """A dropped value's witness is gone: its bytes are free (may run in any thread, inside any allocation)."""
        self._report(-self._lingering.pop(token, 0))

    def _collect_dropped(self) -> None:
        """With collect_garbage: Python's full collection, when a value dropped since the last one is still alive
        (called with the cache's lock released: a collection runs finalizers)."""
        if self._collect_wanted:
            self._collect_wanted = False
            gc.collect()

    def _drop_oldest(self, room: int) -> None:
        """Drop the least recently used entries until the stored ones take at most `room` bytes (lock held)."""
        total, dropped = self._total(), []
        for key in [k for k in self._entries if k not in self._held]:  # oldest first
            if total <= room:
                break
            dropped.append(self._entries.pop(key))
            total -= dropped[-1][1]
        self._drop(dropped)

    def _drop(self, entries: list[tuple[V, int]]) -> None:
        """Let go of entries taken out of the store (lock held): report what they free, and note whether one
        outlived it (a value nothing else holds goes at once, and its witness reports it)."""
        tokens = [self._freed(value, size) for value, size in entries]
        entries.clear()
        self._report(-sum(size for token, size in tokens if token is None))
        if self.collect_garbage and any(token in self._lingering for token, _ in tokens if token is not None):
            self._collect_wanted = True


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"
