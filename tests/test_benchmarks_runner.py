"""`python -m benchmarks`: every script is listed, a run lands in the one results table, a rerun replaces its row."""
from __future__ import annotations

import pytest

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_benchmark_script_is_registered():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.__main__ import BENCHMARKS, HELPERS
    finally:
        sys.path.remove(str(ROOT))
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("__")} - set(HELPERS)
    assert scripts == {b.script for b in BENCHMARKS.values()}


@pytest.mark.slow
def test_a_run_writes_its_row_and_a_rerun_replaces_it(tmp_path):
    table = tmp_path / "current.md"
    env = dict(os.environ, GPTVIZ_BENCH_TABLE=str(table), CUDA_VISIBLE_DEVICES="")
    listing = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert listing.returncode == 0 and "index-stats" in listing.stdout and not table.exists()
    for _ in range(2):  # the GPU check exits at once, with a note, where there is no GPU
        out = subprocess.run([sys.executable, "-m", "benchmarks", "gpu"], cwd=ROOT, capture_output=True, text=True,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:]
    rows = [line for line in table.read_text().splitlines() if line.startswith("| gpu |")]
    assert len(rows) == 1 and "`python -m benchmarks.gpu_check`" in rows[0] and "| ok |" in rows[0]
    assert "No CUDA GPU found" in rows[0]
    bad = subprocess.run([sys.executable, "-m", "benchmarks", "nonsense"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown benchmark nonsense" in bad.stderr
