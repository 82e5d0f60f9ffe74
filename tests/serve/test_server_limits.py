"""What a visitor can make the server hold is bounded in bytes: limits from the environment, a byte-bounded LRU
cache shared by sessions, captures and models refused before they are built when they cannot fit."""

from __future__ import annotations

import threading
import time

import pytest

from gptviz import capture
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model.sizes import capture_nbytes
from gptviz.serve import limits
from gptviz.serve.bounded_cache import BoundedCache
from gptviz.serve.limits import LimitError, ServerLimits
from tests.support import ROOT
from tests.support.models import SMALL, build, random_ids
from tests.support.pagetest import TINY, run_page


def test_limits_come_from_the_environment_and_bad_values_name_their_variable():
    assert ServerLimits.from_env({}) == ServerLimits()
    got = ServerLimits.from_env(
        {"GPTVIZ_CAPTURE_CACHE_MB": "100", "GPTVIZ_TRAINING": "0", "GPTVIZ_MAX_PARAMS": "125_000_000"}
    )
    assert got.capture_bytes == 100 * 2**20 and got.training is False and got.max_params == 125_000_000
    with pytest.raises(ValueError, match="GPTVIZ_MODEL_CACHE_MB must be a whole number, got 'lots'"):
        ServerLimits.from_env({"GPTVIZ_MODEL_CACHE_MB": "lots"})
    with pytest.raises(ValueError, match="GPTVIZ_TRAINING must be 0 or 1"):
        ServerLimits.from_env({"GPTVIZ_TRAINING": "yes"})
    with pytest.raises(ValueError, match="export_mb must be a whole number of at least 1"):
        ServerLimits.from_env({"GPTVIZ_EXPORT_MB": "0"})
    with pytest.raises(
        ValueError,
        match=r"GPTVIZ_CAPTURE_CACHE_MB \+ GPTVIZ_MODEL_CACHE_MB \(600 \+ 600\) must fit in "
        r"GPTVIZ_MEMORY_MB \(1000\)",
    ):
        ServerLimits(memory_mb=1000, capture_cache_mb=600, model_cache_mb=600)


def test_a_memory_budget_alone_is_enough_the_caches_take_their_shares_of_it():
    """Issue 57: with only GPTVIZ_MEMORY_MB=1024 the app refused to start, its caches' fixed defaults (2,048 +
    6,144 MB) being past it. Unset, the capture cache takes a quarter and the model cache the rest."""

    def caches(**env):
        got = ServerLimits.from_env({f"GPTVIZ_{k.upper()}": str(v) for k, v in env.items()})
        return got.capture_cache_mb, got.model_cache_mb

    assert caches() == (2048, 6144)  # the defaults as they were
    assert caches(memory_mb=1024) == (256, 768)
    assert caches(memory_mb=1024, model_cache_mb=900) == (124, 900)  # one set: the other gets what is left
    assert caches(memory_mb=1024, model_cache_mb=100) == (256, 100)  # ... up to its share
    assert caches(memory_mb=1024, capture_cache_mb=600) == (600, 424)
    assert caches(memory_mb=1024, capture_cache_mb=100, model_cache_mb=200) == (100, 200)  # explicit: kept
    assert caches(memory_mb=2) == (1, 1) and ServerLimits(memory_mb=1024) == ServerLimits.from_env(
        {"GPTVIZ_MEMORY_MB": "1024"}
    )
    with pytest.raises(
        ValueError,
        match=r"GPTVIZ_MODEL_CACHE_MB \(1024\) leaves no room for the capture cache in "
        r"GPTVIZ_MEMORY_MB \(1024\)",
    ):
        caches(memory_mb=1024, model_cache_mb=1024)
    with pytest.raises(ValueError, match=r"GPTVIZ_CAPTURE_CACHE_MB \+ GPTVIZ_MODEL_CACHE_MB \(512 \+ 600\) must fit"):
        caches(memory_mb=1024, capture_cache_mb=512, model_cache_mb=600)
    with pytest.raises(ValueError, match=r"GPTVIZ_MODEL_CACHE_MB \(9000\) leaves no room .* GPTVIZ_MEMORY_MB \(8192\)"):
        caches(model_cache_mb=9000)  # the budget's default, too small
    with pytest.raises(ValueError, match=r"GPTVIZ_MEMORY_MB \(1\) leaves no room for the capture and model caches"):
        caches(memory_mb=1)
    with pytest.raises(ValueError, match="capture_cache_mb must be a whole number of at least 1, got 0"):
        ServerLimits(capture_cache_mb=0)


STARTS_WITH_A_BUDGET_ALONE = """
import os, sys
for name in [n for n in os.environ if n.startswith("GPTVIZ_")]:
    del os.environ[name]
os.environ["GPTVIZ_MEMORY_MB"] = "1024"
from streamlit.testing.v1 import AppTest
from gptviz.app import keys as K, model_service
from gptviz.serve import limits
at = AppTest.from_file("app.py", default_timeout=120)
at.session_state[K.MODEL_SOURCE] = K.SOURCE_PRESET
at.session_state[K.PRESET] = "tiny"
at.run()
assert not at.exception, [e.message for e in at.exception]
assert not at.error, [e.value for e in at.error]
lim = limits.server_limits()
store = model_service.model_store()
print(lim.capture_cache_mb, lim.model_cache_mb, store.budget >> 20, len(store))
"""


@pytest.mark.slow
def test_the_app_starts_with_only_its_memory_budget_set():
    from tests.support.cli import run_python

    assert run_python(STARTS_WITH_A_BUDGET_ALONE).split()[-4:] == ["256", "768", "768", "1"]


def test_the_cache_drops_the_least_recently_used_entries_to_stay_under_its_bytes():
    cache = BoundedCache(100, "capture")
    for key in "abc":
        cache.get_or_build(key, lambda key=key: key, lambda _: 40)  # a, b fit; c pushes a out
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
    # without the logits: what a capture keeps once they are dropped (the .npz export)
    assert capture_nbytes(SMALL, names, 9, logits=False) == 4 * (4 * 9 * 9 + 9 * 128)


def test_the_app_refuses_a_capture_past_its_budget_with_a_message(monkeypatch):
    monkeypatch.setattr(model_service, "capture_store", lambda: BoundedCache(64 * 1024, "capture"))
    ids = tuple(range(100, 140))
    with pytest.raises(LimitError, match="more than the 65,536 bytes this server keeps"):
        model_service.get_capture(TINY, ids)  # every hook of 40 tokens: ~8 MB
    at = run_page("attention", "The quick brown fox jumps over the lazy dog " * 4)
    assert not at.exception
    assert any("this server keeps" in e.value for e in at.error)


def test_a_model_past_the_parameter_cap_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr(limits, "server_limits", lambda: ServerLimits(max_params=10_000_000))
    spec = model_service.ModelSpec(K.SOURCE_PRESET, "gpt2-small", "pre")
    monkeypatch.setattr(model_service, "_build_model", lambda spec: pytest.fail("built anyway"))
    with pytest.raises(
        LimitError, match="gpt2-small has 124,439,808 parameters; this server builds models of up to 10,000,000"
    ):
        model_service.load_model(spec)
    at = run_page("attention", spec=spec)
    shown = [e.value.replace("\\", "") for e in at.error]  # the message is markdown-escaped for display
    assert not at.exception and any("builds models of up to 10,000,000 (GPTVIZ_MAX_PARAMS)" in m for m in shown)


def test_models_share_one_byte_budget(monkeypatch):
    store = BoundedCache(int(1.5 * model_service.model_nbytes(model_service.load_model(TINY))), "model")
    monkeypatch.setattr(model_service, "model_store", lambda: store)
    first = model_service.load_model(TINY)
    assert model_service.load_model(TINY) is first  # cached and shared
    model_service.load_model(TINY._replace(seed=1))  # a second tiny does not fit beside it
    assert TINY not in store and TINY._replace(seed=1) in store
    assert model_service.model_nbytes(first) == sum(
        p.numel() * 4 for p in first.parameters()
    )  # the tied head counted once


@pytest.mark.slow
def test_a_download_past_the_export_cap_is_disabled_with_a_message(monkeypatch):
    monkeypatch.setattr(limits, "server_limits", lambda: ServerLimits(export_mb=1))
    at = run_page("activations", "A prompt long enough to make a capture of more than one mebibyte " * 6)
    assert not at.exception
    assert at.download_button(key=K.ACT_NPZ).proto.disabled
    assert any("downloads of up to 1 MiB" in w.value for w in at.warning)


@pytest.mark.slow
def test_a_measurement_past_the_memory_budget_is_refused(monkeypatch):
    monkeypatch.setattr(
        limits, "server_limits", lambda: ServerLimits(memory_mb=3, capture_cache_mb=1, model_cache_mb=1)
    )
    at = run_page("norms")
    assert not at.exception
    assert any("more than the 3 MiB this server allows" in e.value for e in at.error)


@pytest.mark.slow
def test_an_operator_can_turn_training_off(monkeypatch):
    monkeypatch.setattr(limits, "server_limits", lambda: ServerLimits(training=False))
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

    got = ServerLimits.from_env({"GPTVIZ_GENERATIONS": "2", "GPTVIZ_GENERATION_THREADS": "3"})
    assert (got.generations, got.generation_threads) == (2, 3)
    assert (ServerLimits().generations, ServerLimits().generation_threads) == (4, 1)
    with pytest.raises(ValueError, match="generations"):
        ServerLimits(generations=0)
    guide = (ROOT / "docs" / "deploying.md").read_text()
    assert "`GPTVIZ_GENERATIONS` | 4 |" in guide and "`GPTVIZ_GENERATION_THREADS` | 1 |" in guide
    # every variable the limits read is in the operator's guide
    import re

    from gptviz.serve import limits

    named = set(re.findall(r"^(GPTVIZ_[A-Z_]+)", limits.__doc__, flags=re.M))
    assert len(named) > 20 and {v for v in named if f"`{v}`" not in guide} == set()


def test_the_information_flow_graph_goes_through_the_capture_budget(monkeypatch):
    """Its capture (every layer's attention pattern) is refused before the model runs when it would pass the
    server's capture budget: a warning, no exception, no graph."""
    monkeypatch.setattr(model_service, "capture_store", lambda: BoundedCache(16 * 1024, "capture"))
    at = run_page(
        "why",
        "A prompt of a few tokens, enough to pass a sixteen kilobyte budget for its capture",
        why_view="Information flow",
    )
    assert not at.exception
    assert any("this capture would take about" in w.value for w in at.warning)
    assert not [c for c in at.get("plotly_chart")]


@pytest.mark.slow
def test_builds_in_progress_hold_their_estimate_so_concurrent_builds_stay_within_the_budget():
    """Ten visitors' 20,000-character prompts on gpt2-xl reached 11.3 GB: captures being built were outside the
    capture budget. Now a build waits while the builds in progress leave no room for it."""
    cache, events = BoundedCache(100, "capture", wait_s=10), []
    first_building, let_first_finish = threading.Event(), threading.Event()

    def slow_first():
        events.append(("first starts", cache.reserved))
        first_building.set()
        let_first_finish.wait(10)
        return "first"

    def second():
        events.append(("second starts", cache.reserved))
        return "second"

    a = threading.Thread(target=lambda: cache.get_or_build("a", slow_first, lambda v: 60, estimate=60))
    a.start()
    assert first_building.wait(10)
    b = threading.Thread(target=lambda: cache.get_or_build("b", second, lambda v: 60, estimate=60))
    b.start()
    time.sleep(0.3)
    assert events == [("first starts", 60)]  # the second waits: 60 + 60 would pass the 100-byte budget
    let_first_finish.set()
    a.join(10), b.join(10)
    assert events == [("first starts", 60), ("second starts", 60)]  # then it runs, with the first stored and dropped
    assert "b" in cache and "a" not in cache and cache.nbytes == 60 and cache.reserved == 0


def test_a_build_that_cannot_get_room_in_time_is_refused():
    cache, release = BoundedCache(100, "capture", wait_s=0.2), threading.Event()
    holder = threading.Thread(
        target=lambda: cache.get_or_build("a", lambda: release.wait(10), lambda v: 80, estimate=80)
    )
    holder.start()
    while cache.reserved == 0:
        time.sleep(0.01)
    with pytest.raises(LimitError, match="building other captures that fill the 100 bytes"):
        cache.get_or_build("b", lambda: pytest.fail("built anyway"), lambda v: 30, estimate=30)
    release.set()
    holder.join(10)
    assert cache.reserved == 0 and "a" in cache


@pytest.mark.slow
def test_the_depth_sweep_is_checked_at_its_deepest_model(monkeypatch):
    """The sweep checked the chosen depth, not its deepest: at a 1 GB limit, depth 1 with depths [1, 48] built a
    380M-parameter model with gradients. Now the deepest depth must fit before the sweep can start."""
    monkeypatch.setattr(
        limits, "server_limits", lambda: ServerLimits(memory_mb=300, capture_cache_mb=100, model_cache_mb=100)
    )
    at = run_page("norms", norms_depth=1, norms_width=192, norms_sweep_depths=[1, 48])  # 10.3M at depth 1, 31M at 48
    assert not at.exception
    assert any(
        e.value.startswith("The sweep's deepest model (48 layers) has")
        and "more than the 300 MiB this server allows" in e.value
        for e in at.error
    ), [e.value for e in at.error]
    assert not [b for b in at.button if b.label == "Run the depth sweep"]
    assert not any(e.value.startswith("This model") for e in at.error)  # the chosen depth itself fits


def test_a_model_in_use_is_not_dropped_and_what_needs_its_room_waits():
    """A running generation kept an evicted gpt2-xl alive outside the budget (two visitors: 12.5 GB at an 8 GB
    limit). Now the model it runs on is held in the store until it ends."""
    cache = BoundedCache(100, "model", wait_s=0.2)
    cache.get_or_build("xl seed 0", lambda: "m0", lambda _: 70, estimate=70)
    release = cache.hold("xl seed 0")
    with pytest.raises(LimitError, match="fill the 100 bytes"):
        cache.get_or_build("xl seed 1", lambda: pytest.fail("built beside a model in use"), lambda _: 70, estimate=70)
    assert "xl seed 0" in cache
    release()
    release()  # once only: a second call changes nothing
    cache.get_or_build("xl seed 1", lambda: "m1", lambda _: 70, estimate=70)
    assert "xl seed 0" not in cache and "xl seed 1" in cache


@pytest.mark.slow
def test_a_running_generation_holds_its_model_in_the_store(monkeypatch):
    from tests.support.pagetest import held_generation

    store = BoundedCache(10**9, "model")
    monkeypatch.setattr(model_service, "model_store", lambda: store)
    at = run_page("generation", "Hold the model")
    gate = held_generation(monkeypatch, at, K.GEN_N, K.GEN_GENERATE, 3, after=1)
    assert store._held == {TINY: 1}  # held while it runs
    gate.release()
    job = at.session_state[K.GENERATION]["job"]
    assert job.wait(30) and store._held == {}  # released when it ends
