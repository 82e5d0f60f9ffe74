"""Whether the C extension can be built here."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def c_compiler() -> str | None:
    """The C compiler setuptools would build the extension with here, if it is on PATH and Python's headers are
    installed (Debian's python3-dev): None where the build of the extension cannot run."""
    import sysconfig

    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return None
    return shutil.which(os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0])
