"""`python -m benchmarks`: every script is listed; a run writes its results to a run folder of its own and changes the
tracked table (benchmarks/current.md) and report (benchmarks/results.md) only with --update-current, where a rerun
replaces its row."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.support import ROOT


def test_every_benchmark_script_is_registered():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.__main__ import BENCHMARKS, HELPERS
    finally:
        sys.path.remove(str(ROOT))
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("__")} - set(HELPERS)
    assert scripts == {b.script for b in BENCHMARKS.values()}


STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d{6}Z(-\d+)?$")  # a run folder's name: the UTC time it started
TRACKED = [ROOT / "benchmarks" / "current.md", ROOT / "benchmarks" / "results.md"]


@pytest.mark.slow
def test_a_run_writes_its_folder_and_changes_the_table_only_when_asked(tmp_path):
    """Through the entry point (`python -m benchmarks gpu`, which exits at once with a note where there is no GPU), on
    a copy of the tracked table: without --update-current the copy stays byte for byte and the run's row lands in a
    new run folder; with it the row replaces the copy's, once however often it runs. The tracked files never change."""
    tracked = {p: p.read_bytes() for p in TRACKED}
    table, runs = tmp_path / "current.md", tmp_path / "runs"
    shutil.copyfile(TRACKED[0], table)
    before = table.read_bytes()
    env = dict(os.environ, GPTVIZ_BENCH_TABLE=str(table), GPTVIZ_BENCH_RUNS=str(runs), CUDA_VISIBLE_DEVICES="")

    def bench(*args):
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout

    listing = bench()
    assert "index-stats" in listing and "--update-current" in listing and not runs.exists()

    said = bench("gpu")
    assert table.read_bytes() == before  # no flag: the table as it was
    [folder] = list(runs.iterdir())
    assert STAMP.match(folder.name) and f"results: {folder}" in said and "unchanged" in said
    assert "No CUDA GPU found" in (folder / "gpu.log").read_text()
    [row] = [line for line in (folder / "current.md").read_text().splitlines() if line.startswith("| gpu |")]
    assert "`python -m benchmarks.gpu_check`" in row and "| ok |" in row and "No CUDA GPU found" in row

    for args in (["gpu", "--update-current"], ["gpu", "--update-current", "--out", str(tmp_path / "mine")]):
        said = bench(*args)
        assert f"updated: {table}" in said
    assert len(list(runs.iterdir())) == 2 and (tmp_path / "mine" / "gpu.log").exists()
    rows = [line for line in table.read_text().splitlines() if line.startswith("| gpu |")]
    assert len(rows) == 1 and "`python -m benchmarks.gpu_check`" in rows[0] and "| ok |" in rows[0]
    assert "No CUDA GPU found" in rows[0]
    others = [line for line in before.decode().splitlines() if line.startswith("| ") and not line.startswith("| gpu |")]
    assert others and all(line in table.read_text().splitlines() for line in others)  # the other rows kept

    assert {p: p.read_bytes() for p in TRACKED} == tracked
    bad = subprocess.run([sys.executable, "-m", "benchmarks", "nonsense"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown benchmark nonsense" in bad.stderr


def test_a_report_is_copied_to_its_tracked_place_only_when_asked(tmp_path, monkeypatch):
    """The engine's report (results.md, written in the run folder) replaces the tracked one beside the table with
    --update-current, and only from a run that ended well. The benchmark itself is replaced by a stand-in."""
    from benchmarks import __main__ as runner
    from benchmarks import run_folder

    table = tmp_path / "current.md"
    monkeypatch.setattr(runner, "TABLE", table)
    monkeypatch.setenv("GPTVIZ_BENCH_RUNS", str(tmp_path / "runs"))
    status = {"engine": "ok"}

    def stand_in(name, extra, quick, folder):
        assert folder.parent == run_folder.runs() or folder == tmp_path / "given"
        (folder / "results.md").write_text(f"report of {folder.name}\n")
        return {
            "name": name,
            "command": "python -m benchmarks.run",
            "seconds": 1,
            "status": status[name],
            "tail": ["done"],
            "date": "2026-12-06",
        }

    monkeypatch.setattr(runner, "run", stand_in)

    assert runner.main(["engine"]) == 0
    assert not table.exists() and not (tmp_path / "results.md").exists()
    assert runner.main(["engine", "--update-current", "--out", str(tmp_path / "given")]) == 0
    assert (tmp_path / "results.md").read_text() == "report of given\n" and "| engine |" in table.read_text()
    status["engine"] = "exit 1"
    assert runner.main(["engine", "--update-current"]) == 1
    assert (tmp_path / "results.md").read_text() == "report of given\n"  # a failed run's report is not copied
    assert "| exit 1 |" in table.read_text()  # its row says it failed


def test_run_folders(tmp_path, monkeypatch):
    """A script run by `python -m benchmarks` writes in the folder it is given; one run alone makes a new one each
    time, named by the UTC time (a suffix within the same second)."""
    from benchmarks import run_folder

    monkeypatch.delenv(run_folder.ENV, raising=False)
    monkeypatch.setenv("GPTVIZ_BENCH_RUNS", str(tmp_path / "runs"))
    first, second = run_folder.run_folder(), run_folder.run_folder()
    assert first != second and first.parent == second.parent == tmp_path / "runs"
    assert STAMP.match(first.name) and STAMP.match(second.name)
    monkeypatch.setenv(run_folder.ENV, str(tmp_path / "given"))
    assert run_folder.run_folder() == tmp_path / "given" and (tmp_path / "given").is_dir()
