"""The server's warm start (gptviz/app/warm_start.py): app.py is served as an st.App whose lifespan imports what the
pages import, loads the default model and runs the home page's captures, so a first visitor waits for the page only.
The cold start itself is measured in the browser: benchmarks/bench_browser.py --cold-start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from streamlit.web.server.app_discovery import discover_asgi_app

from gptviz.app import keys as K
from gptviz.app import model_service, services, sidebar, warm_start
from gptviz.app.router import PAGE_LIST, PAGES_DIR
from gptviz.model.weights import bundled_models
from tests.support.pagetest import APP, forward_calls


def test_streamlit_run_serves_app_py_as_an_st_app_and_runs_it_as_a_script():
    found = discover_asgi_app(Path(APP))
    assert found.is_asgi_app and found.import_string == "app:app"
    # imported (as Streamlit's server does) it makes the App and runs no page; run as a script it runs the router
    source = Path(APP).read_text()
    served = {"__name__": "app", "__file__": APP}
    exec(compile(source, APP, "exec"), served)
    assert type(served["app"]).__name__ == "App" and served["app"].script_path == Path(APP)
    entry = PAGES_DIR / "entry.py"
    assert discover_asgi_app(entry).is_asgi_app  # `gptviz app` (installed) is served the same way


def test_imported_modules_reads_a_scripts_top_level_imports(tmp_path):
    script = tmp_path / "page.py"
    script.write_text(
        "from __future__ import annotations\nimport math, json as j\nfrom gptviz.app import keys as K\n"
        "from . import nothing\nfrom gptviz.figures.attention import HIGHLIGHT\n"
        "def main():\n    import pandas\n"
    )
    assert warm_start.imported_modules(script) == [
        "math",
        "json",
        "gptviz.app",
        "gptviz.app.keys",
        "gptviz.figures.attention",
        "gptviz.figures.attention.HIGHLIGHT",
    ]


def test_every_page_import_is_warmed(monkeypatch):
    imported = []
    monkeypatch.setattr(warm_start.importlib, "import_module", lambda name: imported.append(name))
    warm_start.import_pages()
    for _, stem, _, _ in PAGE_LIST:
        assert set(warm_start.imported_modules(PAGES_DIR / f"{stem}.py")) <= set(imported), stem
    assert {"torch", "pandas", "streamlit"} <= set(imported)


def test_the_default_spec_is_the_sidebars_first_visit():
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert at.session_state[K.MODEL_SPEC] == sidebar.default_model_spec()
    assert sidebar.default_model_spec() is not None and sidebar.default_model_spec().name in bundled_models()


@pytest.mark.slow
def test_after_the_warm_up_the_home_pages_first_visit_runs_no_model():
    """The warm-up ran every forward pass the home page's first run needs: that run adds none."""
    model_service.model_store().clear()
    model_service.capture_store().clear()
    services.results_cache().clear()  # the induction scores the home page shows live there
    timings = warm_start.warm_up()
    assert set(timings) == {"imports", "home page", "unit index"} and all(t >= 0 for t in timings.values())
    assert sidebar.default_model_spec() in model_service.model_store()
    before = forward_calls()
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception and not at.error
    assert forward_calls() == before


@pytest.mark.slow
def test_the_warm_up_loads_the_default_models_unit_index(monkeypatch):
    """A unit page's first visit reads the index and the corpus the warm-up loaded: it tokenizes nothing."""
    from gptviz import index as ix
    from gptviz.app import unit_index

    warm_start.warm_unit_index()
    monkeypatch.setattr(ix, "corpus_documents", lambda *a, **k: pytest.fail("the corpus was read again"))
    assert unit_index.find_index(sidebar.default_model_spec()) is not None


def test_a_failed_warm_up_still_serves(monkeypatch):
    def broken():
        raise RuntimeError("no model today")

    monkeypatch.setattr(warm_start, "warm_up", broken)

    async def serve():
        async with warm_start.lifespan(None):
            return "served"

    assert asyncio.run(serve()) == "served"


@pytest.mark.slow
def test_the_warm_up_imports_what_the_sidebars_hub_button_first_imports():
    """In a fresh process (this one has imported it already): the sidebar asks hub_copy_on_disk every run, and its
    first call imports huggingface_hub's download module (0.125 s of a first visit's script time, py-spy)."""
    import subprocess
    import sys

    code = (
        "import sys; from gptviz.app import warm_start; assert 'huggingface_hub.file_download' not in sys.modules;"
        " warm_start.warm_home_page(); print('huggingface_hub.file_download' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(APP).parent, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("True")
