"""The seam through which a long measurement (a patching sweep, integrated gradients, the attribution graph) can be
stopped: it calls `clock.check()` between batches, and the clock raises once the work must stop. The methods define
only this protocol; the server passes its own clock (gptviz.serve.work_clock: a deadline and the visitor's session),
scripts and notebooks pass nothing and run unbounded."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """`check()` raises once the work must stop, and returns otherwise."""

    def check(self) -> None: ...


class Unbounded:
    """A clock that never stops anything."""

    def check(self) -> None:
        return None


UNBOUNDED = Unbounded()
