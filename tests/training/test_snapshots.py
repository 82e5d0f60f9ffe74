"""Training snapshots (gptviz.training.snapshots): the files round-trip, every stored score equals a recomputation from
the weights at that step, recording leaves the run's trajectory unchanged, and snapshots gather where the loss
moves."""

import numpy as np
import pytest
import torch

from gptviz.methods.detectors import (
    duplicate_token_chance,
    induction_chance,
    induction_scores_from,
    previous_token_chance,
)
from gptviz.model.config import get_preset
from gptviz.model.model import GPT
from gptviz.training.corpus import Corpus
from gptviz.training.snapshots import (
    Probe,
    SnapshotRecorder,
    default_probes,
    empty_snapshots,
    first_token_scores,
    load_snapshots,
    pack_triangle,
    probe_patterns,
    save_snapshots,
    unpack_triangle,
)
from gptviz.training.train import TrainSettings, train_models

CFG = get_preset("tiny").replace(vocab_size=300, n_ctx=64, d_model=32, n_layers=2, n_heads=2, dropout=0.0)


def tiny_corpus() -> Corpus:
    g = torch.Generator().manual_seed(0)
    return Corpus(torch.randint(0, 300, (4000,), generator=g), torch.randint(0, 300, (1000,), generator=g), "random")


def probes_for(corpus: Corpus) -> list[Probe]:
    rep = torch.randint(0, 300, (12,), generator=torch.Generator().manual_seed(1)).tolist()
    mid = corpus.val[100:140].tolist()
    return [
        Probe("repeated random tokens", tuple(rep + rep), "repeated", 12),
        Probe("repeated letters", tuple([5, 6, 7, 8] * 4)),
        Probe("held-out passage", tuple(mid)),
    ]


def run(steps=12, every=4, record=True, on_step=None):
    corpus = tiny_corpus()
    settings = TrainSettings(
        steps=steps, batch_size=4, block_size=32, lr=3e-3, warmup=2, seed=3, eval_every=1000, copy_fraction=0.5
    )
    recorder = SnapshotRecorder(empty_snapshots(CFG, probes_for(corpus), every=every), corpus.val, 32)
    models, results = train_models(
        {"m": CFG}, settings, corpus, on_step=on_step, recorders={"m": recorder} if record else None
    )
    return recorder.snaps, results["m"], corpus


def test_each_snapshot_matches_its_weights():
    """Weights copied at every step by a callback; each snapshot's scores, maps and repeat loss recomputed."""
    corpus = tiny_corpus()
    settings = TrainSettings(
        steps=12, batch_size=4, block_size=32, lr=3e-3, warmup=2, seed=3, eval_every=1000, copy_fraction=0.5
    )
    recorder = SnapshotRecorder(empty_snapshots(CFG, probes_for(corpus), every=4), corpus.val, 32)
    states = {}
    holder = {}

    def keep(name, log):
        states[log.step] = {k: v.detach().clone() for k, v in holder["model"].state_dict().items()}

    # train_models builds the model itself; reach it through the recorder's first record call
    original = recorder.record

    def record(model, step, loss):
        holder["model"] = model
        original(model, step, loss)

    recorder.record = record
    holder["model"] = None

    def on_step(name, log):
        if holder["model"] is not None:
            keep(name, log)

    train_models({"m": CFG}, settings, corpus, on_step=on_step, recorders={"m": recorder})
    snaps = recorder.snaps
    assert snaps.steps == [1, 4, 8, 12]
    rep, letters, text = snaps.probes
    for i, step in enumerate(snaps.steps):
        model = GPT(CFG)
        model.load_state_dict(states[step])
        model.eval()
        logits, rep_maps = probe_patterns(model, rep)
        _, text_maps = probe_patterns(model, text)
        expected = {
            "previous-token": text_maps.diagonal(-1, -2, -1).mean(-1),
            "induction": induction_scores_from(rep_maps, 12),
            "first-token": text_maps[..., 1:, 0].mean(-1),
        }
        for name, want in expected.items():
            got = snaps.score_array()[i, snaps.detector_index(name)]
            np.testing.assert_allclose(got, want.numpy(), atol=1e-5, err_msg=f"{name} at step {step}")
        np.testing.assert_allclose(snaps.pattern(i, 0), rep_maps.numpy(), atol=2e-3)  # float16 storage
        target = torch.tensor(rep.ids[13:])
        manual = torch.nn.functional.cross_entropy(logits[12:-1], target)
        assert snaps.repeat_loss[i] == pytest.approx(float(manual), abs=1e-5)


def test_recording_leaves_the_trajectory_unchanged():
    with_snaps, result_a, _ = run()
    _, result_b, _ = run(record=False)
    assert [h["train_loss"] for h in result_a.history] == [h["train_loss"] for h in result_b.history]
    assert len(with_snaps) == 4


def test_files_round_trip(tmp_path):
    snaps, _, _ = run()
    snaps.extra = {"command": "test"}
    save_snapshots(snaps, tmp_path)
    back = load_snapshots(tmp_path)
    assert back.steps == snaps.steps
    np.testing.assert_array_equal(back.score_array(), snaps.score_array())
    for i in range(len(snaps)):
        for p in range(len(snaps.probes)):
            np.testing.assert_array_equal(back.pattern(i, p), snaps.pattern(i, p))
    assert [p.ids for p in back.probes] == [p.ids for p in snaps.probes]
    assert [(d.name, d.chance) for d in back.detectors] == [(d.name, d.chance) for d in snaps.detectors]
    assert back.train_loss == pytest.approx(snaps.train_loss) and back.extra == {"command": "test"}


def test_load_rejects_a_wrong_version_and_wrong_shapes(tmp_path):
    snaps, _, _ = run(steps=4)
    out = save_snapshots(snaps, tmp_path)
    meta = (out / "snapshots.json").read_text()
    (out / "snapshots.json").write_text(meta.replace('"version": 1', '"version": 99'))
    with pytest.raises(ValueError, match="version"):
        load_snapshots(tmp_path)
    (out / "snapshots.json").write_text(meta.replace('"n_heads": 2', '"n_heads": 3'))
    with pytest.raises(ValueError, match="shape"):
        load_snapshots(tmp_path)


def test_chance_levels_are_the_detectors_own():
    snaps, _, _ = run(steps=2)
    rep, _, text = snaps.probes
    chance = {d.name: d.chance for d in snaps.detectors}
    assert chance["previous-token"] == pytest.approx(previous_token_chance(len(text.ids)))
    assert chance["induction"] == pytest.approx(induction_chance(12))
    assert chance["duplicate-token"] == pytest.approx(duplicate_token_chance(rep.ids))
    uniform = torch.ones(1, 1, 40, 40).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert float(first_token_scores(uniform)) == pytest.approx(chance["first-token"])


def test_triangle_packing_round_trips():
    maps = torch.rand(2, 3, 7, 7).tril()
    back = unpack_triangle(pack_triangle(maps), 7)
    np.testing.assert_allclose(back, maps.numpy(), atol=1e-3)
    assert pack_triangle(maps).shape == (2, 3, 28)


def test_snapshots_gather_where_the_loss_moves():
    snaps = empty_snapshots(CFG, probes_for(tiny_corpus()), every=100, min_gap=5, loss_delta=0.5)
    rec = SnapshotRecorder(snaps, smoothing=0.0)
    due = []
    for step in range(1, 61):
        loss = 7.0 if step < 30 else 7.0 - 0.2 * (step - 30)  # flat, then falling 0.2 a step
        if rec.observe(step, loss):
            due.append(step)
            rec.last_step, rec.ema_at_last = step, rec.ema  # what record() does, without a model
    assert due[0] == 1 and all(s >= 30 for s in due[1:])
    assert len(due) >= 5 and all(b - a >= 5 for a, b in zip(due, due[1:], strict=False))


def test_crossing_names_the_first_step_and_head():
    snaps, _, _ = run(steps=2)
    i = snaps.detector_index("induction")
    snaps.scores = [np.zeros_like(snaps.scores[0]) for _ in range(3)]
    snaps.steps = [1, 10, 20]
    snaps.scores[2][i, 1, 0] = 0.7
    assert snaps.crossing("induction", 0.5) == (20, 1, 0)
    assert snaps.crossing("induction", 0.8) is None


def test_probes_are_checked():
    with pytest.raises(ValueError, match="tokens"):
        Probe("long", tuple(range(65)))
    with pytest.raises(ValueError, match="repeated"):
        Probe("not repeated", (1, 2, 3, 4), "repeated", 2)


def test_default_probes_fit_and_repeat():
    corpus = tiny_corpus()
    probes = default_probes(corpus.train, corpus.val, torch.arange(50, 80))
    assert [p.name for p in probes] == ["repeated random tokens", "repeated letters", "held-out passage"]
    rep = probes[0]
    assert rep.ids[:24] == rep.ids[24:] and all(50 <= i < 80 for i in rep.ids)
    assert all(len(p.ids) <= 64 for p in probes) and len(probes[2].ids) == 48


def test_reproduction_finds_where_a_rerun_leaves_the_committed_log():
    from gptviz.training.formation import logged_losses, reproduction

    committed = logged_losses(
        "step    20/1000 loss 7.6127 lr 2e-4\nstep    40/1000 loss 7.5499 val 1\nstep    60/1000 loss 7.5065 lr\n"
    )
    assert committed == {20: 7.6127, 40: 7.5499, 60: 7.5065}
    same = reproduction(dict(committed), committed)
    assert same == {"steps": 3, "exact_until": 60, "max_diff": 0.0}
    drifted = reproduction({20: 7.6127, 40: 7.5501, 60: 7.4065}, committed)
    assert drifted["exact_until"] == 20 and drifted["max_diff"] == pytest.approx(0.1)


def test_the_formation_section_states_what_the_snapshots_hold():
    from gptviz.training.formation import formation_section

    snaps, _, _ = run(steps=2)
    i = snaps.detector_index("induction")
    base = snaps.scores[0]
    snaps.steps = [1, 10, 20, 30]
    snaps.train_loss = [7.0, 6.9, 4.0, 3.0]
    snaps.scores = [base * 0 + v for v in (0.05, 0.08, 0.6, 0.9)]
    snaps.scores[2][i, 1, 0] = 0.65
    text = formation_section(snaps, {"steps": 3, "exact_until": 20, "max_diff": 0.01})
    assert "| last snapshot with the best induction score below 0.1 | 10 | 0.080 |" in text
    assert "| first snapshot above 0.8 | 30 | 0.900 |" in text
    assert "induction: L1H0 at step 20" in text and "through step 20" in text and "0.0100 nats" in text


def test_formed_step_is_where_the_score_reaches_the_threshold_and_stays():
    """A head that crosses, falls back and crosses again formed at the second crossing; one that never stays, never."""
    from gptviz.training.snapshots import formed_step

    cfg = get_preset("tiny").replace(n_layers=2, n_heads=2, d_model=32, n_ctx=32)
    snaps = empty_snapshots(cfg, [Probe("rep", tuple(range(1, 9)) * 2, "repeated", 8), Probe("text", (5, 6, 7))])
    d = snaps.detector_index("induction")
    best = [0.1, 0.6, 0.3, 0.55, 0.7, 0.9]
    for step, value in zip((1, 5, 10, 15, 20, 25), best, strict=True):
        scores = np.zeros((len(snaps.detectors), 2, 2), np.float32)
        scores[d, 1, 1 if step >= 15 else 0] = value
        snaps.steps.append(step)
        snaps.scores.append(scores)
    assert snaps.crossing("induction", 0.5) == (5, 1, 0)  # first reached, then fell back
    assert formed_step(snaps, "induction") == (15, 1, 1)  # reached and stayed
    assert formed_step(snaps, "induction", 0.95) is None
