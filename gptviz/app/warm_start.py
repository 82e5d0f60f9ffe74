"""A warm start: before a server answers its first visitor, it imports what the pages import, loads the default model
and runs the home page's captures of the default prompt, so that visitor waits for the page, not for `import torch`;
then it loads the default model's neuron index, which the unit pages read.

`streamlit run app.py` finds the `st.App` in app.py and serves it; the App's lifespan runs `lifespan` once per server
process, before the server accepts connections (its health check answers only once the server is warm). A failure
here is logged and the server starts cold: warming is an optimisation, never a reason not to serve."""

from __future__ import annotations

import ast
import asyncio
import importlib
import time
from contextlib import asynccontextmanager
from pathlib import Path

from streamlit.logger import get_logger

_LOG = get_logger(__name__)  # Streamlit's logger prints to the server's console


def imported_modules(script: Path) -> list[str]:
    """The modules a script imports at its top level, in order (a page script cannot be imported itself: importing
    it would run its page)."""
    names: list[str] = []
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module != "__future__":
            names.append(node.module)
            # `from gptviz.app import keys` names submodules as well as attributes
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def import_pages() -> None:
    """Import every page's top-level imports (names that are attributes, not submodules, are skipped)."""
    from .pages import PAGE_LIST, PAGES_DIR

    for _, stem, _, _ in PAGE_LIST:
        for name in imported_modules(PAGES_DIR / f"{stem}.py"):
            try:
                importlib.import_module(name)
            except ImportError:  # `from x import attribute`: not a module, and x itself is imported above
                pass


def warm_home_page() -> None:
    """Load the default model and run the captures the home page (Attention) makes on the default prompt."""
    from ..model.tokenizer import get_tokenizer
    from ..model.weights import hub_copy_on_disk
    from . import model_service
    from .sidebar import DEFAULT_PROMPT, HUB_GPT2, default_model_spec

    hub_copy_on_disk(HUB_GPT2)  # the sidebar's Hub button asks this every run; the first ask imports huggingface_hub
    spec = default_model_spec()
    if spec is None:  # no bundled model: the default source is a preset, built when a visitor asks for one
        return
    cfg = model_service.load_model(spec).config
    ids = tuple(get_tokenizer().encode(DEFAULT_PROMPT)[-cfg.n_ctx :])
    model_service.capture_cache(spec, ids, model_service.attention_page_names(cfg.n_layers, cfg.norm))
    length = model_service.induction_length(cfg.n_ctx)
    if length >= 2:
        model_service.induction_scores(spec, length)


def warm_unit_index() -> None:
    """Load the default model's neuron index and the corpus its examples come from (once per process: the first visit
    to a unit page, from a pill or a link, waited a second or more for them; issue 60, timed by
    `python -m benchmarks unit-page`)."""
    from . import unit_index
    from .sidebar import default_model_spec

    spec = default_model_spec()
    if spec is not None:
        unit_index.find_index(spec)


def warm_up() -> dict[str, float]:
    """Import the pages' modules, then warm the home page, then the default model's unit index; seconds per stage."""
    timings, started = {}, time.perf_counter()
    import_pages()
    timings["imports"] = time.perf_counter() - started
    warm_home_page()
    timings["home page"] = time.perf_counter() - started - timings["imports"]
    warm_unit_index()
    timings["unit index"] = time.perf_counter() - started - timings["imports"] - timings["home page"]
    return timings


@asynccontextmanager
async def lifespan(_app):
    """st.App's lifespan hook: warm up (off the event loop), then serve."""
    try:
        timings = await asyncio.to_thread(warm_up)
        _LOG.info("warm start: %s", ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))
    except Exception:  # noqa: BLE001  (serve cold rather than not at all)
        _LOG.exception("warm start failed; the first visitor will wait for the imports and the model")
    yield
