"""The shared sidebar (app.py + sidebar.sidebar): example prompts, the prompt's size cap, one tokenisation
per distinct prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from gptviz.app import keys as K
from gptviz.app import sidebar
from gptviz.model import tokenizer
from tests.support.pagetest import APP, open_app


@pytest.mark.slow
def test_an_example_fills_the_prompt():
    at = open_app()
    assert at.text_area(key=K.PROMPT).value == sidebar.DEFAULT_PROMPT
    at.selectbox(key=K.EXAMPLE_PROMPT).select("Repeated letters (look for induction heads)").run()
    assert not at.exception
    assert at.text_area(key=K.PROMPT).value == "A B C D E F G H A B C D E F G H"


@pytest.mark.slow
def test_a_huge_prompt_is_cut_with_a_notice_and_nothing_fails():
    at = open_app(prompt="To be, or not to be. " * 2000)  # 42,000 characters
    assert not at.exception
    assert len(at.session_state[K.PROMPT]) == sidebar.MAX_PROMPT_CHARS
    assert any(f"first {sidebar.MAX_PROMPT_CHARS:,} characters" in w.value for w in at.warning)


def test_a_prompt_is_tokenised_once_however_often_pages_ask(monkeypatch):
    calls = []
    real = tokenizer.get_tokenizer()

    class Counting:
        def encode(self, text):
            calls.append(text)
            return real.encode(text)

    monkeypatch.setattr(sidebar, "get_tokenizer", lambda: Counting())
    text = "Ham.\nA prompt only this test tokenises, 0xC0FFEE."
    first = sidebar.encode_prompt(text)
    assert sidebar.encode_prompt(text) == first == tuple(real.encode(text))
    assert calls == [text]


@pytest.mark.slow
def test_the_shipped_server_settings_are_the_ones_streamlit_reads():
    import subprocess
    import sys

    code = (
        "import streamlit.config as c; "
        "print(c.get_option('browser.gatherUsageStats'), c.get_option('client.showErrorDetails'), "
        "c.get_option('server.maxMessageSize'), c.get_option('runner.postScriptGC'), "
        "c.get_option('global.minCachedMessageSize'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(APP).parent, capture_output=True, text=True, timeout=60)
    # the last: no message cache (config.toml says why; tests/browser/test_browser_generate_again.py)
    assert out.stdout.split() == ["False", "type", "100", "False", "1000000000000000"], out.stderr


def test_gptviz_app_passes_every_shipped_setting():
    """`gptviz app` started from another folder gets the settings the checkout's config.toml gives."""
    import tomllib

    from gptviz.__main__ import APP_DEFAULT_FLAGS

    shipped = tomllib.loads((Path(APP).parent / ".streamlit" / "config.toml").read_text())
    flat = {
        f"--{section}.{name}": str(value).lower() if isinstance(value, bool) else str(value)
        for section, options in shipped.items()
        for name, value in options.items()
    }
    assert flat == APP_DEFAULT_FLAGS


@pytest.mark.slow
def test_device_and_precision_choices_follow_the_machine(monkeypatch):
    import torch

    from gptviz.model import devices

    at = open_app()
    assert not at.exception  # this machine: CPU only, so neither choice is drawn
    assert [s.key for s in at.selectbox if s.key in (K.DEVICE, K.DTYPE)] == []
    assert at.session_state[K.MODEL_SPEC].device == "cpu" and at.session_state[K.MODEL_SPEC].dtype == "float32"
    # a GPU machine: the device choice appears; precision appears once a GPU is chosen
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(devices, "mps_available", lambda: True)
    at = open_app()
    assert at.selectbox(key=K.DEVICE).options == ["cpu", "cuda", "mps"]
    assert [s.key for s in at.selectbox if s.key == K.DTYPE] == []
    at = open_app(device="cuda", dtype="bfloat16")
    assert at.selectbox(key=K.DTYPE).options == ["float32", "float16", "bfloat16"]
    spec = at.session_state[K.MODEL_SPEC]
    assert (spec.device, spec.dtype) == ("cuda", "bfloat16")
    at = open_app(device="mps", dtype="float99")  # a stale value falls back to float32
    assert at.session_state[K.MODEL_SPEC].dtype == "float32"


@pytest.mark.slow
def test_the_sidebar_says_when_the_prompt_is_too_long_for_a_link():
    import random

    rng = random.Random(1)
    noise = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(4000))
    long_note = "Too long for a link: the address shares the view without this prompt."
    assert long_note in [c.value for c in open_app(prompt=noise).sidebar.caption]
    assert long_note not in [c.value for c in open_app(prompt="A short prompt").sidebar.caption]


def test_the_wiring_radio_says_it_switches_between_two_models_and_where_to_compare_them():
    at = open_app(model_source=K.SOURCE_BUNDLED)
    text = " ".join(c.value for c in at.sidebar.caption)
    assert "switches between two separately trained models" in text and "heads matched by role" in text
