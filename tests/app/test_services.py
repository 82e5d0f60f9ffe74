"""The pages' services (gptviz/app/services): one results cache, bounded by bytes and counted in the server's memory
budget, keyed by a function's arguments (those named with a leading `_` left out), each result weighed by what it
holds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from gptviz.app import services
from gptviz.app.services import cached, nbytes_of, results_cache
from gptviz.serve import memory

CALLS: list[tuple] = []


@cached
def doubled(x: int, _note: str = "") -> torch.Tensor:
    CALLS.append((x, _note))
    return torch.full((1000,), float(x))


@dataclass
class Result:
    values: torch.Tensor
    same: torch.Tensor
    table: np.ndarray


def test_a_result_weighs_its_tensors_storage_once_and_its_arrays():
    t = torch.zeros(1000)
    assert 4000 <= nbytes_of(t) < 4000 + 500
    view = torch.zeros(10, 100)[0]  # a view keeps its whole storage alive: all of it counts
    assert 4000 <= nbytes_of(view) < 4000 + 500
    r = Result(t, t, np.zeros(250, dtype=np.float64))  # the same tensor twice counts once
    assert 4000 + 2000 <= nbytes_of(r) < 4000 + 2000 + 1500
    assert nbytes_of([t, t[:10]]) < 4000 + 1000  # a slice shares its storage
    assert nbytes_of({"a": torch.zeros(2000)}) >= 8000
    table = np.zeros((100, 10))
    assert 8000 <= nbytes_of([table, table[0], table[:, 1]]) < 8000 + 500  # numpy views count their base once


def test_cached_builds_once_per_key_and_leaves_out_underscored_arguments():
    results_cache().clear()
    CALLS.clear()
    first = doubled(3, _note="a")
    again = doubled(3, _note="b")  # `_note` is not part of the key: the stored result
    assert again is first and CALLS == [(3, "a")]
    assert float(doubled(4)[0]) == 4.0 and CALLS == [(3, "a"), (4, "")]
    assert doubled.__wrapped__(3) is not first  # the undecorated function, for tests: runs every time
    assert len(CALLS) == 3


def test_results_are_weighed_and_counted_in_the_memory_budget():
    cache = results_cache()
    assert cache.accountant is memory.accountant()
    cache.clear()
    stored = memory.accountant().stored_bytes
    value = doubled(7)
    assert cache.nbytes == nbytes_of(value) >= 4000
    assert memory.accountant().stored_bytes - stored == cache.nbytes
    cache.clear()
    assert memory.accountant().stored_bytes == stored


def test_a_ttl_measures_again_after_it(monkeypatch):
    calls = []

    @cached(ttl_s=120)
    def rate(n: int) -> float:
        calls.append(n)
        return float(len(calls))

    now = [1000.0]
    monkeypatch.setattr(services.time, "monotonic", lambda: now[0])
    assert rate(1) == rate(1) == 1.0
    now[0] += 121
    assert rate(1) == 2.0 and calls == [1, 1]


def test_a_tensor_argument_is_refused_as_a_key():
    @cached
    def f(x):
        return x

    with pytest.raises(TypeError, match="no cache key"):
        f(torch.zeros(2))


def test_the_results_budget_is_a_server_limit():
    from gptviz.serve.limits import ServerLimits

    assert ServerLimits().results_bytes == 512 * 2**20
    assert ServerLimits.from_env({"GPTVIZ_RESULTS_CACHE_MB": "64"}).results_bytes == 64 * 2**20


def test_a_stopped_sweep_is_not_kept_and_its_clock_is_no_part_of_the_key(monkeypatch):
    """The Why page's patching through its service: a sweep its clock stops (the session ended) raises and stores
    nothing; a finished one is kept whatever clock a later call brings."""
    from gptviz.app import jobs
    from gptviz.app.services import why
    from gptviz.serve.work_clock import WorkClock, WorkStopped
    from tests.support.pagetest import TINY

    results_cache().clear()
    clean, corrupted = (1, 2, 3, 4), (1, 2, 9, 4)
    with pytest.raises(WorkStopped, match="browser session ended"):
        why.patching(TINY, clean, corrupted, 5, 6, WorkClock(60, "Patching", alive=lambda: False))
    assert len(results_cache()) == 0
    resid, heads = why.patching(TINY, clean, corrupted, 5, 6, WorkClock(60, "Patching"))
    assert resid.scores.shape[1] == len(clean) and heads.scores.ndim == 2
    again = why.patching(TINY, clean, corrupted, 5, 6, WorkClock(60, "Patching", alive=lambda: False))
    assert again[0] is resid
    # the page's clock: alive while its browser session is
    monkeypatch.setattr(jobs, "session_id", lambda: "tab-1")
    open_tabs = {"tab-1"}
    monkeypatch.setattr(jobs, "session_alive", lambda sid: sid in open_tabs)
    clock = why.sweep_clock("Patching", 60)
    clock.check()
    open_tabs.clear()
    with pytest.raises(WorkStopped, match="browser session ended"):
        clock.check()
