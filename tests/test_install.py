"""The package installs like any Python tool: a wheel built from the checkout, installed into a fresh virtual
environment, works from a folder outside the checkout (console command, bundled data, the app's first page).

The new virtual environment sees the site-packages this interpreter imports from (torch and the rest are
installed there), so the install needs no network: a .pth file in it adds those folders after its own. That holds
whether the tests run under a virtual environment's interpreter (whose packages `--system-site-packages` would not
show: it exposes the base interpreter's) or the system's. The checkout itself is never written to: the build
reads a copy of the files it packages, in a temporary folder (setuptools writes build/ and *.egg-info beside them).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from benchmarks.servers import streamlit_server
from tests.support import ROOT
from tests.support.compiler import build_ext, c_compiler

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

# What the build reads: pyproject.toml's packages and package-dir folders, and the readme it names.
SOURCE_FILES = ("pyproject.toml", "README.md", "gptviz", "app_pages", "data")
SOURCE_EXTRAS = ("setup.py", "setup.cfg", "MANIFEST.in", "LICENSE", "LICENSE.txt", "LICENSE.md")
# (and a C extension built in place there: the install must build its own)
NOT_SOURCE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", "*.so", "*.pyd")

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
print("MAPS", sum(el.proto.component_name == "gptviz_attention_map" for el in at.get("bidi_component")))
"""


def clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def site_dirs() -> list[str]:
    """The site-packages folders this interpreter imports from, in sys.path order: a virtual environment's own
    (and its base's, if it was made with --system-site-packages), or the system's; the user's if it is on sys.path.
    Not the checkout, which `python -m pytest` puts on sys.path too."""
    known = {os.path.realpath(p) for p in site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        known.add(os.path.realpath(site.getusersitepackages()))
    dirs = [p for p in sys.path if p and os.path.realpath(p) in known and os.path.isdir(p)]
    assert dirs, f"no site-packages folder on sys.path: {sys.path}"
    return list(dict.fromkeys(dirs))


def is_gptviz(name: str) -> bool:
    """A site-packages entry of an installed gptviz: the package, its metadata, an editable install's hooks."""
    name = name.lower()
    return name == "gptviz" or name.startswith(("gptviz-", "__editable__.gptviz-", "__editable___gptviz_"))


def without_gptviz(site_dir: str, farm: Path) -> Path:
    """`site_dir` as a folder of links to each of its entries but an installed gptviz's, so that a user's own
    `pip install .` (or -e) in this interpreter's packages is neither imported by the new environment nor taken by
    its pip as already installed."""
    farm.mkdir(parents=True)
    for entry in os.scandir(site_dir):
        if not is_gptviz(entry.name):
            (farm / entry.name).symlink_to(entry.path, target_is_directory=entry.is_dir())
    return farm


def new_venv(venv: Path) -> Path:
    """A fresh virtual environment (with its own pip) whose interpreter also imports what this one does, less any
    gptviz installed here."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    # each named site-packages: Streamlit runs in development mode when its own path has no "site-packages"
    borrowed = [without_gptviz(d, venv / "borrowed" / str(i) / "site-packages") for i, d in enumerate(site_dirs())]
    # site.addsitedir, not bare paths: the .pth files in those folders (editable installs, setuptools' own) count
    lines = "".join(f"import site; site.addsitedir({str(d)!r})\n" for d in borrowed)
    (Path(purelib) / "_gptviz_tests_parent_site.pth").write_text(lines, encoding="utf-8")
    return python


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of what the build reads, so that building and `pip install -e` write nothing into the checkout."""
    src = tmp_path_factory.mktemp("source") / "gptviz-src"
    src.mkdir()
    for name in SOURCE_FILES + SOURCE_EXTRAS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=NOT_SOURCE)
        elif path.is_file():
            shutil.copy2(path, src / name)
        else:
            assert name in SOURCE_EXTRAS, f"{name} is missing from the checkout"
    return src


@pytest.fixture(scope="module")
def installed(tmp_path_factory, source):
    """(venv folder, a working folder outside the checkout) with the package installed from a fresh wheel."""
    base = tmp_path_factory.mktemp("install")
    wheels, venv, outside = base / "wheels", base / "venv", base / "elsewhere"
    outside.mkdir()
    # setuptools already here builds it offline; without it, pip fetches the build backend from the package index
    offline = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, "-q", "-w", str(wheels), str(source)],
        check=True,
        cwd=base,
        timeout=300,
    )
    (wheel,) = wheels.glob("gptviz-*.whl")
    python = new_venv(venv)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True,
        cwd=outside,
        timeout=300,
        env=clean_env(venv),
    )
    return venv, outside


def run(installed, *args, timeout=300) -> subprocess.CompletedProcess:
    venv, outside = installed
    return subprocess.run(list(args), cwd=outside, env=clean_env(venv), capture_output=True, text=True, timeout=timeout)


def test_the_console_command_counts_gpt2_xl_from_outside_the_checkout(installed):
    venv, _ = installed
    out = run(installed, str(venv / "bin" / "gptviz"), "params", "gpt2-xl")
    assert out.returncode == 0, out.stderr
    assert "1,557,611,200" in out.stdout
    where = run(
        installed,
        str(venv / "bin" / "python"),
        "-c",
        "import gptviz, gptviz.training.corpus as c; print(gptviz.__file__);"
        " print(c.WORKS.is_dir(), c.CORPUS.is_file())",
    )
    lines = where.stdout.split()
    assert str(ROOT) not in lines[0] and "site-packages" in lines[0]
    assert lines[1:] == ["True", "True"]  # the corpora came with it


def test_nbconvert_finds_the_offline_exporter_by_its_name_once_installed(installed):
    """nbconvert finds the exporter by the name `jupyter nbconvert --to gptviz_html` uses, and lists it among its
    export names (the list JupyterLab's export menu reads)."""
    pytest.importorskip("nbconvert")
    from jupyter_core.paths import jupyter_path

    venv, outside = installed
    # The venv borrows this interpreter's packages through a .pth file but not their data files, so nbconvert's
    # templates (share/jupyter/nbconvert, installed beside nbconvert) are shown to it through JUPYTER_PATH.
    # (and the base interpreter's, where this one is a virtual environment that borrows its packages)
    data = [*jupyter_path(), os.path.join(sys.base_prefix, "share", "jupyter")]
    env = {**clean_env(venv), "JUPYTER_PATH": os.pathsep.join(dict.fromkeys(data))}
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from nbconvert.exporters.base import get_exporter, get_export_names; e = get_exporter('gptviz_html'); "
            "print(e.__module__, e.__name__, 'gptviz_html' in get_export_names())",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["gptviz.notebook.html_export", "OfflineHTMLExporter", "True"]


def test_the_installed_package_holds_its_data_and_loads_a_bundled_model(installed):
    venv, _ = installed
    code = (
        "from gptviz import load_pretrained, get_tokenizer; from gptviz.model.weights import bundled_models;"
        "m = load_pretrained('shakespeare-pre'); t = get_tokenizer();"
        "print(sorted(bundled_models()), m.config.n_layers, t.encode('Hello world'))"
    )
    out = run(installed, str(venv / "bin" / "python"), "-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['shakespeare-post', 'shakespeare-pre'] 4 [15496, 995]"


SCAN = """
import numpy as np
from gptviz import GPT, GPTConfig, index as ix
from gptviz.index import native
model = GPT(GPTConfig(vocab_size=50, n_ctx=16, d_model=16, n_layers=1, n_heads=2)).eval()
index = ix.build_index(model, [ix.Document("d", np.arange(60) % 50)], top_k=3, bins=8, min_count=2)
print(native._extension.__file__ if native._extension else None, index.meta["scan"]["statistics"])
"""


def test_the_install_builds_the_c_pass_and_the_scan_takes_it(installed):
    """pip built gptviz.index._block_stats into the wheel (setup.py), and the installed package's scan runs it; with
    no C compiler here the install goes on without it and the scan says "torch"."""
    venv, _ = installed
    out = run(installed, str(venv / "bin" / "python"), "-c", SCAN)
    assert out.returncode == 0, out.stderr[-3000:]
    where, statistics = out.stdout.split()
    if c_compiler() is None:
        assert (where, statistics) == ("None", "torch")
    else:
        assert "site-packages" in where and "_block_stats" in where and statistics == "C"


def test_without_a_c_compiler_the_build_goes_on_without_the_c_pass(tmp_path, source):
    """The extension is optional: a build whose compiler cannot run still succeeds, without it (the scan then takes
    the torch ops: test_index_native.py)."""
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    out = build_ext(source, tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "_block_stats" in out.stdout + out.stderr  # setuptools names the extension it left out
    assert not list(tmp_path.rglob("_block_stats.*"))


def test_the_apps_first_page_runs_from_the_installed_package(installed):
    venv, _ = installed
    out = run(installed, str(venv / "bin" / "python"), "-c", FIRST_PAGE)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "site-packages" in out.stdout
    maps = int(out.stdout.split("MAPS")[-1].strip())
    assert maps == 1  # the Attention page drew its heatmap (a browser component) on the bundled model


def test_gptviz_app_serves_the_app_with_streamlits_flags_passed_through(installed):
    venv, outside = installed
    # the helper passes --server.headless, --server.port and --server.address: `gptviz app` hands them to Streamlit
    with streamlit_server([str(venv / "bin" / "gptviz"), "app"], cwd=outside, env=clean_env(venv)) as server:
        with urllib.request.urlopen(f"{server.url}/", timeout=5) as r:
            assert "<title>Streamlit</title>" in r.read().decode()
    log = server.log()
    assert f"{server.port}" in log and "site-packages" not in log  # Streamlit announced the port, no traceback paths


def test_an_editable_install_runs_the_checkout_from_anywhere(tmp_path, source):
    """`pip install -e .`: the command and the library come from the source tree itself (pages and corpora at the
    top of it), from a folder outside it. Its build backend comes from the package index, as pip does it. The
    source tree is a copy of the checkout's (an editable build writes *.egg-info into it)."""
    venv, outside = tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    python = new_venv(venv)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "-q", "-e", str(source)],
        check=True,
        cwd=outside,
        timeout=600,
        env=clean_env(venv),
    )
    xl = run((venv, outside), str(venv / "bin" / "gptviz"), "params", "gpt2-xl")
    assert xl.returncode == 0 and "1,557,611,200" in xl.stdout
    where = run(
        (venv, outside),
        str(python),
        "-c",
        "import gptviz, gptviz.app.router, gptviz.training.corpus; from gptviz import load_pretrained;"
        "print(gptviz.__file__); print(gptviz.app.router.PAGES_DIR); print(gptviz.training.corpus.WORKS.is_dir());"
        "print(load_pretrained('shakespeare-pre').config.name)",
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [
        str(source / "gptviz" / "__init__.py"),
        str(source / "app_pages"),
        "True",
        "small-4l",
    ]
    if c_compiler() is not None:  # the C pass built in place, beside the sources
        scan = run((venv, outside), str(python), "-c", SCAN)
        assert scan.returncode == 0, scan.stderr[-3000:]
        assert scan.stdout.split() == [str(next((source / "gptviz" / "index").glob("_block_stats.*"))), "C"]
