"""The order in which `pytest -n 2` hands test files to its workers: the longest first, so the two workers finish
together instead of one waiting while the other runs a long browser file that came last in alphabetical order.

xdist's `--dist loadfile` sends whole files (module fixtures such as a Chromium or a measured size table run once)
in collection order as workers free up; this sorts that order by each file's seconds in tests/support/durations.json, a
quiet serial run's `--durations=0` summed per file. A file not listed there (a new one) counts as quick and goes last;
a stale table only costs balance, never a test. Refresh it after adding a slow file:

    python -m pytest -p no:cacheprovider --durations=0 -q > /tmp/durations.txt
    python tests/support/suite_order.py /tmp/durations.txt        # rewrites tests/support/durations.json
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("durations.json")
# "12.34s call     tests/test_x.py::test_y[param]" (also setup and teardown), as pytest's --durations prints them
DURATION_LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:call|setup|teardown)\s+(tests/[^:\s]+\.py)::")


def file_seconds(durations_output: str) -> dict[str, float]:
    """Seconds per test file from pytest's --durations output, longest first."""
    totals: dict[str, float] = defaultdict(float)
    for line in durations_output.splitlines():
        match = DURATION_LINE.match(line.strip())
        if match:
            totals[match.group(2)] += float(match.group(1))
    return {name: round(seconds, 2) for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])}


def read_table(path: Path = TABLE) -> dict[str, float]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def longest_files_first(items: list, table: dict[str, float]) -> list:
    """`items` (pytest's collected tests) regrouped by file, files by their seconds in `table`, longest first; a file's
    own tests keep their order, and files the table does not know keep theirs after the known ones."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    files = sorted(by_file, key=lambda name: -table.get(name, 0.0))  # sorted() is stable: unknown files keep order
    return [item for name in files for item in by_file[name]]


if __name__ == "__main__":
    table = file_seconds(Path(sys.argv[1]).read_text(encoding="utf-8"))
    if not table:
        sys.exit(f"no --durations lines in {sys.argv[1]}")
    TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{len(table)} files, {sum(table.values()):.0f} s in all -> {TABLE}")
