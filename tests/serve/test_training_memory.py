"""The Heads forming page's "Grow one yourself" run against its reservation (training_jobs.job_nbytes).

Issue 43: it reserved 5,008 MiB (of the default 8,192) where it peaked 3,389 MiB above its baseline. Issue 57: measured
as a one-step run in the test's own thread it fitted its 522 MiB, but the server grew 791-799 MiB during a visitor's
run: the server runs it in a thread of its own (its own heap arena), keeps freed memory (gptviz.serve.allocator), draws
the page beside it, and the heap grows over the first steps. So each wiring the page offers is measured here as the
server runs it (benchmarks/bench_grow_induction.py, peak_growth), a fresh child process each, for a few steps of the
page's own run; `python -m benchmarks grow -- --memory` measures longer runs. The run now gives its freed memory back
after each step (background_job.Job._on_step): without that these 6 steps grew +603 to +892 MiB against 522 and 626."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks.bench_grow_induction import measure_peak
from gptviz.app.settings_choices import GROW_WIRINGS
from gptviz.serve.training_jobs import growth_wirings, induction_growth_spec, job_nbytes

MiB = 2**20
# Steps of each measured run: the heap's growth comes within the first few steps (the whole runs: benchmarks history).
STEPS = 6


@pytest.fixture(scope="module")
def growths() -> dict:
    """Each wiring's measured growth, two child processes at a time (each one's peak is its own); an exception is
    kept for its own test to raise."""

    def measure(wiring):
        try:
            return measure_peak(wiring, STEPS, timeout=900)
        except Exception as error:  # noqa: BLE001 (kept for the test of that wiring)
            return error

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(GROW_WIRINGS, pool.map(measure, GROW_WIRINGS), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("wiring", GROW_WIRINGS)  # every run the page can start: the seed changes no size
def test_the_grow_pages_reservation_covers_the_run_as_the_server_runs_it(growths, wiring):
    growth = growths[wiring]
    if isinstance(growth, Exception):
        raise growth
    reserved = job_nbytes(induction_growth_spec(growth_wirings(wiring)))  # the page's run, all its steps
    # covered, and not far above: the whole run grows more than its first steps do (pre: these 6 steps grew 191.5 MiB
    # in one full suite, while the whole run peaks about +277 MiB against 403 reserved: docs/benchmarks-history.md)
    assert growth <= reserved <= 2.5 * growth, (growth / MiB, reserved / MiB)
