"""Helpers for the page tests: run a page file with the state app.py's sidebar would give it, and read
its Plotly figures back as data.

AppTest note (Streamlit 1.67): after a page switch AppTest reruns only the page file, without app.py, so the
page tests run each page file directly with the two values the sidebar provides (model_spec, prompt).
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from gptviz.app import models, sidebar, keys as K

ROOT = Path(__file__).resolve().parents[1]
TINY = models.ModelSpec(K.SOURCE_PRESET, "tiny", "pre")


def run_page(name: str, prompt: str = sidebar.DEFAULT_PROMPT, spec: models.ModelSpec | None = TINY, **state) -> AppTest:
    """Run app_pages/<name>.py once with model_spec, prompt and any other session-state values set."""
    at = AppTest.from_file(str(ROOT / "app_pages" / f"{name}.py"), default_timeout=120)
    at.session_state["model_spec"] = spec
    at.session_state["prompt"] = prompt
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def figures(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def title_of(fig: dict) -> str:
    return (fig["layout"].get("title") or {}).get("text") or ""


def figure(at: AppTest, title_start: str) -> dict:
    """The one figure whose title starts with `title_start`."""
    found = [f for f in figures(at) if title_of(f).startswith(title_start)]
    assert len(found) == 1, [title_of(f) for f in figures(at)]
    return found[0]


def attention_map(at: AppTest, key: str = "att_map") -> tuple[dict, np.ndarray]:
    """A heatmap component of the Attention page (by its key): its data and the weights it carries,
    [layers sent, heads + 1, rows, keys]."""
    from gptviz.app.component.attention_map import NAME, decode_weights
    found = [el for el in at.get("bidi_component")
             if el.proto.component_name == NAME and el.proto.id.endswith(f"-{key}")]
    assert len(found) == 1, len(found)
    data = json.loads(found[0].proto.json)
    return data, decode_weights(data)


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
    from gptviz.model import forward_count
    return forward_count()


class TokenGate:
    """Stands in for gptviz.app.live.after_token (which a page's generation calls after each token) and holds the
    generation thread after token `at` until `release()`; calls from other threads pass."""

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
