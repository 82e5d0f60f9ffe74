"""Each written token's top contributors, found as a live generation writes (issue 58): the nodes at its own position
with the largest direct effect on its logit (gptviz.methods.graph_direct), from what the step captured.

They are found in the generation's own thread, in batches: a batch reads each output matrix once for all its steps,
so its cost is shared by them. A batch is taken at most every BATCH_EVERY_S (the live view redraws as often, so no
line shows later for it), or less often where a batch costs more than SHARE of the time between batches (a large
model's read of every output matrix); at once when the KV caches that waiting steps past the context keep alive
(each such step makes one of its own) pass HELD_BYTES. A thread of their own, at the lowest priority, cost the model
more: the two took turns at the interpreter, and under load the low-priority one held it while it waited for a core.
`python -m benchmarks live-why` measures the model's rate with and without them (docs/attribution-graph.md).
"""

from __future__ import annotations

import time

from ..methods.graph_contributors import Contributors
from ..methods.graph_direct import DirectStep, direct_contributors
from ..model.sizes import LIVE_CONTRIBUTORS_HELD_BYTES as HELD_BYTES
from ..model.sizes import live_contributors_batch

BATCH_EVERY_S = 0.1
SHARE = 0.05  # of the model's time, at most, between batches


class LiveContributors:
    """Contributors for a generation's steps, found in its thread: `submit(i, record)` after step i (it may take a
    batch then), `flush()` at the end; `found` {step: its Contributors} (other threads read `snapshot()`), `lag`
    {step: seconds from its submit to its contributors}, `error` (a failure stops them, never the generation)."""

    def __init__(self, model, n: int = 3, clock=time.perf_counter):
        self.model, self.n, self._clock = model, n, clock
        self.found: dict[int, Contributors] = {}
        self.lag: dict[int, float] = {}
        self.error: str | None = None
        self._pending: list[tuple[int, DirectStep, float]] = []
        self._batch = live_contributors_batch(model.config)
        self._next_batch = 0.0  # the clock's time from which the next batch may be taken
        self._held = 0  # bytes of the KV caches that steps past the context keep alive while they wait

    def snapshot(self) -> dict[int, Contributors]:
        """`found` as it is now, a copy taken at once (one C-level copy under the GIL): this thread adds to `found`
        while pages read it, and iterating the dict itself could meet an insertion ("dictionary changed size during
        iteration")."""
        return dict(self.found)

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def submit(self, i: int, record) -> None:
        """Step i's record (a StepRecord with `captured`, `values` and `attention`), queued; the batch is taken now
        when it is full, when its time has come, or when this step has a KV cache of its own (past the context)."""
        if self.error is not None:
            return
        inputs = DirectStep(
            record.captured,
            record.values,
            record.attention,
            record.position - 1,
            int(record.token_id),
            float(record.logits[record.token_id]),
        )
        now = self._clock()
        self._pending.append((i, inputs, now))
        if record.context_shifted:  # a KV cache of its own, which its values keep alive while it waits
            self._held += record.values.storage_size
        if self._held > HELD_BYTES or len(self._pending) >= self._batch or now >= self._next_batch:
            self.flush()

    def release(self) -> None:
        """No more steps: let go of the model and the steps still waiting (what was found stays)."""
        self.model, self._pending, self._held = None, [], 0

    def flush(self) -> None:
        """Find the contributors of every step waiting."""
        if not self._pending or self.error is not None or self.model is None:
            return
        taken, self._pending, self._held = self._pending, [], 0
        started = self._clock()
        try:
            found = direct_contributors(self.model, [inputs for _, inputs, _ in taken], n=self.n)
        except Exception as err:  # shown on the page; the text goes on without them
            self.error = f"{type(err).__name__}: {err}"
            return
        now = self._clock()
        for (i, _, submitted), contributors in zip(taken, found, strict=True):
            self.found[i], self.lag[i] = contributors, now - submitted
        self._next_batch = now + max(BATCH_EVERY_S, (now - started) / SHARE)
