"""The suite never touches the user's machine: its home, caches and settings are a temporary folder's, and the
gptviz it tests is the checkout's, in this process and in the interpreters tests start (tests/support/isolation.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.isolation import TEST_HOME


def test_home_caches_and_built_indexes_are_under_the_tests_own_temporary_folder():
    from gptviz.app.unit_index import index_dir

    assert Path.home() == TEST_HOME and TEST_HOME.is_relative_to(tempfile.gettempdir())
    for variable in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "HF_HOME"):
        assert Path(os.environ[variable]).is_relative_to(TEST_HOME), variable
    assert index_dir().is_relative_to(TEST_HOME)
    assert not any(k.startswith("GPTVIZ_") and not k.startswith("GPTVIZ_TEST_") for k in os.environ)


@pytest.mark.subprocess
@pytest.mark.slow
def test_an_interpreter_a_test_starts_elsewhere_imports_the_checkout(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", "import gptviz, pathlib; print(pathlib.Path.home()); print(gptviz.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(TEST_HOME), str(ROOT / "gptviz" / "__init__.py")]
