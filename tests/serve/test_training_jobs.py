"""gptviz.serve.training_jobs: training in a background thread, with progress, stop and results."""

from __future__ import annotations

import io
import time
import zipfile

import pytest
import torch

from gptviz import GPT, GPTConfig
from gptviz.model.weights import load_checkpoint
from gptviz.serve.training_jobs import DONE, FAILED, STOPPED, JobLimitError, JobRegistry, JobSpec
from gptviz.training.train import TrainSettings

CFG = GPTConfig(vocab_size=64, n_ctx=16, d_model=32, n_layers=1, n_heads=2, name="jobs-test")
# A corpus with structure to learn: a fixed 50-token phrase repeated.
PHRASE = torch.randint(0, 64, (50,), generator=torch.Generator().manual_seed(0))
TOKENS = PHRASE.repeat(200)


def spec(steps: int, norms=("pre", "post"), **settings) -> JobSpec:
    s = dict(steps=steps, batch_size=4, block_size=16, lr=1e-2, warmup=0, eval_every=5, eval_batches=2, seed=0)
    s.update(settings)
    return JobSpec({n: CFG.replace(norm=n) for n in norms}, TrainSettings(**s))


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the training job")
        time.sleep(0.02)


def test_a_few_steps_lower_the_loss_on_the_same_batches():
    registry = JobRegistry()
    job = registry.start(spec(25), tokens=TOKENS)
    assert job.wait(120) and job.status == DONE, job.error
    snap = job.snapshot()
    assert snap.steps_done == snap.total_steps == 25 and snap.fraction == 1.0
    for name in ("pre", "post"):
        history = snap.logs[name]
        assert [h["step"] for h in history] == list(range(1, 26))
        first, last = history[0]["train_loss"], history[-1]["train_loss"]
        assert first > 3.5  # about ln 64 = 4.16 at init
        assert last < 0.7 * first, (name, first, last)
        vals = [h["val_loss"] for h in history if h["val_loss"] is not None]
        assert vals[-1] < vals[0]
        assert job.results[name].final["step"] == 25
    # Twins start from the same weights, so their first losses differ only through the wiring.
    assert snap.logs["pre"][0]["train_loss"] == pytest.approx(snap.logs["post"][0]["train_loss"], abs=0.1)


def test_the_job_trains_in_the_background_and_can_be_stopped():
    registry = JobRegistry()
    job = registry.start(spec(100_000, norms=("pre",)), tokens=TOKENS)
    # start() has returned while the job is still training: its progress is visible from here.
    wait_for(lambda: job.snapshot().steps_done >= 3)
    assert not job.finished
    assert registry.running() == [job]
    assert registry.stop(job.id)
    assert job.wait(60)
    snap = job.snapshot()
    assert job.status == STOPPED and snap.finished and snap.stop_requested
    assert 3 <= snap.steps_done < 100_000
    assert job.results["pre"].stopped_early
    assert len(job.results["pre"].history) == snap.steps_done
    assert not job.models["pre"].training  # handed back in eval mode
    assert registry.running() == []


def test_the_registry_limits_concurrent_runs():
    registry = JobRegistry(max_running=1)
    first = registry.start(spec(100_000, norms=("pre",)), tokens=TOKENS)
    try:
        with pytest.raises(JobLimitError, match="limit is 1"):
            registry.start(spec(5), tokens=TOKENS)
    finally:
        first.request_stop()
        first.wait(60)
    second = registry.start(spec(2, norms=("post",)), tokens=TOKENS)
    assert second.wait(60) and second.status == DONE
    assert {j.id for j in registry.jobs()} == {first.id, second.id} and first.id != second.id


def test_failures_are_recorded_not_raised():
    registry = JobRegistry()
    job = registry.start(spec(3), tokens=TOKENS[:10])  # too short for one window of 17 tokens
    assert job.wait(60)
    assert job.status == FAILED and "too few" in job.error
    with pytest.raises(KeyError):
        job.checkpoint_zip("pre")


def test_spec_validation():
    with pytest.raises(ValueError, match="block size 32"):
        spec(3, block_size=32)
    with pytest.raises(ValueError, match="init"):
        JobSpec({"pre": CFG}, TrainSettings(steps=1), init="kaiming")
    with pytest.raises(ValueError, match="at least one"):
        JobSpec({}, TrainSettings(steps=1))


def test_checkpoint_zip_round_trip(tmp_path):
    registry = JobRegistry()
    job = registry.start(spec(4, norms=("post",)), tokens=TOKENS)
    assert job.wait(60) and job.status == DONE
    data = job.checkpoint_zip("post")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = sorted(zf.namelist())
        zf.extractall(tmp_path)
    folder = f"{job.id}-post"
    assert names == sorted(f"{folder}/{f}" for f in ("config.json", "history.csv", "history.json", "model.safetensors"))
    loaded = load_checkpoint(tmp_path / folder)
    assert loaded.config.norm == "post"
    ids = PHRASE[:16][None]
    with torch.no_grad():
        assert torch.allclose(loaded(ids), job.models["post"](ids), atol=1e-6)
    assert job.checkpoint_zip("post") is data  # built once


# ---- what one visitor may start (issue: safe to put on a server) ------------------------------------------


def test_a_run_past_the_token_budget_is_refused_before_it_starts():
    registry = JobRegistry(max_tokens=1000)
    with pytest.raises(JobLimitError, match="this run would train on 1,280 tokens; this server allows 1,000 per run"):
        registry.start(spec(10), tokens=TOKENS)  # 10 steps x 4 x 16 tokens x 2 models
    assert registry.jobs() == []
    job = registry.start(spec(7, norms=("pre",)), tokens=TOKENS)  # 448 tokens
    assert job.wait(60) and job.status == DONE


def test_one_visitor_runs_one_job_at_a_time_and_others_still_can():
    registry = JobRegistry(max_running=3, per_owner=1)
    first = registry.start(spec(100_000), tokens=TOKENS, owner="alice")
    with pytest.raises(JobLimitError, match="you already have 1 run going"):
        registry.start(spec(5), tokens=TOKENS, owner="alice")
    second = registry.start(spec(5), tokens=TOKENS, owner="bob")
    assert [j.id for j in registry.owned_by("alice")] == [first.id]
    assert second.wait(60) and second.status == DONE
    first.request_stop()
    assert first.wait(60) and first.stop_reason == "stopped"


def test_one_address_cannot_hold_every_training_slot_from_several_tabs():
    """Two sessions of one visitor held both training slots for up to 1,800 s each; now a client address runs at
    most per_address jobs at once, whatever its sessions."""
    registry = JobRegistry(max_running=3, per_owner=1, per_address=1)
    first = registry.start(spec(100_000), tokens=TOKENS, owner="tab 1", address="10.0.0.7")
    with pytest.raises(JobLimitError, match="your address already has 1 run going"):
        registry.start(spec(5), tokens=TOKENS, owner="tab 2", address="10.0.0.7")
    other = registry.start(spec(5), tokens=TOKENS, owner="someone else", address="10.0.0.8")
    assert other.wait(60) and other.status == DONE
    first.request_stop()
    assert first.wait(60)
    again = registry.start(spec(5), tokens=TOKENS, owner="tab 2", address="10.0.0.7")  # its run ended: free again
    assert again.wait(60) and again.status == DONE


@pytest.mark.slow
def test_a_run_stops_at_the_wall_time_budget():
    registry = JobRegistry(max_seconds=0.5)
    job = registry.start(spec(1_000_000), tokens=TOKENS)
    assert job.wait(60) and job.status == STOPPED and job.stop_reason == "time"
    assert 0 < job.snapshot().steps_done < 1_000_000 and job.models  # the models trained so far are kept


def test_a_run_stops_when_the_session_that_started_it_is_gone(monkeypatch):
    import gptviz.serve.background_job as one_run

    monkeypatch.setattr(one_run, "ALIVE_CHECK_S", 0.0)
    connected = {"alice": True}
    registry = JobRegistry()
    job = registry.start(spec(1_000_000), tokens=TOKENS, owner="alice", alive=lambda: connected["alice"])
    wait_for(lambda: job.snapshot().steps_done >= 3)
    assert not job.finished
    connected["alice"] = False  # the browser tab closed
    assert job.wait(60) and job.status == STOPPED and job.stop_reason == "left"


def test_trained_models_are_kept_per_session_and_bounded():
    from gptviz.app.jobs import TrainedModels
    from gptviz.model.model import GPT

    store = TrainedModels(kept=2)
    models = [GPT(CFG) for _ in range(3)]
    store.add("run1 pre", models[0], "alice")
    store.add("run2 pre", models[1], "bob")
    assert store.of("alice") == ["run1 pre"] and store.of("bob") == ["run2 pre"] and store.of("eve") == []
    store.add("run3 pre", models[2], "alice")  # the oldest goes
    assert store.get("run1 pre") is None and store.get("run3 pre") is models[2] and store.of("alice") == ["run3 pre"]


def test_a_finished_jobs_models_are_offered_to_its_owner_before_anyone_sees_it_finished(monkeypatch):
    """The owner's sidebar lists the models from the moment the job ends, whichever page the owner is on: the Train
    page's own run, which a click elsewhere can cut short, used to be what registered them."""
    from gptviz.app import jobs
    from gptviz.app.jobs import TrainedModels

    store = TrainedModels(kept=4)
    monkeypatch.setattr(jobs, "trained_models", lambda: store)
    seen_when_registered = []

    def on_models(job):
        seen_when_registered.append(job.finished)
        jobs.register_job_models(job)

    job = JobRegistry().start(spec(3), tokens=TOKENS, owner="alice", on_models=on_models)
    assert job.wait(60) and job.status == DONE
    assert seen_when_registered == [False]  # registered before the job reads as finished
    expected = sorted(jobs.trained_run_id(job, name, model) for name, model in job.models.items())
    assert sorted(store.of("alice")) == expected and len(expected) == 2
    assert all(store.get(run) is job.models[run.split()[1].split("-")[0]] for run in expected)
    assert store.of("bob") == []


def nice_of_this_thread() -> int:
    import os
    import threading

    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not hasattr(__import__("os"), "getpriority"), reason="per-thread nice values are Linux's")
def test_a_run_alone_keeps_its_priority_and_yields_once_other_work_runs_beside_it():
    """Issue 60: niced from its start, the Heads forming run barely moved on a machine other programs kept busy; alone
    it now keeps the priority of the page that started it, and once a live generation (busy_elsewhere) or another run
    goes on beside it, it lowers its thread to BACKGROUND_NICE and trains on one torch thread for the rest."""
    from gptviz.serve.live_generation import BACKGROUND_NICE

    base = nice_of_this_thread()
    threads = torch.get_num_threads()
    seen: list[tuple[int, int]] = []  # (nice, torch threads) of the run's thread at each check and at its end

    def elsewhere(after: int | None):
        def busy() -> bool:
            seen.append((nice_of_this_thread(), torch.get_num_threads()))
            return after is not None and len(seen) > after

        return busy

    def at_the_end(_job) -> None:
        seen.append((nice_of_this_thread(), torch.get_num_threads()))

    alone = JobRegistry(busy_elsewhere=elsewhere(None)).start(spec(8, norms=("pre",)), TOKENS, on_models=at_the_end)
    assert alone.wait(120) and alone.status == DONE, alone.error
    assert len(seen) >= 9 and set(seen) == {(base, threads)}, seen  # checked before and after every step, never niced

    seen.clear()
    crowded = JobRegistry(busy_elsewhere=elsewhere(3)).start(spec(8, norms=("pre",)), TOKENS, on_models=at_the_end)
    assert crowded.wait(120) and crowded.status == DONE, crowded.error
    assert seen[:4] == [(base, threads)] * 4 and len(seen) == 5, seen  # no more checks once niced
    assert seen[-1] == (max(base, BACKGROUND_NICE), 1), seen  # the rest of the run: niced, on one thread
    assert torch.get_num_threads() == threads  # this thread's count untouched


def test_two_runs_of_one_registry_count_as_crowded():
    registry = JobRegistry()
    first = registry.start(spec(100_000, norms=("pre",)), tokens=TOKENS, owner="a")
    assert not registry._crowded()
    second = registry.start(spec(100_000, norms=("pre",)), tokens=TOKENS, owner="b")
    assert registry._crowded()
    for job in (first, second):
        job.request_stop()
        assert job.wait(60)
    assert not registry._crowded()


def test_the_grow_pages_run_steps_its_copy_ids_embedding_rows_alone():
    """The Heads forming run (copy windows only, every step over the copy ids, no weight decay) is one the trainer
    steps through its copy ids' rows, not the whole vocabulary's (Trainer.trained_rows; the same model, see
    tests/training/test_train.py)."""
    from gptviz.model.model import GPT
    from gptviz.serve.training_jobs import GROWTH, induction_growth_spec
    from gptviz.training.train import Trainer, most_frequent_ids

    spec = induction_growth_spec(("pre",))
    config = spec.configs["pre"]
    tokens = torch.randint(0, config.vocab_size, (20_000,), generator=torch.Generator().manual_seed(0))
    trainer = Trainer(GPT(config, seed=0), spec.settings, tokens)
    assert torch.equal(trainer.trained_rows(), most_frequent_ids(tokens, GROWTH["copy_vocab"]))
    assert trainer.rows.shape == (GROWTH["copy_vocab"], GROWTH["d_model"])


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])  # the copy ids' rows alone, and the whole embedding
def test_a_runs_reservation_counts_the_weights_gradients_and_moments_its_trainer_holds(weight_decay):
    from gptviz.serve.job_sizes import _held_nbytes
    from gptviz.training.train import Trainer, batches

    settings = TrainSettings(
        steps=3,
        batch_size=4,
        block_size=16,
        warmup=0,
        weight_decay=weight_decay,
        copy_fraction=1.0,
        copy_vocab=20,
        corpus_vocab_steps=3,
    )
    model = GPT(CFG, seed=0)
    trainer = Trainer(model, settings, TOKENS)
    assert (trainer.rows is not None) == (weight_decay == 0)
    trainer.step(*next(batches(TOKENS, 4, 16, torch.Generator().manual_seed(0), 1.0, 20)))
    weights = sum(p.nbytes for p in model.parameters()) + (trainer.rows.nbytes if trainer.rows is not None else 0)
    grads = sum(p.grad.nbytes for p in trainer.params)
    moments = sum(t.nbytes for state in trainer.optimizer.state.values() for t in state.values() if t.dim())
    assert weights + grads + moments == _held_nbytes(CFG, settings)
