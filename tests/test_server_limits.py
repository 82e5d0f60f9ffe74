"""What a visitor can make the server hold is bounded in bytes: limits from the environment, a byte-bounded LRU
cache shared by sessions, captures and models refused before they are built when they cannot fit."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from conftest import SMALL, build, random_ids
from gptviz import capture, ui
from gptviz.bounded_cache import BoundedCache
from gptviz.hooks import capture_nbytes
from gptviz.limits import LimitError, ServerLimits
from pagetest import TINY, run_page


def test_limits_come_from_the_environment_and_bad_values_name_their_variable():
    assert ServerLimits.from_env({}) == ServerLimits()
    got = ServerLimits.from_env({"GPTVIZ_CAPTURE_CACHE_MB": "100", "GPTVIZ_TRAINING": "0",
                                 "GPTVIZ_MAX_PARAMS": "125_000_000"})
    assert got.capture_bytes == 100 * 2**20 and got.training is False and got.max_params == 125_000_000
    with pytest.raises(ValueError, match="GPTVIZ_MODEL_CACHE_MB must be a whole number, got 'lots'"):
        ServerLimits.from_env({"GPTVIZ_MODEL_CACHE_MB": "lots"})
    with pytest.raises(ValueError, match="GPTVIZ_TRAINING must be 0 or 1"):
        ServerLimits.from_env({"GPTVIZ_TRAINING": "yes"})
    with pytest.raises(ValueError, match="export_mb must be a whole number of at least 1"):
        ServerLimits.from_env({"GPTVIZ_EXPORT_MB": "0"})
    with pytest.raises(ValueError, match="must fit in memory_mb"):
        ServerLimits(memory_mb=1000, capture_cache_mb=600, model_cache_mb=600)


def test_the_cache_drops_the_least_recently_used_entries_to_stay_under_its_bytes():
    cache = BoundedCache(100, "capture")
    for key in "abc":
        cache.get_or_build(key, lambda: key, lambda _: 40)  # a, b fit; c pushes a out
    assert "a" not in cache and "b" in cache and "c" in cache and cache.nbytes == 80
    cache.get_or_build("b", lambda: pytest.fail("b is cached"), lambda _: 40)  # b is now the most recent
    cache.get_or_build("d", lambda: "d", lambda _: 40)
    assert "c" not in cache and set("bd") <= {k for k in "abcd" if k in cache}


def test_an_entry_too_big_for_the_whole_budget_is_refused_before_it_is_built():
    cache = BoundedCache(2**20, "capture")
    with pytest.raises(LimitError, match="this capture would take about 2 MiB, more than the 1 MiB"):
        cache.get_or_build("x", lambda: pytest.fail("built anyway"), len, estimate=2 * 2**20)
    with pytest.raises(LimitError, match="this capture takes 3 MiB"):
        cache.get_or_build("y", lambda: b"x" * (3 * 2**20), len)  # an estimate that was too low
    assert len(cache) == 0


def test_one_key_is_built_once_while_many_threads_ask_for_it():
    cache, builds = BoundedCache(10**6), []

    def build():
        builds.append(1)
        time.sleep(0.05)
        return "model"
    threads = [threading.Thread(target=cache.get_or_build, args=("gpt2-xl", build, lambda _: 10)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1] and cache.get_or_build("gpt2-xl", build, lambda _: 10) == "model"


def test_a_captures_size_is_known_exactly_before_it_runs():
    model = build()
    ids = random_ids(9)
    logits, cache = capture(model, ids[None])
    measured = sum(t.numel() for t in cache.values()) * 4 + logits.numel() * 4
    assert capture_nbytes(SMALL, model.hook_names, 9) == measured
    names = ["blocks.0.attn.hook_pattern", "blocks.1.mlp.hook_post"]
    assert capture_nbytes(SMALL, names, 9) == 4 * (4 * 9 * 9 + 9 * 128 + 9 * 101)


def test_the_app_refuses_a_capture_past_its_budget_with_a_message(monkeypatch):
    monkeypatch.setattr(ui, "_capture_store", lambda: BoundedCache(64 * 1024, "capture"))
    ids = tuple(range(100, 140))
    with pytest.raises(LimitError, match="more than the 65,536 bytes this server keeps"):
        ui.get_capture(TINY, ids)  # every hook of 40 tokens: ~8 MB
    at = run_page("attention", "The quick brown fox jumps over the lazy dog " * 4)
    assert not at.exception
    assert any("this server keeps" in e.value for e in at.error)


def test_a_model_past_the_parameter_cap_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr(ui, "server_limits", lambda: ServerLimits(max_params=10_000_000))
    spec = ui.ModelSpec(ui.SOURCE_PRESET, "gpt2-small", "pre")
    monkeypatch.setattr(ui, "_build_model", lambda spec: pytest.fail("built anyway"))
    with pytest.raises(LimitError, match="gpt2-small has 124,439,808 parameters; this server builds models of "
                                         "up to 10,000,000"):
        ui.load_model(spec)
    at = run_page("attention", spec=spec)
    shown = [e.value.replace("\\", "") for e in at.error]  # the message is markdown-escaped for display
    assert not at.exception and any("builds models of up to 10,000,000 (GPTVIZ_MAX_PARAMS)" in m for m in shown)


def test_models_share_one_byte_budget(monkeypatch):
    store = BoundedCache(int(1.5 * ui.model_nbytes(ui.load_model(TINY))), "model")
    monkeypatch.setattr(ui, "_model_store", lambda: store)
    first = ui.load_model(TINY)
    assert ui.load_model(TINY) is first                       # cached and shared
    ui.load_model(TINY._replace(seed=1))                      # a second tiny does not fit beside it
    assert TINY not in store and TINY._replace(seed=1) in store
    assert ui.model_nbytes(first) == sum(p.numel() * 4 for p in first.parameters())  # the tied head counted once


def test_a_download_past_the_export_cap_is_disabled_with_a_message(monkeypatch):
    monkeypatch.setattr(ui, "server_limits", lambda: ServerLimits(export_mb=1))
    at = run_page("activations", "A prompt long enough to make a capture of more than one mebibyte " * 6)
    assert not at.exception
    assert at.download_button(key="act_npz").proto.disabled
    assert any("downloads of up to 1 MiB" in w.value for w in at.warning)


@pytest.mark.slow
def test_a_measurement_past_the_memory_budget_is_refused(monkeypatch):
    monkeypatch.setattr(ui, "server_limits", lambda: ServerLimits(memory_mb=3, capture_cache_mb=1, model_cache_mb=1))
    at = run_page("norms")
    assert not at.exception
    assert any("more than the 3 MiB this server allows" in e.value for e in at.error)


def test_an_operator_can_turn_training_off(monkeypatch):
    monkeypatch.setattr(ui, "server_limits", lambda: ServerLimits(training=False))
    at = run_page("training")
    assert not at.exception
    assert any("Training is turned off on this server" in i.value for i in at.info)
    assert not [b for b in at.button if b.label == "Start training"]


def test_room_is_made_before_a_large_entry_is_built():
    """The peak stays within the budget while a new model is built: the old one is dropped first."""
    cache, held_while_building = BoundedCache(100, "model"), []
    cache.get_or_build("gpt2-xl seed 0", lambda: "m0", lambda _: 70, estimate=70)

    def build():
        held_while_building.append(cache.nbytes)
        return "m1"
    cache.get_or_build("gpt2-xl seed 1", build, lambda _: 70, estimate=70)
    assert held_while_building == [0] and "gpt2-xl seed 0" not in cache and cache.nbytes == 70


def test_generation_limits_come_from_the_environment_and_are_documented():
    from pathlib import Path
    got = ServerLimits.from_env({"GPTVIZ_GENERATIONS": "2", "GPTVIZ_GENERATION_THREADS": "3"})
    assert (got.generations, got.generation_threads) == (2, 3)
    assert (ServerLimits().generations, ServerLimits().generation_threads) == (4, 1)
    with pytest.raises(ValueError, match="generations"):
        ServerLimits(generations=0)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "`GPTVIZ_GENERATIONS` | 4 |" in readme and "`GPTVIZ_GENERATION_THREADS` | 1 |" in readme


def test_the_information_flow_graph_goes_through_the_capture_budget(monkeypatch):
    """Its capture (every layer's attention pattern) is refused before the model runs when it would pass the
    server's capture budget: a warning, no exception, no graph."""
    monkeypatch.setattr(ui, "_capture_store", lambda: BoundedCache(16 * 1024, "capture"))
    at = run_page("why", "A prompt of a few tokens, enough to pass a sixteen kilobyte budget for its capture",
                  why_view="Information flow")
    assert not at.exception
    assert any("this capture would take about" in w.value for w in at.warning)
    assert not [c for c in at.get("plotly_chart")]
