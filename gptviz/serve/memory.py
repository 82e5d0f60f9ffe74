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
holds them may be garbage: the reference cycles an ended visitor's session leaves; about 0.14 s of CPU in a server),
then waits up to `wait_s` for other work to end, then is refused with a LimitError that says what was asked and
what holds the rest. The estimates (below) are computed from the config and the sizes before anything runs;
they count float32 tensors at their peak, so what they miss is the fixed overhead: the interpreter, torch and the
page's own drawing (docs/benchmarks-history.md, "Hostile load", measures it). Memory the C allocator keeps after work
ends is resident too: before admitting work, the process's accountant counts it beside the rest and, when the work
would not fit beside it, gives it back to the kernel first (gptviz.serve.allocator).

The library never reserves by itself: the app does (gptviz.app.models, jobs, live), so scripts and notebooks run
unbounded. No Streamlit here: the accountant is a module object no client can clear.
"""
from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Protocol

from . import allocator
from .limits import LimitError, server_limits

FLOAT32 = 4
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

    def __init__(self, accountant: "MemoryAccountant", nbytes: int, what: str):
        self.accountant, self.nbytes, self.what = accountant, nbytes, what
        self._released = False

    def release(self) -> None:
        self.accountant._release(self)

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class MemoryAccountant:
    """The server's memory budget: what the caches store plus what work in flight has reserved. Thread-safe."""

    def __init__(self, budget_bytes: int, wait_s: float = 30.0, *, resident: Callable[[], int | None] | None = None,
                 release_freed: Callable[[], object] | None = None):
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
            raise LimitError(f"{what} needs about {mib(nbytes)}, more than this server's whole memory budget of "
                             f"{mib(self.budget)} (GPTVIZ_MEMORY_MB): try a shorter prompt or a smaller model")
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
        return (f"the server's memory is busy: {what} needs about {mib(nbytes)} and {mib(self._total())} of its "
                f"{mib(self.budget)} (GPTVIZ_MEMORY_MB) are held by models in use and other visitors' work{busy}. "
                "Try again in a moment, or with a shorter prompt")


@functools.lru_cache(maxsize=1)
def accountant() -> MemoryAccountant:
    """The process's accountant, its budget GPTVIZ_MEMORY_MB (made on first use, never cleared)."""
    return MemoryAccountant(server_limits().memory_mb * 2**20, resident=allocator.resident_bytes,
                            release_freed=allocator.release_freed_memory)


def reserve(nbytes: int, what: str, wait_s: float | None = None):
    """`with memory.reserve(n, what):` on the process's accountant."""
    return accountant().reserve(nbytes, what, wait_s)


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


# ---- estimates: float32 bytes at the peak, from the config and sizes alone -----------------------------------

def forward_nbytes(config, T: int, batch: int = 1, *, patterns: bool = True, all_logits: bool = True) -> int:
    """Working memory of one forward pass over `batch` sequences of T tokens, beyond the weights: the residual
    stream and what one block holds at once (norm, q/k/v, the attention's output, the MLP's hidden units twice),
    one layer's attention scores and weights when they are materialised (`patterns`: hooks record them; the fused
    kernel does not), and the logits (every position's, or the last one's)."""
    per_token = 10 * config.d_model + 2 * config.d_ff
    attention = 3 * config.n_heads * T * T if patterns else 0
    logits = (T if all_logits else 1) * config.vocab_size
    return FLOAT32 * batch * (T * per_token + attention + logits)


def capture_work_nbytes(config, names: Iterable[str], T: int) -> int:
    """A capture at its peak: what it keeps (hooks.capture_nbytes, with the logits) plus the forward pass's
    working memory beside it (the logits counted once)."""
    from ..model.hooks import capture_nbytes
    names = list(names)
    materialised = any(n.endswith(("attn.hook_pattern", "attn.hook_attn_scores")) for n in names)
    working = forward_nbytes(config, T, patterns=materialised, all_logits=False)
    # What a capture keeps is allocated between the forward pass's short-lived blocks, so the heap cannot reuse every
    # hole they leave: measured as resident growth in fresh processes (tests/rss_growth.py page_capture, gpt2-small,
    # 4 runs each), the overhead beyond what was kept reached 1.45x the working memory at 256 tokens, 1.55x at 384
    # and 1.7x at 512 (366 MiB against 323 counted; CI failed on 237 against 209 at 384). Counted twice when
    # anything is kept; a plain forward pass keeps nothing between its blocks.
    fragmentation = working - FLOAT32 * config.vocab_size if names else 0
    return capture_nbytes(config, names, T) + working + fragmentation


def kv_cache_nbytes(config, batch: int = 1, itemsize: int = FLOAT32) -> int:
    """A KV cache: keys and values of every layer for the whole context (allocated at once: model.KVCache)."""
    return 2 * config.n_layers * batch * config.n_ctx * config.d_model * itemsize


def generation_nbytes(config, prompt_tokens: int, new_tokens: int) -> int:
    """A live generation with attention recorded: its KV cache, the first step's forward pass over the prompt
    with every layer's patterns captured, and the steps it keeps (each the predicting row of every layer's
    attention and the next-token distribution)."""
    T = min(prompt_tokens, config.n_ctx)
    first = forward_nbytes(config, T, all_logits=False) + FLOAT32 * config.n_layers * config.n_heads * T * T
    step = FLOAT32 * (config.n_layers * config.n_heads * config.n_ctx + 3 * config.vocab_size)
    return kv_cache_nbytes(config) + first + new_tokens * step


def activation_nbytes(config, batch: int, block: int, *, patterns: bool = False) -> int:
    """What autograd keeps of a forward pass for the backward: each block's inputs, norms, q/k/v, attention output,
    MLP hidden units, and the attention scores and weights where they are materialised (`patterns`: hooks record
    them; the fused kernel keeps none); the logits, their softmax and gradient."""
    per_layer = batch * block * (12 * config.d_model + 3 * config.d_ff)
    if patterns:
        per_layer += 3 * batch * config.n_heads * block * block
    return FLOAT32 * (config.n_layers * per_layer + 3 * batch * block * config.vocab_size)


def training_nbytes(config, batch: int, block: int) -> int:
    """One model in training: weights, gradients and AdamW's two moments (4 copies of the parameters) and the
    activations of one batch."""
    from ..model.params import total_params
    return FLOAT32 * 4 * total_params(config) + activation_nbytes(config, batch, block)


def measuring_nbytes(config, T: int) -> int:
    """The Norms page's measurement of both wirings (gptviz.methods.wiring.compare_wirings): one set of weights the twins
    share, one wiring's gradients at a time, and the activations of its forward pass on T tokens."""
    from ..model.params import total_params
    return FLOAT32 * 2 * total_params(config) + activation_nbytes(config, 1, T, patterns=True)


def model_build_nbytes(config, itemsize: int = FLOAT32) -> int:
    """A model being built: its weights, allocated once (GPT is made on the meta device), and the row-major buffer
    its largest tensor is drawn into before being copied in (gptviz.model.model._draw; one tensor at a time). gpt2-xl
    peaks at 1.05x its weights (bench_build.py measured 1.07x), an embedding-heavy model far above (a 2-layer
    gpt2-small: 1.72x; a flat tenth more, the earlier rule, missed it by 127 MiB)."""
    from ..model.params import total_params
    d = config.d_model
    largest = max(config.vocab_size * d, config.n_ctx * d, 3 * d * d, config.d_ff * d)
    return itemsize * (total_params(config) + largest)


def sampling_nbytes(config, prompt_tokens: int, new_tokens: int) -> int:
    """generate() without attention recorded (a continuation): its KV cache (two once the context is full: the new
    one is made before the old one is dropped), a forward pass over the window for the last position's logits, and
    one step's logits, probabilities and mask (generate keeps no step)."""
    window = max(1, min(prompt_tokens + max(new_tokens - 1, 0), config.n_ctx))
    caches = 2 if prompt_tokens + new_tokens > config.n_ctx else 1
    return (caches * kv_cache_nbytes(config) + forward_nbytes(config, window, patterns=False, all_logits=False)
            + FLOAT32 * 3 * config.vocab_size)


def lens_nbytes(config, T: int) -> int:
    """The logit lens on a capture of T tokens (gptviz.methods.logit_lens): the stacked residual states (layers
    + 1) and one normed copy, and per state its [T, vocab] logits and probabilities beside the previous state's
    probabilities (the loop decodes one state at a time)."""
    return FLOAT32 * ((config.n_layers + 2) * T * config.d_model + 3 * T * config.vocab_size)


def direct_effect_nbytes(config) -> int:
    """A unit's direct effect on the logits (gptviz.index.direct_effect, head_direct_effect): a residual direction
    through the norms after it (a few d_model vectors each) and its product with the unembedding, [vocab], beside
    its negation for the bottom k."""
    return FLOAT32 * (2 * config.vocab_size + (2 * config.n_layers + 6) * config.d_model)
