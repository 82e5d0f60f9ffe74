"""The memory accountant (gptviz.serve.memory): its arithmetic, its refusals, and that every path the app runs at scale
reserves before it allocates and gives the reservation back however the work ends."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gptviz import PRESETS
from gptviz.model import sizes
from gptviz.model.hooks import ActivationCache, act_name, stack_patterns
from gptviz.model.sizes import capture_nbytes
from gptviz.serve import memory
from gptviz.serve.bounded_cache import BoundedCache
from gptviz.serve.limits import LimitError
from gptviz.serve.memory import MemoryAccountant
from gptviz.serve.training_jobs import JobLimitError, JobRegistry, JobSpec, job_nbytes
from gptviz.training.train import TrainSettings

MiB = 2**20


# ---- arithmetic -----------------------------------------------------------------------------------------------


def test_reservations_and_stored_bytes_add_up_and_are_given_back():
    acc = MemoryAccountant(100 * MiB, wait_s=0)
    a = acc.acquire(30 * MiB, "a")
    with acc.reserve(20 * MiB, "b"):
        acc.stored(10 * MiB)
        assert (acc.reserved, acc.stored_bytes, acc.in_use) == (50 * MiB, 10 * MiB, 60 * MiB)
        assert sorted(acc.holders()) == ["a", "b"]
    assert acc.in_use == 40 * MiB
    a.release()
    a.release()  # once only
    acc.stored(-10 * MiB)
    assert (acc.reserved, acc.stored_bytes, acc.in_use, acc.peak) == (0, 0, 0, 60 * MiB)


def test_exactly_the_budget_fits_one_byte_more_is_refused():
    acc = MemoryAccountant(100, wait_s=0)
    with acc.reserve(60, "first"):
        with acc.reserve(40, "second"):
            assert acc.in_use == 100
        with pytest.raises(LimitError):
            acc.acquire(41, "third")
    assert acc.in_use == 0


def test_a_refusal_says_what_was_asked_and_what_holds_the_rest():
    acc = MemoryAccountant(100 * MiB, wait_s=0)
    with acc.reserve(90 * MiB, "a capture of 682 tokens on gpt2-small"):
        with pytest.raises(LimitError) as err:
            acc.acquire(20 * MiB, "a patching sweep")
    text = str(err.value)
    assert "a patching sweep needs about 20 MiB" in text and "90 MiB of its 100 MiB (GPTVIZ_MEMORY_MB)" in text
    assert "a capture of 682 tokens on gpt2-small" in text and "/" not in text.replace("682 tokens", "")


def test_more_than_the_whole_budget_is_refused_at_once_without_waiting():
    acc = MemoryAccountant(100 * MiB, wait_s=30)
    started = time.monotonic()
    with pytest.raises(LimitError, match="more than this server's whole memory budget of 100 MiB"):
        acc.acquire(101 * MiB, "gpt2-xl")
    assert time.monotonic() - started < 1


def test_a_reservation_is_released_when_the_work_raises():
    acc = MemoryAccountant(100, wait_s=0)
    with pytest.raises(RuntimeError):
        with acc.reserve(80, "work that fails"):
            raise RuntimeError("boom")
    assert acc.in_use == 0
    with acc.reserve(100, "the whole budget"):  # nothing was left behind
        pass


@pytest.mark.slow
def test_a_reservation_that_does_not_fit_waits_for_one_that_ends():
    acc = MemoryAccountant(100, wait_s=10)
    first = acc.acquire(70, "first")
    threading.Timer(0.3, first.release).start()
    started = time.monotonic()
    with acc.reserve(70, "second"):
        waited = time.monotonic() - started
    assert 0.2 < waited < 5


# ---- the caches count in the same total ------------------------------------------------------------------------


def test_cached_entries_count_and_are_dropped_to_make_room_except_those_in_use():
    acc = MemoryAccountant(100, wait_s=0)
    cache = BoundedCache(100, "capture", accountant=acc)
    cache.get_or_build("old", lambda: "o", lambda _: 30, estimate=30)
    cache.get_or_build("in use", lambda: "u", lambda _: 30, estimate=30)
    release = cache.hold("in use")
    assert (acc.stored_bytes, acc.reserved) == (60, 0)
    with acc.reserve(60, "a generation"):  # 60 + 60 > 100: the unused entry goes, the held one stays
        assert "old" not in cache and "in use" in cache and acc.in_use == 90
        with pytest.raises(LimitError):  # nothing left to drop
            acc.acquire(20, "more")
    release()
    with acc.reserve(100, "everything"):  # released: now it may go too
        assert len(cache) == 0 and acc.stored_bytes == 0


def test_room_is_asked_of_the_cheapest_cache_first_and_only_what_is_short():
    """Work 30 bytes short of the budget drops 30 bytes of derived results, not a model too (each cache used to be
    asked for the whole shortfall, so every cache dropped it)."""
    acc = MemoryAccountant(100, wait_s=0)
    models = BoundedCache(100, "model", accountant=acc, drop_order=2)  # registered first: order, not age, decides
    results = BoundedCache(100, "result", accountant=acc, drop_order=0)
    models.get_or_build("gpt2", lambda: "m", lambda _: 40, estimate=40)
    for key in ("a", "b", "c"):
        results.get_or_build(key, lambda key=key: key, lambda _: 20, estimate=20)
    with acc.reserve(30, "a capture"):  # 40 + 60 + 30 = 130: 30 short
        assert "gpt2" in models and len(results) == 1 and acc.in_use == 40 + 20 + 30
    with acc.reserve(80, "a bigger one"):  # results gone first, then the model
        assert len(results) == 0 and "gpt2" not in models


def test_a_build_reserves_its_working_memory_then_counts_what_it_stores():
    acc = MemoryAccountant(1000, wait_s=0)
    cache = BoundedCache(1000, "capture", accountant=acc)
    seen = {}

    def build():
        seen["during"] = (acc.reserved, acc.stored_bytes)
        return "value"

    cache.get_or_build("k", build, lambda _: 100, estimate=100, work=300, what="a capture")
    assert seen["during"] == (300, 0) and (acc.reserved, acc.stored_bytes) == (0, 100)
    cache.clear()
    assert acc.stored_bytes == 0


def test_a_build_refused_by_the_accountant_never_runs_and_leaves_nothing_reserved():
    acc = MemoryAccountant(1000, wait_s=0)
    cache = BoundedCache(1000, "capture", accountant=acc)
    with acc.reserve(900, "another visitor's work"):
        with pytest.raises(LimitError, match="a capture"):
            cache.get_or_build(
                "k", lambda: pytest.fail("built"), lambda _: 100, estimate=100, work=300, what="a capture"
            )
    assert acc.in_use == 0 and cache.reserved == 0


# ---- estimates ------------------------------------------------------------------------------------------------


def test_a_captures_estimate_covers_what_it_keeps_plus_the_forward_pass():
    cfg = PRESETS["gpt2-small"]
    names = [act_name("pattern", i) for i in range(cfg.n_layers)]
    kept = capture_nbytes(cfg, names, 682)
    work = sizes.capture_work_nbytes(cfg, names, 682)
    # measured in a fresh process (docs/benchmarks-history.md): 682 tokens of gpt2-small, every pattern, peak +489 MiB
    # for 410 MiB kept; the estimate must cover it and not be wildly above
    assert kept < work and 489 * MiB <= work + 64 * MiB <= 1.3 * 489 * MiB + 64 * MiB


def test_a_kv_cache_estimate_is_the_tensors_the_model_allocates():
    from gptviz.model.config import GPTConfig
    from gptviz.model.model import GPT

    cfg = GPTConfig(n_layers=2, n_heads=2, d_model=16, n_ctx=32, vocab_size=50)
    cache = GPT(cfg).new_kv_cache()
    actual = sum(t.nbytes for layer in cache.layers for t in (layer.k, layer.v))
    assert sizes.kv_cache_nbytes(cfg) == actual


def test_stacked_patterns_are_one_block_and_patterns_makes_no_copy():
    store = {act_name("pattern", i): torch.rand(2, 5, 5) for i in range(3)}
    store["blocks.0.hook_resid_pre"] = torch.rand(5, 4)
    expected = torch.stack([store[act_name("pattern", i)] for i in range(3)])
    stack_patterns(store, 3)
    patterns = ActivationCache(store, 3).patterns()
    assert torch.equal(patterns, expected)
    assert patterns.data_ptr() == store[act_name("pattern", 0)].data_ptr()  # the block itself
    assert torch.equal(
        ActivationCache({act_name("pattern", i): expected[i].clone() for i in range(3)}, 3).patterns(), expected
    )  # unstacked: still right, a copy


# ---- every wired path reserves before it allocates --------------------------------------------------------------


@pytest.fixture
def tiny_budget(monkeypatch):
    """The app's accountant and stores on a budget of `n` bytes."""
    from gptviz.app import model_service

    def use(n: int) -> MemoryAccountant:
        acc = MemoryAccountant(n, wait_s=0)
        monkeypatch.setattr(memory, "accountant", lambda: acc)
        model_store = BoundedCache(10**10, "model", accountant=acc)
        capture_store = BoundedCache(10**10, "capture", accountant=acc)
        monkeypatch.setattr(model_service, "model_store", lambda: model_store)
        monkeypatch.setattr(model_service, "capture_store", lambda: capture_store)
        return acc

    return use


def test_a_preset_past_the_budget_is_refused_before_the_model_is_built(tiny_budget, monkeypatch):
    from gptviz.app import keys, model_service

    tiny_budget(100 * MiB)
    monkeypatch.setattr(model_service, "_build_model", lambda *a: pytest.fail("built"))
    with pytest.raises(LimitError, match="building gpt2-small needs about"):
        model_service.load_model(model_service.ModelSpec(keys.SOURCE_PRESET, "gpt2-small", "pre"))


def test_a_capture_past_the_budget_is_refused_before_the_model_runs(tiny_budget, monkeypatch):
    from gptviz.app import keys, model_service

    spec = model_service.ModelSpec(keys.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    model = model_service.load_model(spec)  # on the real stores, before the budget shrinks
    acc = tiny_budget(10**10)
    monkeypatch.setattr(model_service, "load_model", lambda s: model)
    with acc.reserve(10**10 - 10 * MiB, "other work"):
        monkeypatch.setattr(model_service, "capture", lambda *a, **k: pytest.fail("the model ran"))
        with pytest.raises(LimitError, match="a capture of 128 tokens on shakespeare-pre"):
            model_service.get_capture(spec, tuple(range(128)))
    assert acc.in_use == 0


def test_a_capture_reserves_while_it_runs_and_its_result_is_counted_as_stored(tiny_budget, monkeypatch):
    from gptviz.app import keys, model_service

    spec = model_service.ModelSpec(keys.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    model = model_service.load_model(spec)
    acc = tiny_budget(10**10)
    monkeypatch.setattr(model_service, "load_model", lambda s: model)
    real, during = model_service.capture, {}

    def spy(*args, **kwargs):
        during["reserved"] = acc.reserved
        return real(*args, **kwargs)

    monkeypatch.setattr(model_service, "capture", spy)
    ids = tuple(range(16))
    names = model_service.pattern_names(model.config.n_layers)
    model_service.get_capture(spec, ids, names)
    assert during["reserved"] == sizes.capture_work_nbytes(model.config, names, 16)
    assert acc.reserved == 0 and acc.stored_bytes == capture_nbytes(model.config, names, 16)


def test_a_generation_is_refused_with_a_reason_when_memory_is_busy_and_holds_nothing(tiny_budget):
    from gptviz.app import keys, model_service

    spec = model_service.ModelSpec(keys.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    model = model_service.load_model(spec)
    acc = tiny_budget(sizes.generation_nbytes(model.config, 4, 10) - 1)
    with pytest.raises(RuntimeError, match="a generation on shakespeare-pre needs about"):
        model_service.hold_for_generation(spec, model, [1, 2, 3, 4], {"max_new_tokens": 10})
    assert acc.in_use == 0


def test_a_generation_holds_its_reservation_until_released(tiny_budget):
    from gptviz.app import keys, model_service

    spec = model_service.ModelSpec(keys.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    model = model_service.load_model(spec)
    acc = tiny_budget(10**10)
    release = model_service.hold_for_generation(spec, model, [1, 2, 3, 4], {"max_new_tokens": 10})
    assert acc.reserved == sizes.generation_nbytes(model.config, 4, 10)
    release()
    assert acc.reserved == 0


def _tiny_job() -> JobSpec:
    from gptviz.model.config import GPTConfig

    cfg = GPTConfig(n_layers=1, n_heads=2, d_model=16, n_ctx=16, vocab_size=64)
    return JobSpec({"m": cfg}, TrainSettings(steps=2, batch_size=2, block_size=8, warmup=0))


def test_a_training_run_past_the_memory_budget_is_refused_before_it_starts():
    spec = _tiny_job()
    acc = MemoryAccountant(job_nbytes(spec) - 1, wait_s=0)
    registry = JobRegistry(accountant=acc)
    with pytest.raises(JobLimitError, match="a training run of 1 model needs about"):
        registry.start(spec, tokens=torch.randint(0, 64, (500,)))
    assert registry.jobs() == [] and acc.in_use == 0


def test_a_training_run_holds_its_reservation_until_it_ends():
    spec = _tiny_job()
    acc = MemoryAccountant(10 * job_nbytes(spec), wait_s=0)
    registry = JobRegistry(accountant=acc)
    job = registry.start(spec, tokens=torch.randint(0, 64, (500,)))
    assert acc.reserved in (job_nbytes(spec), 0)  # 0 only if it already finished
    assert job.wait(60) and job.status == "done"
    assert acc.reserved == 0


def test_a_failing_training_run_releases_its_reservation():
    spec = _tiny_job()
    acc = MemoryAccountant(10 * job_nbytes(spec), wait_s=0)
    job = JobRegistry(accountant=acc).start(spec, tokens=torch.randint(0, 64, (3,)))  # too short to train on
    assert job.wait(60) and job.status == "failed"
    assert acc.reserved == 0


def test_trained_models_count_until_they_are_dropped():
    from gptviz.app.jobs import TrainedModels
    from gptviz.app.model_service import model_nbytes
    from gptviz.model.config import GPTConfig
    from gptviz.model.model import GPT

    acc = MemoryAccountant(10**9)
    kept = TrainedModels(1, acc)
    a, b = (GPT(GPTConfig(n_layers=1, n_heads=2, d_model=16, n_ctx=16, vocab_size=64)) for _ in range(2))
    kept.add("run1", a, "s")
    assert acc.stored_bytes == model_nbytes(a)
    kept.add("run2", b, "s")  # run1 goes: only one kept
    assert acc.stored_bytes == model_nbytes(b)


def test_the_patching_sweep_and_the_norms_measurement_reserve_before_running(monkeypatch):
    from gptviz.app import keys, model_service
    from gptviz.methods import attribution, wiring

    spec = model_service.ModelSpec(keys.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    model_service.load_model(spec)  # cached before the budget shrinks
    acc = MemoryAccountant(1, wait_s=0)
    monkeypatch.setattr(memory, "accountant", lambda: acc)
    monkeypatch.setattr(attribution, "residual_patching", lambda *a: pytest.fail("patching ran"))
    monkeypatch.setattr(attribution, "integrated_gradients", lambda *a, **k: pytest.fail("saliency ran"))
    monkeypatch.setattr(wiring, "compare_wirings", lambda *a: pytest.fail("measuring ran"))
    from gptviz.app.services import norms, why

    with pytest.raises(LimitError, match="a patching sweep"):
        why.patching.__wrapped__(spec, (1, 2, 3), (1, 2, 4), 5, 6)
    with pytest.raises(LimitError, match="integrated gradients"):
        why.saliency.__wrapped__(spec, (1, 2, 3), 5, 6)
    with pytest.raises(LimitError, match="measuring"):
        norms.measure_both.__wrapped__(PRESETS["gpt2-small"].to_json(), (1, 2, 3), 0, "gpt2")
    assert acc.in_use == 0


def test_attention_entropy_of_every_layer_is_taken_in_slices_with_the_same_values(monkeypatch):
    from gptviz.methods import entropy

    p = torch.softmax(torch.randn(3, 2, 40, 40), -1)
    whole = (-(p * torch.log(p.clamp_min(1e-30))).sum(-1)).clamp_min(0.0)
    sizes = []
    real = torch.special.entr
    monkeypatch.setattr(entropy, "ENTROPY_CHUNK", 2 * 40 * 40)
    monkeypatch.setattr(torch.special, "entr", lambda x: sizes.append(x.numel()) or real(x))
    assert torch.allclose(entropy.attention_entropy(p), whole, atol=1e-5)
    assert max(sizes) <= 2 * 40 * 40  # never the whole [layers, heads, T, T] at once


class FakeProcess:
    """A process as the accountant sees it: a fixed overhead, what the accountant counts, and the freed memory the
    allocator keeps (resident, uncounted) until it is released."""

    def __init__(self, overhead: int):
        self.overhead, self.kept, self.releases = overhead, 0, 0
        self.accountant: MemoryAccountant | None = None

    def resident(self) -> int:
        counted = self.accountant.in_use if self.accountant is not None else 0
        return self.overhead + counted + self.kept

    def release(self) -> bool:
        self.releases += 1
        self.kept = 0
        return True


def accountant_in(process: FakeProcess, budget: int) -> MemoryAccountant:
    process.accountant = MemoryAccountant(budget, wait_s=0, resident=process.resident, release_freed=process.release)
    return process.accountant


def test_work_that_does_not_fit_beside_the_freed_memory_kept_releases_it_first():
    process = FakeProcess(overhead=500 * MiB)
    acc = accountant_in(process, 100 * MiB)
    process.kept = 60 * MiB
    with acc.reserve(30 * MiB, "small work"):  # 30 + 60 kept <= 100: the heap keeps its memory
        assert process.releases == 0
    with acc.reserve(50 * MiB, "a capture"):  # 50 + 60 > 100: released before it is admitted
        assert process.releases == 1 and process.kept == 0 and acc.releases_of_freed == 1
    assert acc.in_use == 0


def test_freed_memory_goes_back_when_work_ends_with_the_process_past_its_headroom():
    """A capture stored 50 and its work left 45 freed in the heap: 95 of a 100 budget resident beyond the overhead,
    past the 90 the headroom allows, so it goes back as the work ends; with 30 left freed it stays (80)."""
    process = FakeProcess(overhead=500 * MiB)
    acc = accountant_in(process, 100 * MiB)
    with acc.reserve(60 * MiB, "a capture"):
        acc.stored(50 * MiB)
        process.kept = 30 * MiB
    assert process.releases == 0 and process.kept == 30 * MiB
    with acc.reserve(10 * MiB, "another"):
        process.kept = 45 * MiB
    assert process.releases == 1 and process.kept == 0
    assert memory.UNCOUNTED_HEADROOM == 0.1


def test_the_freed_memory_kept_is_not_a_reason_to_refuse():
    """Kept memory can always go back to the kernel, so only what is counted decides a refusal."""
    process = FakeProcess(overhead=500 * MiB)
    acc = accountant_in(process, 100 * MiB)
    process.kept = 200 * MiB
    held = acc.acquire(90 * MiB, "a capture")
    assert process.releases == 1
    with pytest.raises(LimitError):
        acc.acquire(20 * MiB, "another")
    held.release()
    acc.acquire(20 * MiB, "another").release()


def test_the_servers_accountant_reads_the_real_process():
    from gptviz.serve import allocator

    acc = memory.accountant()
    assert acc._resident is allocator.resident_bytes and acc._release_freed is allocator.release_freed_memory


def test_peek_returns_a_stored_value_and_never_builds():
    cache = BoundedCache(100, "thing")
    assert cache.peek("a") is None and "a" not in cache
    value = cache.get_or_build("a", lambda: [1], lambda v: 10)
    assert cache.peek("a") is value
