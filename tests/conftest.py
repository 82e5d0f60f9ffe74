"""Shared fixtures: small models that run in milliseconds, the browser tests' app server and Chromium, an empty
Hugging Face cache, the C extension built once. The suite's own home (off the user's machine and the network) is set
by tests/support/isolation.py, imported first."""

from __future__ import annotations

from tests.support import isolation  # noqa: F401  (first: the suite's own home and caches, before anything reads them)

# isort: split
import functools
import os
from pathlib import Path

import pytest
import torch

from gptviz import GPT, GPTConfig
from tests.support import ROOT
from tests.support.compiler import build_ext, c_compiler
from tests.support.models import SMALL, build

# The models here are tiny: one intra-op thread is fastest, and avoids OpenMP spin-waiting when the
# machine's cores are busy (20x slower steps were measured with 2 threads on a loaded 2-core box).
torch.set_num_threads(int(os.environ.get("GPTVIZ_TEST_THREADS", "1")))


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
    A test that needs a server of its own (a first visit, other settings) starts one with support.browser.app_server."""
    from tests.support.browser import app_server

    with app_server() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """One Chromium per module. Not per session: Playwright's sync API keeps an asyncio loop running on the main
    thread while it is open, which would break the later tests that call asyncio.run."""
    from tests.support.browser import ARGS, CHROMIUM

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


@pytest.fixture
def sweep_budget(monkeypatch):
    """`sweep_budget(rate, limit_s)`: the block passes a second the server measures, and the operator's sweep limit
    (support.pagetest.set_sweep_budget); the results cache emptied before and after the test."""
    from gptviz.app.services import results_cache
    from tests.support.pagetest import set_sweep_budget

    results_cache().clear()
    yield functools.partial(set_sweep_budget, monkeypatch)
    results_cache().clear()


class WatchedBrowser:
    """The Chromium, whose every new page records the exception boxes that appear on it, however briefly
    (support.browser.EXCEPTION_WATCH_JS; support.browser.no_exception reads the record)."""

    def __init__(self, chromium):
        self._chromium = chromium

    def new_context(self, **options):
        from tests.support.browser import EXCEPTION_WATCH_JS

        context = self._chromium.new_context(**options)
        context.add_init_script(EXCEPTION_WATCH_JS)
        return context

    def new_page(self, **options):
        from tests.support.browser import EXCEPTION_WATCH_JS

        page = self._chromium.new_page(**options)
        page.add_init_script(EXCEPTION_WATCH_JS)
        return page

    def __getattr__(self, name):
        return getattr(self._chromium, name)


@pytest.fixture(scope="session")
def block_stats_extension(tmp_path_factory):
    """gptviz.index._block_stats built from the checkout's sources by setup.py (the install's own build) into a
    temporary folder, and loaded from there: (the module, the folder holding it). A checkout holds no built extension
    (CI runs from one without installing). Skips where there is no C compiler; fails where there is one and nothing
    was built."""
    import importlib.util

    out = tmp_path_factory.mktemp("extension")
    done = build_ext(ROOT, out, "-q")
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
    workers finish together (tests/support/suite_order.py). A serial run keeps the files in their usual order."""
    if hasattr(config, "workerinput"):
        from tests.support.suite_order import longest_files_first, read_table

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
