"""Where a benchmark run writes what it measured: a folder of its own, benchmarks/runs/<UTC time>/ (ignored by git),
never the tracked tables (benchmarks/current.md, benchmarks/results.md); `python -m benchmarks --update-current`
copies a run's figures into those.

`python -m benchmarks` makes the folder and names it to each script it runs in GPTVIZ_BENCH_RUN_DIR, so one run's
files are together; a script run alone makes a folder of its own. GPTVIZ_BENCH_RUNS moves the parent (for tests)."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = "GPTVIZ_BENCH_RUN_DIR"


def runs() -> Path:
    """The parent of the run folders: GPTVIZ_BENCH_RUNS, else benchmarks/runs."""
    return Path(os.environ.get("GPTVIZ_BENCH_RUNS") or HERE / "runs")


def new_run_folder(parent: Path | None = None) -> Path:
    """A new, empty folder named by the UTC time now (a suffix when two runs start in the same second)."""
    parent = parent or runs()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        folder = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run folder for {stamp} in {parent}")


def run_folder() -> Path:
    """This run's folder: the one GPTVIZ_BENCH_RUN_DIR names (made if missing), else a new one."""
    named = os.environ.get(ENV)
    if named:
        Path(named).mkdir(parents=True, exist_ok=True)
        return Path(named)
    return new_run_folder()
