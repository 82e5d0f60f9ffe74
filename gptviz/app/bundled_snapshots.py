"""The bundled twins' formation snapshots, read once per process and counted once in the memory budget.

Not in the page: a page's file runs again on every visit and rerun, so the lru_cache the Heads forming page defined
there was a new, empty cache each time, and every visit read both twins' snapshots again (megabytes each, held as
long as the visit's script objects lived), so many fresh sessions swung the server's RSS by gigabytes outside its
budget (issue 43; tests/app/test_timeline_visits.py counts the reads).
"""

from __future__ import annotations

from ..model.weights import bundled_models
from ..serve import memory
from ..training.snapshots import Snapshots, load_snapshots
from .jobs import process_wide


def snapshots_nbytes(snaps: Snapshots) -> int:
    """The arrays a Snapshots holds (scores and packed patterns; the lists of floats are small beside them)."""
    return sum(a.nbytes for a in snaps.scores) + sum(a.nbytes for per_probe in snaps.patterns for a in per_probe)


def _load(name: str) -> Snapshots | None:
    folder = bundled_models().get(name)
    try:
        snaps = load_snapshots(folder) if folder is not None else None
    except (OSError, ValueError, KeyError):
        return None
    if snaps is not None:
        memory.accountant().stored(snapshots_nbytes(snaps))  # held for the process: counted, never dropped
    return snaps


def bundled_snapshots(name: str) -> Snapshots | None:
    """A bundled model's formation snapshots (one object per process), or None where it has none."""
    return process_wide(f"bundled snapshots: {name}", lambda: _load(name))
