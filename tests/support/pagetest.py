"""Helpers for the page tests: run a page file with the state app.py's sidebar would give it, and read
its Plotly figures back as data.

AppTest note (Streamlit 1.67): after a page switch AppTest reruns only the page file, without app.py, so the
page tests run each page file directly with the two values the sidebar provides (model_spec, prompt).
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from gptviz.app import keys as K
from gptviz.app import model_service, sidebar
from tests.support import ROOT

APP = str(ROOT / "app.py")
TINY = model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "pre")

MARKUP = "<img src=x onerror=alert(1)> <script>alert(2)</script>"
# Prompts every page must take without an exception, by test id.
EDGE_PROMPTS = {
    "empty": "",
    "one-token": "Hi",
    "longer-than-context": "word " * 300,
    "emoji-cjk": "🦜 你好世界, naïve café 😀",
    "markup": MARKUP,
}


def edge_prompts(*names: str):
    """@edge_prompts("empty", ...): parametrize a test's `prompt` over those of EDGE_PROMPTS, with their ids."""
    return pytest.mark.parametrize("prompt", [EDGE_PROMPTS[name] for name in names], ids=list(names))


def kept_of_edge_prompt(at: AppTest, prompt: str, n_ctx: int) -> list[int]:
    """What every page shows for an edge prompt: no exception or error; an empty prompt asks for one; a prompt
    longer than the context says that only its last n_ctx tokens are used. Returns those ids ([] when empty)."""
    from gptviz.model.tokenizer import encode

    assert not at.exception and not at.error
    ids = encode(prompt)
    if not ids:
        assert "Type a prompt" in at.info[0].value
    if len(ids) > n_ctx:
        assert f"only the last {n_ctx} are used" in at.warning[0].value
    return ids[-n_ctx:]


def kept_and_charted(at: AppTest, prompt: str, n_ctx: int) -> list[int]:
    """kept_of_edge_prompt, for a page whose charts all need a token: with none kept, it draws no chart."""
    kept = kept_of_edge_prompt(at, prompt, n_ctx)
    if not kept:
        assert not at.get("plotly_chart")
    return kept


def set_sweep_budget(monkeypatch, rate: float, limit_s: int) -> None:
    """The block passes a second the server measures (`rate`) and the operator's sweep limit, for a page's estimate
    of a sweep's time; the results cache emptied (it keeps a measured rate two minutes)."""
    import dataclasses

    from gptviz.app.services import results_cache
    from gptviz.methods import attribution
    from gptviz.serve import limits

    results_cache().clear()
    monkeypatch.setattr(attribution, "block_pass_rate", lambda model, T, rows=4: rate)
    monkeypatch.setattr(
        limits, "server_limits", lambda: dataclasses.replace(limits.ServerLimits(), sweep_seconds=limit_s)
    )


def open_app(**state) -> AppTest:
    """Run app.py (the sidebar and the default page) once, on the tiny preset, with any session-state values."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state[K.MODEL_SOURCE] = K.SOURCE_PRESET
    at.session_state[K.PRESET] = "tiny"
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def open_page(page: str, **state) -> AppTest:
    """app.py, then a switch to `page` (AppTest needs one run before switching pages); no exception on the way."""
    at = open_app(**state)
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def run_page(
    name: str, prompt: str = sidebar.DEFAULT_PROMPT, spec: model_service.ModelSpec | None = TINY, **state
) -> AppTest:
    """Run app_pages/<name>.py once with model_spec, prompt and any other session-state values set."""
    at = AppTest.from_file(str(ROOT / "app_pages" / f"{name}.py"), default_timeout=120)
    at.session_state[K.MODEL_SPEC] = spec
    at.session_state[K.PROMPT] = prompt
    # generations at the model's own speed unless a test sets a pace (the pages' default paces them for watching)
    state = {K.ATT_GEN_PACE: "as fast as it writes", K.GEN_PACE: "as fast as it writes", **state}
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def figures(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def title_of(fig: dict) -> str:
    """The title as read: figures break a long one between words with <br> (figures.common.wrap_title)."""
    return ((fig["layout"].get("title") or {}).get("text") or "").replace("<br>", " ")


def figure(at: AppTest, title_start: str) -> dict:
    """The one figure whose title starts with `title_start`."""
    found = [f for f in figures(at) if title_of(f).startswith(title_start)]
    assert len(found) == 1, [title_of(f) for f in figures(at)]
    return found[0]


def attention_map(at: AppTest, key: str = K.ATT_MAP) -> tuple[dict, np.ndarray]:
    """A heatmap component of the Attention page (by its key): its data and the weights it carries,
    [layers sent, heads + 1, rows, keys]."""
    from gptviz.figures.browser.attention_map import NAME, decode_weights

    data = component_data(at, NAME, key)
    return data, decode_weights(data)


def token_rows(at: AppTest, key: str) -> dict:
    """A token-rows component (the unit page's examples) by its key: the data it was sent."""
    from gptviz.figures.browser.token_rows import NAME

    return component_data(at, NAME, key)


def query_bars(at: AppTest, key: str = K.ATT_QUERY_BARS) -> dict:
    """A query-bars component (where one token looks) by its key: the data it was sent."""
    from gptviz.figures.browser.query_bars import NAME

    return component_data(at, NAME, key)


def component_data(at: AppTest, name: str, key: str) -> dict:
    """The data one of gptviz's components (`name`, by its key) was sent in the last run."""
    found = [
        el for el in at.get("bidi_component") if el.proto.component_name == name and el.proto.id.endswith(f"-{key}")
    ]
    assert len(found) == 1, len(found)
    return json.loads(found[0].proto.json)


def array(value) -> np.ndarray:
    """A Plotly JSON array (a plain list, or a base64 typed array with dtype and shape) as numpy."""
    if isinstance(value, dict) and "bdata" in value:
        data = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return data.reshape([int(s) for s in str(value.get("shape", len(data))).split(",")])
    return np.array(value, dtype=float)


def generation_of(at: AppTest):
    """The session's LiveGeneration (the page started it in a background thread)."""
    return at.session_state[K.GENERATION]["job"]


def finish_generation(at: AppTest) -> AppTest:
    """Wait for the page's background generation to end, then rerun the page as the live view's timer would."""
    assert generation_of(at).wait(60), "the generation did not finish in 60 s"
    return at.run()


def forward_calls() -> int:
    """Forward passes the model has run in this process (a display rerun must add none)."""
    from benchmarks.forward_passes import forward_count

    return forward_count()


class TokenGate:
    """A page's generation's token callback (LiveGeneration's public `on_token`, given through `gate_generations`):
    holds the generation thread after token `at` until `release()`; calls from other threads pass."""

    def __init__(self, at: int):
        import threading

        self.at, self.count = at, 0
        self.reached, self._release = threading.Event(), threading.Event()

    def __call__(self) -> None:
        import threading

        if threading.current_thread().name != "gptviz-generation":
            return
        self.count += 1
        if self.count == self.at:
            self.reached.set()
            self._release.wait(30)

    def release(self) -> None:
        self._release.set()


def live_code(at: AppTest) -> list[str]:
    """The page's code blocks other than its Copy-as-Python snippet (a live generation's text is never one)."""
    from gptviz.app.reproduce import MARK

    return [c.value for c in at.code if not c.value.startswith(MARK)]


def gate_generations(monkeypatch, gate) -> None:
    """Every generation a page starts from now on calls `gate` after each token: the app's LiveGeneration, wrapped
    at the boundary where gptviz.app.live builds it."""
    from gptviz.app import live

    class Gated(live.LiveGeneration):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "on_token": gate})

    monkeypatch.setattr(live, "LiveGeneration", Gated)


def held_generation(monkeypatch, at: AppTest, n_key: str, generate_key: str, n: int, after: int = 2) -> TokenGate:
    """Start a generation of `n` tokens on the page `at` (its count input `n_key`, its button `generate_key`) with
    the model held after token `after`; returns once it is held, with the gate (`release()` lets it go on)."""
    gate = TokenGate(at=after)
    gate_generations(monkeypatch, gate)
    at.number_input(key=n_key).set_value(n)
    at.button(key=generate_key).click()
    at.run()
    assert gate.reached.wait(30)
    return gate


def generate_in(at: AppTest, n: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 0.9) -> AppTest:
    """The Generation page's run of `n` tokens with these settings, to its end."""
    at.number_input(key=K.GEN_N).set_value(n)
    at.slider(key=K.GEN_TEMP).set_value(temperature)
    at.number_input(key=K.GEN_TOPK).set_value(top_k)
    at.slider(key=K.GEN_TOPP).set_value(top_p)
    at.button(key=K.GEN_GENERATE).click()
    return finish_generation(at.run())


def fragment_id(at: AppTest, function: str, *args) -> str:
    """The id of the fragment the last run drew from `function` (called with arguments starting with `args`)."""
    found = []
    for fid, wrapped in at._fragment_storage._fragments.items():  # Streamlit's own store: AppTest names none
        cells = dict(
            zip(wrapped.__code__.co_freevars, (c.cell_contents for c in wrapped.__closure__ or ()), strict=True)
        )
        func, called = cells.get("non_optional_func"), tuple(cells.get("args", ()))
        if getattr(func, "__name__", None) == function and called[: len(args)] == args:
            found.append(fid)
    assert len(found) == 1, (function, args, len(found))
    return found[0]


def run_fragment(at: AppTest, function: str, *args) -> AppTest:
    """Rerun only that fragment, as the browser asks after a pick inside it (AppTest.run reruns the whole script).
    The tree then holds what the fragment drew, and nothing of the rest of the page."""
    from functools import partial

    from streamlit.testing.v1 import local_script_runner

    rerun_data = local_script_runner.RerunData
    local_script_runner.RerunData = partial(rerun_data, fragment_id=fragment_id(at, function, *args))
    try:
        return at.run()
    finally:
        local_script_runner.RerunData = rerun_data
