"""Every test, and every server or subprocess a test starts, writes under one temporary home of this process's own,
never the user's. Imported by conftest.py before anything else, so before gptviz and huggingface_hub read these
(some read them once, at import)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.support import ROOT


def _isolate_from_the_users_machine() -> Path:
    """HOME, the XDG folders (built indexes) and Hugging Face's caches point to a temporary folder, and the user's
    own GPTVIZ_* settings (a deployment's memory budget, an index folder) are dropped, so the suite tests the defaults
    wherever it runs (the suite's own GPTVIZ_TEST_* stay: threads, ports, screenshots). The checkout comes first on
    sys.path for this process and, through PYTHONPATH, for the interpreters tests start, so a `pip install .` of
    another version is never what is tested."""
    home = Path(tempfile.mkdtemp(prefix="gptviz-tests-home-"))
    for name in [k for k in os.environ if k.startswith("GPTVIZ_") and not k.startswith("GPTVIZ_TEST_")]:
        del os.environ[name]
    os.environ["HOME"] = str(home)
    for variable, folder in (
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("HF_HOME", ".cache/huggingface"),
    ):
        os.environ[variable] = str(home / folder)
    os.environ.pop("HF_HUB_CACHE", None)
    os.environ.pop("TRANSFORMERS_CACHE", None)
    checkout = str(ROOT)
    sys.path.insert(0, checkout)
    os.environ["PYTHONPATH"] = os.pathsep.join([checkout, *filter(None, [os.environ.get("PYTHONPATH")])])
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


TEST_HOME = _isolate_from_the_users_machine()

# Set before huggingface_hub / transformers are imported anywhere: they read these once, at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
