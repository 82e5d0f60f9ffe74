"""Shared fixtures: small models that run in milliseconds, a guard that keeps tests off the network, and the browser
tests' app server and Chromium."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path


def _isolate_from_the_users_machine() -> None:
    """Every test, and every server or subprocess a test starts, writes under one temporary home of this process's
    own, never the user's: HOME, the XDG folders (built indexes) and Hugging Face's caches point there, and the
    user's own GPTVIZ_* settings (a deployment's memory budget, an index folder) are dropped, so the suite tests the
    defaults wherever it runs (the suite's own GPTVIZ_TEST_* stay: threads, ports, screenshots). The
    checkout comes first on sys.path for this process and, through PYTHONPATH, for the interpreters tests start, so a
    `pip install .` of another version is never what is tested.
    Done at import, before gptviz and huggingface_hub read these (some read them once, at import)."""
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
    checkout = str(Path(__file__).resolve().parents[1])
    sys.path.insert(0, checkout)
    os.environ["PYTHONPATH"] = os.pathsep.join([checkout, *filter(None, [os.environ.get("PYTHONPATH")])])
    import atexit

    atexit.register(shutil.rmtree, home, ignore_errors=True)


_isolate_from_the_users_machine()
TEST_HOME = Path(os.environ["HOME"])

# Set before huggingface_hub / transformers are imported anywhere: they read these once, at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

from gptviz import GPT, GPTConfig

# The models here are tiny: one intra-op thread is fastest, and avoids OpenMP spin-waiting when the
# machine's cores are busy (20x slower steps were measured with 2 threads on a loaded 2-core box).
torch.set_num_threads(int(os.environ.get("GPTVIZ_TEST_THREADS", "1")))

SMALL = GPTConfig(vocab_size=101, n_ctx=16, d_model=32, n_layers=2, n_heads=4, name="test-small")


def build(config: GPTConfig = SMALL, seed: int = 0, **changes) -> GPT:
    """A GPT with seeded GPT-2 init, in eval mode. `changes` are GPTConfig fields to override."""
    if changes:
        config = config.replace(**changes)
    torch.manual_seed(seed)
    return GPT(config).eval()


def model_with_silent_neurons():
    """A model whose neurons include the cases that broke the active share: all -0.0 (GELU far below 0 returns
    -0.0), all tiny negatives (GELU(-5) ~ -1e-6), rarely active, and ordinary ones."""
    model = build(seed=1)
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            bias = block.mlp.c_fc.bias
            bias[0:8] = -60.0  # x * Phi(x) underflows: exactly -0.0 at every token
            bias[8:16] = -5.0  # tiny negatives (about -1e-6)
            bias[16:24] = -0.12 - 0.02 * layer  # active now and then
    return model


def random_ids(n: int, vocab: int = SMALL.vocab_size, batch: int | None = None, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = (n,) if batch is None else (batch, n)
    return torch.randint(0, vocab, shape, generator=g)


@pytest.fixture
def small_config() -> GPTConfig:
    return SMALL


@pytest.fixture
def model() -> GPT:
    return build()


@pytest.fixture
def post_model() -> GPT:
    return build(norm="post")


@pytest.fixture(scope="session")
def server():
    """One `streamlit run app.py` for every browser test that leaves the server as it found it (each opens its own
    page or context, so its own Streamlit session); started by the first test that asks, stopped at the session's end.
    A test that needs a server of its own (a first visit, other settings) starts one with test_browser.app_server."""
    from test_browser import app_server

    with app_server() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """One Chromium per module. Not per session: Playwright's sync API keeps an asyncio loop running on the main
    thread while it is open, which would break the later tests that call asyncio.run."""
    from test_browser import ARGS, CHROMIUM

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield WatchedBrowser(chromium)
        chromium.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """Where the browser tests' screenshots go: GPTVIZ_TEST_SCREENSHOTS if set (to keep them), else a temporary
    folder."""
    kept = os.environ.get("GPTVIZ_TEST_SCREENSHOTS")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        return Path(kept)
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache in tmp_path, for this test only."""
    constants = pytest.importorskip("huggingface_hub.constants")
    home = tmp_path / "hf_home"
    cache = home / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read at import time; patch the live value
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


class WatchedBrowser:
    """The Chromium, whose every new page records the exception boxes that appear on it, however briefly
    (test_browser.EXCEPTION_WATCH_JS; test_browser.no_exception reads the record)."""

    def __init__(self, chromium):
        self._chromium = chromium

    def new_context(self, **options):
        from test_browser import EXCEPTION_WATCH_JS

        context = self._chromium.new_context(**options)
        context.add_init_script(EXCEPTION_WATCH_JS)
        return context

    def new_page(self, **options):
        from test_browser import EXCEPTION_WATCH_JS

        page = self._chromium.new_page(**options)
        page.add_init_script(EXCEPTION_WATCH_JS)
        return page

    def __getattr__(self, name):
        return getattr(self._chromium, name)


def c_compiler() -> str | None:
    """The C compiler setuptools would build the extension with here, if it is on PATH and Python's headers are
    installed (Debian's python3-dev): None where the build of the extension cannot run."""
    import sysconfig

    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return None
    return shutil.which(os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0])


@pytest.fixture(scope="session")
def block_stats_extension(tmp_path_factory):
    """gptviz.index._block_stats built from the checkout's sources by setup.py (the install's own build) into a
    temporary folder, and loaded from there: (the module, the folder holding it). A checkout holds no built extension
    (CI runs from one without installing). Skips where there is no C compiler; fails where there is one and nothing
    was built."""
    import importlib.util
    import subprocess

    out = tmp_path_factory.mktemp("extension")
    done = subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            str(out / "lib"),
            "--build-temp",
            str(out / "tmp"),
        ],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=600,
    )
    built = sorted((out / "lib" / "gptviz" / "index").glob("_block_stats.*"))
    if not built:
        if c_compiler() is None:
            pytest.skip("no C compiler or Python headers here: the scan's statistics run as torch ops")
        pytest.fail(f"setup.py build_ext built no extension:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    spec = importlib.util.spec_from_file_location("gptviz.index._block_stats", built[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, built[0].parent


def pytest_collection_modifyitems(config, items):
    """Under `pytest -n 2` (xdist), each worker collects and the files go out in that order: longest first, so the two
    workers finish together (tests/suite_order.py). A serial run keeps the files in their usual order."""
    if hasattr(config, "workerinput"):
        from suite_order import longest_files_first, read_table

        items[:] = longest_files_first(items, read_table())


def _scan_installed_components_once() -> None:
    """Every AppTest's first run scans the metadata of every installed package for Streamlit components (0.5 s here,
    with 233 packages); the answer cannot change during a test session, so the session scans once."""
    import functools

    from streamlit.components.v2 import manifest_scanner

    scan = manifest_scanner.scan_component_manifests
    if not hasattr(scan, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(scan)


_scan_installed_components_once()
