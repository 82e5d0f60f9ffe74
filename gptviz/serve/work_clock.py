"""Bounds in time for long measurements a visitor starts (patching sweeps, integrated gradients): a deadline the
operator sets (GPTVIZ_SWEEP_SECONDS) and a stop when the visitor's browser session ends.

A 1,000-token patching pair on gpt2-small ran for over half an hour, most of it after its tab was closed: nothing
stopped it. The work checks its clock between batches (a batch is about a second on a CPU), so a stop lands within one
batch. No Streamlit here: the app passes `alive` (gptviz.app.jobs.session_alive), scripts pass nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .limits import LimitError


class WorkStopped(LimitError):
    """A long measurement was stopped: past its time limit, or its visitor left. The message says which."""


class WorkClock:
    """`check()` between batches raises WorkStopped once `seconds` have passed or `alive()` turns false (the
    methods' Clock protocol, gptviz.methods.clock)."""

    def __init__(
        self,
        seconds: float,
        what: str,
        alive: Callable[[], bool] = lambda: True,
        now: Callable[[], float] = time.monotonic,
    ):
        self.seconds, self.what, self.alive, self.now = seconds, what, alive, now
        self.started = now()
        self.checks = 0

    @property
    def elapsed(self) -> float:
        return self.now() - self.started

    def check(self) -> None:
        self.checks += 1
        if not self.alive():
            raise WorkStopped(f"{self.what} was stopped: its browser session ended")
        if self.elapsed > self.seconds:
            raise WorkStopped(
                f"{self.what} was stopped after {self.elapsed:.0f} s, past this server's limit of "
                f"{self.seconds:.0f} s for one measurement (GPTVIZ_SWEEP_SECONDS): try shorter prompts "
                "or a smaller model"
            )


def too_long(estimate_s: float, limit_s: float, what: str) -> str | None:
    """The refusal for work estimated past the limit before it starts; None when it fits."""
    if estimate_s <= limit_s:
        return None
    return (
        f"{what} would take about {estimate_s:,.0f} s on this server now, more than its limit of {limit_s:,.0f} s "
        "for one measurement (GPTVIZ_SWEEP_SECONDS): try shorter prompts or a smaller model"
    )
