"""Issue 43: 500 fresh sessions on Heads forming swung the server's RSS by 1.3 GB outside its budget. Each visit
re-read both twins' snapshots: the page defined its lru_cache in its own file, which runs anew on every visit. They
are now read once per process (gptviz.app.bundled_snapshots) and counted once in the memory accountant."""

from __future__ import annotations

import pytest

from gptviz.app import bundled_snapshots as store
from gptviz.app import jobs
from gptviz.training import snapshots
from tests.support.pagetest import run_page


@pytest.mark.slow
def test_fresh_visits_to_heads_forming_read_the_snapshots_once_per_process(monkeypatch):
    reads = []
    real = snapshots.load_snapshots
    monkeypatch.setattr(store, "load_snapshots", lambda folder: reads.append(folder) or real(folder))
    monkeypatch.setattr(snapshots, "load_snapshots", lambda folder: reads.append(folder) or real(folder))
    for name in ("shakespeare-pre", "shakespeare-post"):  # as on a server that has not read them yet
        jobs._made.pop(f"bundled snapshots: {name}", None)
    for _ in range(3):  # three fresh sessions
        at = run_page("timeline")
        assert not at.exception
    assert len(reads) == 2  # one per twin, not one per twin per visit


def test_the_snapshots_held_for_the_process_count_in_the_memory_budget(monkeypatch):
    from gptviz.serve import memory

    acc = memory.MemoryAccountant(2**30)
    monkeypatch.setattr(memory, "accountant", lambda: acc)
    jobs._made.pop("bundled snapshots: shakespeare-pre", None)
    snaps = store.bundled_snapshots("shakespeare-pre")
    expected = sum(a.nbytes for a in snaps.scores) + sum(a.nbytes for row in snaps.patterns for a in row)
    assert expected > 1_000_000 and acc.stored_bytes == expected
    assert store.bundled_snapshots("shakespeare-pre") is snaps and acc.stored_bytes == expected  # once
