"""The index builder under hostile load (issue 43): turns are first come, first served (one address chaining builds
back to back waits behind the visitor already in line), and built indexes on disk are capped (GPTVIZ_INDEX_KEPT),
the oldest built removed first, never a bundled model's shipped index."""

from __future__ import annotations

import os
import threading
import time

import pytest

from gptviz import index as ix
from gptviz.app import unit_index as ui
from gptviz.app.model_service import ModelSpec
from gptviz.serve import limits
from gptviz.serve.limits import LimitError
from tests.support.pagetest import TINY


def until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_visitor_who_just_built_waits_behind_the_one_in_line():
    guard = ui.BuildGuard(most=1, queue=4, wait_s=30)
    guard.start("attacker", "6.6.6.6")
    got, ahead_seen = [], []

    def visitor(session, address, seen=None):
        guard.start(session, address, on_wait=seen.append if seen is not None else None)
        got.append(session)

    victim = threading.Thread(target=visitor, args=("victim", "1.1.1.1", ahead_seen))
    victim.start()
    until(lambda: guard.waiting == 1)
    guard.end("attacker", "6.6.6.6")
    again = threading.Thread(target=visitor, args=("attacker", "6.6.6.6"))  # asks again at once
    again.start()
    victim.join(10)
    until(lambda: guard.waiting == 1 or got == ["victim", "attacker"])
    assert got == ["victim"]  # the victim's turn; the attacker waits in line
    assert ahead_seen and ahead_seen[0] == 1  # told one build was ahead
    guard.end("victim", "1.1.1.1")
    again.join(10)
    assert got == ["victim", "attacker"]


def test_one_place_per_visitor_and_a_full_line_is_refused():
    guard = ui.BuildGuard(most=1, queue=1, wait_s=30)
    guard.start("a", "1.1.1.1")
    t = threading.Thread(target=lambda: guard.start("b", "2.2.2.2"))
    t.start()
    until(lambda: guard.waiting == 1)
    with pytest.raises(LimitError, match="already being built for you"):
        guard.start("b2", "2.2.2.2", wait_s=0)  # the same address, another tab, while it waits
    with pytest.raises(LimitError, match="1 more are waiting"):
        guard.start("c", "3.3.3.3")
    guard.end("a", "1.1.1.1")
    t.join(10)
    guard.end("b", "2.2.2.2")


@pytest.mark.slow
def test_a_rerun_while_waiting_leaves_the_line():
    guard = ui.BuildGuard(most=1, queue=4, wait_s=30)
    guard.start("a", "1.1.1.1")

    class Rerun(Exception):  # what Streamlit raises in the script thread at the next st call
        pass

    def interrupted(ahead):
        raise Rerun

    with pytest.raises(Rerun):
        guard.start("b", "2.2.2.2", on_wait=interrupted)
    assert guard.waiting == 0
    guard.end("a", "1.1.1.1")
    guard.start("c", "3.3.3.3", wait_s=0)  # the slot is free and nobody waits: at once


def fake_index(root, name: str, age_s: float) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / ix.INDEX_JSON).write_text("{}")
    when = time.time() - age_s
    os.utime(folder, (when, when))


def test_the_oldest_built_indexes_go_first_never_a_shipped_one(tmp_path, monkeypatch):
    root = tmp_path / "indexes"
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(root))
    shipped = "f" * 64  # an operator pointed GPTVIZ_INDEX_DIR where a bundled model's index lives
    monkeypatch.setattr(ix, "index_folder", lambda name: root / shipped)
    fake_index(root, shipped, 5000)  # the oldest of all
    fake_index(root, "a" * 64, 4000)
    fake_index(root, "b" * 64, 3000)
    fake_index(root, "c" * 64, 2000)
    fake_index(root, "notes", 9000)  # not a fingerprint: not the app's
    removed = ui.prune_built(2)
    assert [p.name for p in removed] == ["a" * 64]
    assert sorted(p.name for p in root.iterdir()) == sorted(["b" * 64, "c" * 64, shipped, "notes"])
    removed = ui.prune_built(1, keep=root / ("b" * 64))  # the one just built stays, even if older
    assert [p.name for p in removed] == ["c" * 64]
    assert sorted(p.name for p in root.iterdir()) == sorted(["b" * 64, shipped, "notes"])


@pytest.mark.slow
def test_builds_past_the_cap_remove_the_oldest(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    small = limits.ServerLimits(index_tokens=1_000, index_mb=2048, index_kept=2)
    monkeypatch.setattr(limits, "server_limits", lambda: small)
    specs = [ModelSpec(TINY.source, TINY.name, TINY.norm, seed=s) for s in (1, 2, 3)]  # a new model each
    for spec in specs:
        ui.build(spec, 1_000, lambda done, total: None)
    kept = {p.name for p in (tmp_path / "indexes").iterdir()}
    assert kept == {ui.fingerprint(specs[1]), ui.fingerprint(specs[2])}
    assert ui.find_index(specs[0]) is None and ui.find_index(specs[2]) is not None


def test_the_cap_is_an_operator_setting():
    assert limits.ServerLimits.from_env({"GPTVIZ_INDEX_KEPT": "3", "GPTVIZ_INDEX_QUEUE": "5"}).index_kept == 3
    assert limits.ServerLimits.from_env({"GPTVIZ_INDEX_QUEUE": "5"}).index_queue == 5
    with pytest.raises(ValueError, match="GPTVIZ_INDEX_KEPT"):
        limits.ServerLimits.from_env({"GPTVIZ_INDEX_KEPT": "0"})
