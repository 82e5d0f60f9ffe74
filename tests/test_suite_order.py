"""The order `pytest -n 2` sends files to its workers (tests/support/suite_order.py): longest first, read from
--durations."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support import ROOT
from tests.support.suite_order import file_seconds, longest_files_first, read_table

DURATIONS = """
============================= slowest durations ==============================
61.83s call     tests/browser/test_browser_first_screen.py::test_no_page_opens[1400-1000]
52.60s setup    tests/serve/test_wiring_memory.py::test_reservation[gpt1-1L-d768-T128]
12.00s call     tests/serve/test_wiring_memory.py::test_reservation[gpt1-1L-d768-T128]
0.01s teardown tests/browser/test_browser_first_screen.py::test_no_page_opens[1400-1000]
(3 durations < 0.005s hidden.  Use -vv to show these durations.)
1420 passed in 1129.30s (0:18:49)
"""


def test_seconds_are_summed_per_file_over_call_setup_and_teardown_longest_first():
    table = file_seconds(DURATIONS)
    assert list(table) == ["tests/serve/test_wiring_memory.py", "tests/browser/test_browser_first_screen.py"]
    assert table == {"tests/serve/test_wiring_memory.py": 64.6, "tests/browser/test_browser_first_screen.py": 61.84}


def test_files_go_longest_first_keeping_each_files_tests_in_order_and_unknown_files_last():
    ids = [
        "tests/a.py::t1",
        "tests/b.py::t1",
        "tests/a.py::t2",
        "tests/new.py::t1",
        "tests/c.py::t1",
        "tests/b.py::t2",
        "tests/newer.py::t1",
    ]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    ordered = longest_files_first(items, {"tests/a.py": 1.0, "tests/b.py": 30.0, "tests/c.py": 5.0})
    assert [i.nodeid for i in ordered] == [
        "tests/b.py::t1",
        "tests/b.py::t2",
        "tests/c.py::t1",
        "tests/a.py::t1",
        "tests/a.py::t2",
        "tests/new.py::t1",
        "tests/newer.py::t1",
    ]
    assert sorted(ordered, key=id) == sorted(items, key=id)  # nothing lost or repeated


def test_the_committed_table_names_only_files_that_exist(tmp_path):
    table = read_table()
    assert table, "tests/support/durations.json is missing or empty"
    assert all((ROOT / name).is_file() for name in table), [n for n in table if not (ROOT / n).is_file()]
    assert read_table(tmp_path / "missing.json") == {}
