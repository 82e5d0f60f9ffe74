import numpy as np
import pytest
import torch

from gptviz import live_generation, warmup
from gptviz.training_jobs import DONE, JobLimitError, JobRegistry, start_warmup

SMALL = warmup.Scenario(layers=2, width=32, heads=2, lr=1e-2, warmup=4, steps=12, batch_size=2, block=8, seeds=2)
TOKENS = torch.randint(0, 500, (4000,), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def logs():
    return warmup.run_scenario(SMALL, TOKENS)


def test_runs_in_lockstep_from_the_same_weights(logs):
    assert sorted(logs) == sorted(SMALL.run_names()) and len(logs) == 3 * SMALL.seeds
    assert all(len(r) == SMALL.steps for r in logs.values())
    for seed in range(SMALL.seeds):
        cold = logs[warmup.run_name("post-norm, no warmup", seed)]
        warm = logs[warmup.run_name("post-norm, warmup", seed)]
        assert cold[0]["train_loss"] == warm[0]["train_loss"]          # same weights, same first batch
        assert cold[0]["lr"] == SMALL.lr and warm[0]["lr"] == pytest.approx(SMALL.lr / SMALL.warmup)
        assert cold[1]["train_loss"] != warm[1]["train_loss"]           # the schedule is what differs
        assert len(cold[0]["ffn_grad"]) == SMALL.layers and all(g > 0 for g in cold[0]["ffn_grad"])


def test_outcome_is_computed_from_the_losses(logs):
    out = warmup.outcome(logs)
    assert out.step == SMALL.steps
    for arm in warmup.ARMS:
        tails = [np.mean([r["train_loss"] for r in logs[warmup.run_name(arm, s)][-warmup.LAST:]])
                 for s in range(SMALL.seeds)]
        assert out.arms[arm].mean == pytest.approx(np.mean(tails))
        assert out.arms[arm].sd == pytest.approx(np.std(tails, ddof=1))
        assert f"{out.arms[arm].mean:.3f} ± {out.arms[arm].sd:.3f}" in out.sentence
    cold, warm = out.arms["post-norm, no warmup"], out.arms["post-norm, warmup"]
    assert out.post_needs_warmup == (cold.mean - warm.mean > cold.sd + warm.sd)
    assert warmup.outcome({k: v[:3] for k, v in logs.items()}) is None
    assert warmup.ffn_grad_grid(logs, "pre-norm, no warmup").shape == (SMALL.layers, SMALL.steps)


def test_the_scenario_runs_as_a_bounded_job():
    registry = JobRegistry(max_running=2, per_owner=1, max_tokens=10**6)
    job = start_warmup(registry, SMALL, TOKENS, owner="a")
    with pytest.raises(JobLimitError):
        start_warmup(registry, SMALL, TOKENS, owner="a")
    assert job.wait(120) and job.status == DONE, job.error
    snap = job.snapshot()
    assert snap.steps_done == SMALL.steps and set(snap.logs) == set(SMALL.run_names())
    with pytest.raises(JobLimitError, match="tokens"):
        start_warmup(JobRegistry(max_tokens=100), SMALL, TOKENS)


def test_bad_scenarios():
    with pytest.raises(ValueError, match="warmup"):
        warmup.Scenario(warmup=0)
    with pytest.raises(ValueError, match="layers"):
        warmup.Scenario(layers=0)


def test_the_job_steps_on_one_torch_thread_and_puts_the_default_back(monkeypatch):
    """Two OpenMP threads on a shared 2-core CPU made each step several times slower: the job's thread uses one.
    torch.set_num_threads also sets the default later threads take, so the job restores the server's when it ends."""
    import threading
    seen = []
    monkeypatch.setattr(warmup, "run_scenario", lambda *a, **k: seen.append(torch.get_num_threads()))
    monkeypatch.setattr(live_generation, "SERVER_TORCH_THREADS", 2)  # the tests' own default is one thread
    torch.set_num_threads(2)
    try:
        job = start_warmup(JobRegistry(max_tokens=10**6), SMALL, TOKENS, owner="a")
        assert job.wait(30) and job.status == DONE, job.error
        job._thread.join(5)
        later = []
        thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert seen == [1] and later == [2]
    finally:
        torch.set_num_threads(1)


def synthetic_logs(cold: list[float], warm: list[float], pre: list[float]) -> dict[str, list[dict]]:
    """LAST steps per run, each seed's loss constant at the value given (one value per seed)."""
    by_arm = dict(zip(warmup.ARMS, (cold, warm, pre)))
    return {warmup.run_name(arm, seed): [{"train_loss": loss}] * warmup.LAST
            for arm, losses in by_arm.items() for seed, loss in enumerate(losses)}


def test_the_verdict_follows_the_numbers():
    shows = warmup.outcome(synthetic_logs(cold=[7.0, 7.2], warm=[6.0, 6.2], pre=[6.0, 6.1]))
    assert shows.post_needs_warmup and shows.pre_fine_without
    assert shows.verdict.startswith("Post-norm needed warmup here (without it: 1.000 higher, beyond the sds' sum "
                                    "of 0.283)")
    assert "pre-norm without warmup did as well as post-norm with it (0.050 lower; the sds' sum 0.212)" in shows.verdict
    assert shows.verdict.endswith("claim shows in these runs.")
    assert "post-norm without warmup 7.100 ± 0.141; with warmup 6.100 ± 0.141; pre-norm without warmup 6.050" \
        in shows.sentence
    opposite = warmup.outcome(synthetic_logs(cold=[6.0, 6.2], warm=[6.5, 6.7], pre=[7.5, 7.6]))
    assert not opposite.post_needs_warmup and not opposite.pre_fine_without
    assert opposite.verdict.startswith("Post-norm did not clearly need warmup here (without it: 0.500 lower")
    assert "pre-norm without warmup did worse than post-norm with it (0.950 higher, beyond" in opposite.verdict
    assert opposite.verdict.endswith("claim does not show in these runs.")
    # within the spread: a higher no-warmup loss is not read as needing warmup
    close = warmup.outcome(synthetic_logs(cold=[6.0, 6.6], warm=[6.0, 6.4], pre=[6.1, 6.3]))
    assert not close.post_needs_warmup and "0.100 higher, within the sds' sum of 0.707" in close.verdict


def test_no_verdict_while_running_or_before_the_warmup_ended():
    out = warmup.outcome(synthetic_logs(cold=[7.0, 7.2], warm=[6.0, 6.2], pre=[6.0, 6.1]))  # step LAST = 10
    assert warmup.verdict_so_far(out, finished=False, warmup_steps=5) == "The verdict comes when the runs end."
    assert warmup.verdict_so_far(out, finished=True, warmup_steps=10).startswith("Stopped at step 10, within the 10")
    assert warmup.verdict_so_far(out, finished=True, warmup_steps=9) == out.verdict
