import numpy as np
import pytest
import torch

from gptviz.model.model import GPT
from gptviz.serve import live_generation
from gptviz.serve.training_jobs import DONE, JobLimitError, JobRegistry, start_warmup
from gptviz.training import warmup
from gptviz.training.train import Trainer, TrainSettings
from tests.support import ROOT

SMALL = warmup.Scenario(layers=2, width=32, heads=2, lr=1e-2, warmup=4, steps=12, batch_size=2, block=8, seeds=2)
TOKENS = torch.randint(0, 500, (4000,), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def logs():
    return warmup.run_scenario(SMALL, TOKENS)


@pytest.mark.slow
def test_runs_in_lockstep_from_the_same_weights(logs):
    assert sorted(logs) == sorted(SMALL.run_names()) and len(logs) == 3 * SMALL.seeds
    assert all(len(r) == SMALL.steps for r in logs.values())
    for seed in range(SMALL.seeds):
        cold = logs[warmup.run_name("post-norm, no warmup", seed)]
        warm = logs[warmup.run_name("post-norm, warmup", seed)]
        assert cold[0]["train_loss"] == warm[0]["train_loss"]  # same weights, same first batch
        assert cold[0]["lr"] == SMALL.lr and warm[0]["lr"] == pytest.approx(SMALL.lr / SMALL.warmup)
        assert cold[1]["train_loss"] != warm[1]["train_loss"]  # the schedule is what differs
        assert len(cold[0]["ffn_grad"]) == SMALL.layers and all(g > 0 for g in cold[0]["ffn_grad"])


def test_outcome_is_computed_from_the_losses(logs):
    baseline = 7.0
    out = warmup.outcome(logs, baseline)
    assert out.step == SMALL.steps
    for arm in warmup.ARMS:
        tails = [
            np.mean([r["train_loss"] for r in logs[warmup.run_name(arm, s)][-warmup.LAST :]])
            for s in range(SMALL.seeds)
        ]
        assert out.arms[arm].mean == pytest.approx(np.mean(tails))
        assert out.arms[arm].sd == pytest.approx(np.std(tails, ddof=1))
        assert f"{out.arms[arm].mean:.3f} ± {out.arms[arm].sd:.3f}" in out.sentence
    cold, warm = out.arms["post-norm, no warmup"], out.arms["post-norm, warmup"]
    assert out.post_needs_warmup == (
        warm.mean < baseline and cold.mean - warm.mean > max(cold.sd + warm.sd, warmup.MIN_EFFECT)
    )
    assert warmup.outcome({k: v[:3] for k, v in logs.items()}, baseline) is None
    assert warmup.ffn_grad_grid(logs, "pre-norm, no warmup").shape == (SMALL.layers, SMALL.steps)


@pytest.mark.slow
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


@pytest.mark.slow
def test_cutting_the_idle_embedding_rows_changes_no_loss():
    """The speed-up (warmup.compact): ids spread over the whole vocabulary, the runs with the full 50,257-row
    embedding and with only the rows the text uses give the same losses and FFN gradients, bit for bit."""
    gen = torch.Generator().manual_seed(1)
    spread = torch.randint(0, 50257, (200,), generator=gen)[torch.randint(0, 200, (3000,), generator=gen)]
    small = warmup.Scenario(layers=2, width=16, heads=2, lr=1e-2, warmup=3, steps=8, batch_size=2, block=8, seeds=1)
    full = warmup.run_scenario(small, spread, cut_vocab=False)
    cut = warmup.run_scenario(small, spread, cut_vocab=True)
    for name in full:
        assert [r["train_loss"] for r in cut[name]] == [r["train_loss"] for r in full[name]]
        assert [r["ffn_grad"] for r in cut[name]] == [r["ffn_grad"] for r in full[name]]
    model = warmup.compact(GPT(small.config("post"), init="xavier", seed=0), torch.tensor([3, 70, 50000]))
    assert model.wte.weight.shape == (3, 16) and model.lm_head.weight is model.wte.weight


def test_the_scenario_sets_adams_beta2():
    s = warmup.Scenario(beta2=0.9)
    trainer = Trainer(GPT(SMALL.config("post")), s.settings(False, 0))
    assert trainer.optimizer.param_groups[0]["betas"] == (0.9, 0.9)
    assert Trainer(GPT(SMALL.config("post")), TrainSettings()).optimizer.param_groups[0]["betas"] == (0.9, 0.95)
    with pytest.raises(ValueError, match="beta2"):
        warmup.Scenario(beta2=1.0)
    with pytest.raises(ValueError, match="beta2"):
        TrainSettings(beta2=-0.1)


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
    by_arm = dict(zip(warmup.ARMS, (cold, warm, pre), strict=True))
    return {
        warmup.run_name(arm, seed): [{"train_loss": loss}] * warmup.LAST
        for arm, losses in by_arm.items()
        for seed, loss in enumerate(losses)
    }


def test_the_verdict_follows_the_numbers():
    shows = warmup.outcome(synthetic_logs(cold=[7.0, 7.2], warm=[6.0, 6.2], pre=[6.0, 6.1]), baseline=6.5)
    assert shows.post_needs_warmup and shows.pre_fine_without
    assert shows.verdict.startswith(
        "Post-norm needed warmup here (without it: 1.000 higher, beyond the sds' sum of 0.283)"
    )
    assert "pre-norm without warmup did as well as post-norm with it (0.050 lower; the sds' sum 0.212)" in shows.verdict
    assert shows.verdict.endswith("claim shows in these runs.")
    assert (
        "post-norm without warmup 7.100 ± 0.141; with warmup 6.100 ± 0.141; pre-norm without warmup 6.050"
        in shows.sentence
    )
    opposite = warmup.outcome(synthetic_logs(cold=[6.0, 6.2], warm=[6.5, 6.7], pre=[7.5, 7.6]), baseline=7.0)
    assert not opposite.post_needs_warmup and not opposite.pre_fine_without
    assert opposite.verdict.startswith("Post-norm did not clearly need warmup here (without it: 0.500 lower")
    assert "pre-norm without warmup did worse than post-norm with it (0.950 higher, beyond" in opposite.verdict
    assert opposite.verdict.endswith("claim does not show in these runs.")
    # within the spread: a higher no-warmup loss is not read as needing warmup
    close = warmup.outcome(synthetic_logs(cold=[6.0, 6.6], warm=[6.0, 6.4], pre=[6.1, 6.3]), baseline=6.5)
    assert not close.post_needs_warmup and "0.100 higher, within the sds' sum of 0.707" in close.verdict
    # both post-norm arms on the frequency-only plateau: a gap beyond their tiny sds is not read as needing warmup
    # (the first protocol's lr 3e-3 runs: 6.402 ± 0.000 without, 6.397 ± 0.001 with, the plateau at 6.315)
    plateau = warmup.outcome(
        synthetic_logs(cold=[6.402, 6.402], warm=[6.3965, 6.3975], pre=[5.93, 5.97]), baseline=6.315
    )
    assert not plateau.post_needs_warmup and plateau.verdict.endswith("claim does not show in these runs.")
    assert plateau.verdict.startswith(
        "Post-norm did not clearly need warmup here: with warmup it did not leave the "
        "frequency-only loss either (6.397 against 6.315; without warmup 6.402)"
    )
    # with warmup on the plateau, without it below: the verdict says so, not "either"
    mixed = warmup.outcome(synthetic_logs(cold=[6.30, 6.30], warm=[6.40, 6.40], pre=[6.0, 6.0]), baseline=6.35)
    assert not mixed.post_needs_warmup
    assert (
        "did not leave the frequency-only loss while without warmup it did (6.400 against 6.350; without warmup 6.300)"
    ) in mixed.verdict
    # below the plateau but a gap under the minimum effect, however small the sds
    small = warmup.outcome(synthetic_logs(cold=[6.03, 6.03], warm=[6.0, 6.0], pre=[6.0, 6.0]), baseline=6.3)
    assert not small.post_needs_warmup and "0.030 higher, within the 0.05-nat minimum effect" in small.verdict


def test_no_verdict_while_running_or_before_the_warmup_ended():
    out = warmup.outcome(synthetic_logs(cold=[7.0, 7.2], warm=[6.0, 6.2], pre=[6.0, 6.1]), 6.5)  # step LAST = 10
    assert warmup.verdict_so_far(out, finished=False, warmup_steps=5) == "The verdict comes when the runs end."
    assert warmup.verdict_so_far(out, finished=True, warmup_steps=10).startswith("Stopped at step 10, within the 10")
    assert warmup.verdict_so_far(out, finished=True, warmup_steps=9) == out.verdict


def test_the_frequency_baseline_is_the_training_splits_unigram_entropy():
    tokens = torch.tensor([1, 1, 2, 3] * 25 + [9] * 12)  # split(…, 0.1) keeps the first 100: 1 half, 2 and 3
    # a quarter each
    assert warmup.frequency_baseline(tokens) == pytest.approx(-(0.5 * np.log(0.5) + 2 * 0.25 * np.log(0.25)))
    out = warmup.outcome(synthetic_logs(cold=[7.0, 7.2], warm=[6.0, 6.2], pre=[5.0, 5.1]), 6.5)
    assert warmup.baseline_line(out, 6.5) == (
        "A model that knows only how often each token comes scores 6.500 nats on "
        "this text; below it: post-norm with warmup and pre-norm without "
        "warmup; at or above it: post-norm without warmup."
    )
    assert "no arm ended below it" in warmup.baseline_line(out, 4.0)


def test_the_page_runs_the_setting_the_readme_protocol_fixed():
    """The protocol (docs/benchmarks-history.md, written before the runs) names the shape, optimiser and length; of its
    learning rates the page runs 3e-3, the first whose verdict said the claim shows (the runs are in the table)."""

    readme = (ROOT / "docs" / "benchmarks-history.md").read_text()
    protocol = readme[readme.index("### Protocol (written before the runs") :]
    protocol = protocol[: protocol.index("\n### ")]
    s = warmup.PAGE_SCENARIO
    assert (s.layers, s.width, s.heads, s.init) == (12, 64, 4, "xavier")
    assert "12 layers, d_model 64, 4 heads, Xavier init" in protocol
    assert s.beta2 == 0.98 and "betas **(0.9, 0.98)**" in protocol
    assert (s.steps, s.batch_size, s.block) == (300, 8, 32) and "**300 steps** of 8 x 32" in protocol
    assert s.warmup == 60 and "**60 warmup steps**" in protocol
    assert s.seeds == 3 and "**3 seeds**" in protocol
    assert s.lr == 3e-3 and "**3e-3**" in protocol
