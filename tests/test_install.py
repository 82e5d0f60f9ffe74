"""The package installs like any Python tool: a wheel built from the checkout, installed into a fresh virtual
environment, works from a folder outside the checkout (console command, bundled data, the app's first page).

The virtual environment sees this interpreter's site-packages (torch and the rest are already installed), so the
install needs no network; `--no-build-isolation` builds with the setuptools already here."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.subprocess

FIRST_PAGE = """
import sys
from streamlit.testing.v1 import AppTest
import gptviz, gptviz.app.router
entry = gptviz.app.router.PAGES_DIR / "entry.py"
assert "site-packages" in str(entry), entry
at = AppTest.from_file(str(entry), default_timeout=180).run()
assert not at.exception, [e.message for e in at.exception]
print("ENTRY", entry)
print("MARKDOWN", " | ".join(m.value for m in at.markdown)[:4000])
print("PLOTS", len(at.get("plotly_chart")))
"""


def clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv folder, a working folder outside the checkout) with the package installed from a fresh wheel."""
    base = tmp_path_factory.mktemp("install")
    wheels, venv, outside = base / "wheels", base / "venv", base / "elsewhere"
    outside.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(ROOT)], check=True, cwd=base, timeout=300)
    wheel, = wheels.glob("gptviz-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, cwd=outside, timeout=300, env=clean_env(venv))
    return venv, outside


def run(installed, *args, timeout=300) -> subprocess.CompletedProcess:
    venv, outside = installed
    return subprocess.run(list(args), cwd=outside, env=clean_env(venv), capture_output=True, text=True,
                          timeout=timeout)


def test_the_console_command_counts_gpt2_xl_from_outside_the_checkout(installed):
    venv, _ = installed
    out = run(installed, str(venv / "bin" / "gptviz"), "params", "gpt2-xl")
    assert out.returncode == 0, out.stderr
    assert "1,557,611,200" in out.stdout
    where = run(installed, str(venv / "bin" / "python"), "-c",
                "import gptviz, gptviz.corpus as c; print(gptviz.__file__); print(c.WORKS.is_dir(), c.CORPUS.is_file())")
    lines = where.stdout.split()
    assert str(ROOT) not in lines[0] and "site-packages" in lines[0]
    assert lines[1:] == ["True", "True"]  # the corpora came with it


def test_the_installed_package_holds_its_data_and_loads_a_bundled_model(installed):
    venv, _ = installed
    code = ("from gptviz import load_pretrained, get_tokenizer; from gptviz.weights import bundled_models;"
            "m = load_pretrained('shakespeare-pre'); t = get_tokenizer();"
            "print(sorted(bundled_models()), m.config.n_layers, t.encode('Hello world'))")
    out = run(installed, str(venv / "bin" / "python"), "-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['shakespeare-post', 'shakespeare-pre'] 4 [15496, 995]"


def test_the_apps_first_page_runs_from_the_installed_package(installed):
    venv, _ = installed
    out = run(installed, str(venv / "bin" / "python"), "-c", FIRST_PAGE)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "site-packages" in out.stdout
    plots = int(out.stdout.split("PLOTS")[-1].strip())
    assert plots >= 1  # the Attention page drew its heatmaps on the bundled model


def test_gptviz_app_serves_the_app_with_streamlits_flags_passed_through(installed):
    venv, outside = installed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(venv / "bin" / "gptviz"), "app", "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1"],
                            cwd=outside, env=clean_env(venv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline, health = time.monotonic() + 90, None
        while time.monotonic() < deadline and health is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    health = r.read().decode()
            except OSError:
                time.sleep(0.5)
        assert health == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert "<title>Streamlit</title>" in r.read().decode()
    finally:
        proc.terminate()
        log = proc.communicate(timeout=30)[0]
    assert f"{port}" in log and "site-packages" not in log  # Streamlit announced the port, no traceback paths


def test_an_editable_install_runs_the_checkout_from_anywhere(tmp_path):
    """`pip install -e .`: the command and the library come from the checkout itself (pages and corpora at the
    top of it), from a folder outside it. Its build backend comes from the package index, as pip does it."""
    venv, outside = tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", "-e", str(ROOT)],
                   check=True, cwd=outside, timeout=600, env=clean_env(venv))
    xl = run((venv, outside), str(venv / "bin" / "gptviz"), "params", "gpt2-xl")
    assert xl.returncode == 0 and "1,557,611,200" in xl.stdout
    where = run((venv, outside), str(venv / "bin" / "python"), "-c",
                "import gptviz, gptviz.app.router, gptviz.corpus; from gptviz import load_pretrained;"
                "print(gptviz.__file__); print(gptviz.app.router.PAGES_DIR); print(gptviz.corpus.WORKS.is_dir());"
                "print(load_pretrained('shakespeare-pre').config.name)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [str(ROOT / "gptviz" / "__init__.py"), str(ROOT / "app_pages"), "True", "small-4l"]
