"""Whether the C extension can be built here, and its build by setup.py outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def c_compiler() -> str | None:
    """The C compiler setuptools would build the extension with here, if it is on PATH and Python's headers are
    installed (Debian's python3-dev): None where the build of the extension cannot run."""
    import sysconfig

    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return None
    return shutil.which(os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0])


def build_ext(source: Path, out: Path, *flags: str, env=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`setup.py build_ext` of the checkout (or copy) at `source`, its extension into out/lib and its objects into
    out/tmp; `flags` go before the command (-q)."""
    command = ["setup.py", *flags, "build_ext", "--build-lib", str(out / "lib"), "--build-temp", str(out / "tmp")]
    return subprocess.run(
        [sys.executable, *command], cwd=source, env=env, capture_output=True, text=True, timeout=timeout
    )
