"""`python -m gptviz` in a subprocess."""

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
