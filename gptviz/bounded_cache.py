"""A least-recently-used cache bounded by bytes, not entries, safe to share between Streamlit sessions' threads.

Streamlit's own caches bound the number of entries: 32 captures of gpt2-small at 1,024 tokens are ~17 GB. Here each
entry is weighed when it is stored, the oldest entries go until the new one fits, and an entry larger than the whole
budget is refused before it is built (the caller passes an estimate). Values are shared, not copied: callers treat
them as read-only. One key is built by one thread at a time; others wait for that result instead of building it
again (the second visitor of a new large model does not build a second copy)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from .limits import LimitError

V = TypeVar("V")


class BoundedCache(Generic[V]):
    def __init__(self, budget_bytes: int, what: str = "entry"):
        if budget_bytes < 1:
            raise ValueError("a cache needs a budget of at least one byte")
        self.budget, self.what = budget_bytes, what
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}

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

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def get_or_build(self, key: Hashable, build: Callable[[], V], size_of: Callable[[V], int],
                     estimate: int | None = None) -> V:
        """The cached value for `key`, or `build()` stored under it. `estimate`, when given, is checked against
        the budget before building (LimitError when it cannot fit even alone), and the least recently used entries
        are dropped first until it fits beside the rest, so the peak stays within the budget while it is built."""
        if estimate is not None and estimate > self.budget:
            raise LimitError(f"this {self.what} would take about {_mib(estimate)}, more than the "
                             f"{_mib(self.budget)} this server keeps for them")
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
            if estimate is not None:  # make room first: the cache and the value being built stay within the budget
                with self._lock:
                    total = sum(size for _, size in self._entries.values())
                    while self._entries and total + estimate > self.budget:
                        _, (_, dropped) = self._entries.popitem(last=False)
                        total -= dropped
            try:
                value = build()
                size = int(size_of(value))
                if size > self.budget:
                    raise LimitError(f"this {self.what} takes {_mib(size)}, more than the {_mib(self.budget)} "
                                     "this server keeps for them")
                with self._lock:  # stored before the gate is dropped, so no later caller builds it again
                    self._entries[key] = (value, size)
                    total = sum(s for _, s in self._entries.values())
                    while total > self.budget:
                        _, (_, dropped) = self._entries.popitem(last=False)
                        total -= dropped
            finally:
                with self._lock:
                    self._building.pop(key, None)
            return value


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"
