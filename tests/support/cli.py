"""`python -m gptviz`, or a script of Python, in a subprocess run from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import ROOT


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gptviz", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def run_python(code: str, *args: str, timeout: float = 300, input: str | None = None) -> str:
    """Run `code` (python -c) with `args` in a fresh interpreter in the checkout; what it printed. A failure fails
    the test with the tail of its stderr."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
