"""Training loop: loss goes down, the schedule, settings validation, twins start equal, data helpers."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from gptviz.methods import induction_test
from gptviz.model.config import get_preset
from gptviz.model.weights import bundled_models
from gptviz.training.evaluate import previous_token_on_text
from gptviz.training.train import (
    Trainer,
    TrainSettings,
    batches,
    format_eta,
    lm_loss,
    load_corpus,
    lr_at,
    most_frequent_ids,
    repeated_sequence,
    split,
    train_models,
    write_history,
)
from tests.support.models import SMALL, build, random_ids


def test_a_few_steps_lower_the_loss_on_a_fixed_batch():
    model = build(seed=31)
    x = random_ids(SMALL.n_ctx, batch=4, seed=1)
    y = random_ids(SMALL.n_ctx, batch=4, seed=2)
    settings = TrainSettings(steps=25, warmup=0, lr=1e-2, batch_size=4, grad_clip=1.0)
    trainer = Trainer(model, settings)
    with torch.no_grad():
        before = float(lm_loss(model.eval(), x, y))
    assert before == pytest.approx(math.log(SMALL.vocab_size), abs=0.3)  # random init: about uniform
    logs = [trainer.step(x, y) for _ in range(settings.steps)]
    with torch.no_grad():
        after = float(lm_loss(model.eval(), x, y))
    assert after < before - 1.0
    assert [log.step for log in logs] == list(range(1, 26))
    assert [log.lr for log in logs] == [lr_at(s, settings) for s in range(25)]
    assert logs[0].train_loss == pytest.approx(before, abs=1e-4)  # dropout 0: train mode == eval mode
    assert all(log.grad_norm > 0 and math.isfinite(log.grad_norm) for log in logs)
    assert all(log.val_loss is None for log in logs)


def test_weight_decay_groups():
    model = build()
    trainer = Trainer(model, TrainSettings(weight_decay=0.3))
    decay, no_decay = trainer.optimizer.param_groups
    assert decay["weight_decay"] == 0.3 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in decay["params"]} == {
        n for n, p in model.named_parameters() if p.dim() == 2 and n != "wpe.weight"
    }
    assert "wpe.weight" in {names[id(p)] for p in no_decay["params"]}


def test_lr_schedule_values():
    s = TrainSettings(steps=11, warmup=0, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, s) == pytest.approx(1.0)
    assert lr_at(5, s) == pytest.approx(0.55)  # halfway: min + (1 - min) / 2
    assert lr_at(10, s) == pytest.approx(0.1)  # the last step reaches the floor
    w = TrainSettings(steps=14, warmup=4, lr=2.0, min_lr_ratio=0.0)
    assert [lr_at(i, w) for i in range(4)] == pytest.approx([0.5, 1.0, 1.5, 2.0])  # linear warmup
    assert lr_at(4, w) == pytest.approx(2.0)
    assert lr_at(13, w) == pytest.approx(0.0, abs=1e-12)
    after = [lr_at(i, w) for i in range(4, 14)]
    assert all(a > b for a, b in zip(after, after[1:], strict=False))  # decays monotonically
    assert lr_at(7, w) == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi * 3 / 9)))
    assert lr_at(0, TrainSettings(steps=1, warmup=0, lr=0.5)) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "changes, name",
    [
        (dict(steps=0), "steps"),
        (dict(batch_size=0), "batch_size"),
        (dict(lr=0), "lr"),
        (dict(lr=-1e-3), "lr"),
        (dict(warmup=-1), "warmup"),
        (dict(eval_every=0), "eval_every"),
        (dict(val_fraction=0), "val_fraction"),
        (dict(val_fraction=1), "val_fraction"),
        (dict(grad_clip=-1), "grad_clip"),
        (dict(min_lr_ratio=1.5), "min_lr_ratio"),
        (dict(eval_batches=0), "eval_batches"),
        (dict(weight_decay=-0.1), "weight_decay"),
        (dict(block_size=0), "block_size"),
        (dict(steps=2.5), "steps"),
        (dict(batch_size=True), "batch_size"),
        (dict(lr=float("nan")), "lr"),
        (dict(lr="1e-3"), "lr"),
        (dict(block_size=8.0), "block_size"),
    ],
)
def test_invalid_settings_raise_value_error_naming_them(changes, name):
    with pytest.raises(ValueError, match=rf"invalid training setting\(s\): .*\b{name}="):
        TrainSettings(**changes)


def test_valid_settings():
    s = TrainSettings(steps=1, warmup=0, grad_clip=0, block_size=8, min_lr_ratio=1)
    assert dataclasses.replace(s, steps=5).steps == 5


def test_split_and_batches():
    tokens = torch.arange(1000)
    train, val = split(tokens, 0.1)
    assert len(train) == 900 and len(val) == 100 and train[-1] + 1 == val[0]
    data = batches(train, batch_size=3, block=8, generator=torch.Generator().manual_seed(0))
    x, y = next(data)
    assert x.shape == y.shape == (3, 8)
    assert torch.equal(y, x + 1)  # next-token targets
    assert int(x.max()) < 900
    x2, _ = next(batches(train, 3, 8, torch.Generator().manual_seed(0)))
    assert torch.equal(x, x2)  # seeded
    with pytest.raises(ValueError, match="too few"):
        next(batches(torch.arange(9), 2, 8, torch.Generator()))


def test_load_corpus(tmp_path):
    (tmp_path / "c.txt").write_text("Hello, I am", encoding="utf-8")
    assert load_corpus(tmp_path / "c.txt").tolist() == [15496, 11, 314, 716]
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        load_corpus(tmp_path / "empty.txt")


def test_norm_twins_start_from_identical_weights():
    configs = {"pre": SMALL, "post": SMALL.replace(norm="post")}
    tokens = random_ids(2000, seed=3)
    models, results = train_models(configs, TrainSettings(steps=5, batch_size=2), tokens, should_stop=lambda: True)
    pre, post = models["pre"].state_dict(), models["post"].state_dict()
    assert list(pre) == list(post)
    for key in pre:
        assert torch.equal(pre[key], post[key]), key
    assert models["post"].config.norm == "post"
    assert all(r.stopped_early and r.history == [] for r in results.values())


def test_a_shorter_block_trains_on_shorter_windows_and_a_longer_one_is_refused(monkeypatch):
    import gptviz.training.train as train_module

    tokens = random_ids(2000, seed=3)
    widths = []

    def recording_batches(*args, **kwargs):
        for x, y in batches(*args, **kwargs):
            widths.append(x.shape[1])
            yield x, y

    monkeypatch.setattr(train_module, "batches", recording_batches)
    settings = TrainSettings(steps=2, batch_size=2, block_size=8, eval_every=10)
    train_models({"m": SMALL}, settings, tokens)
    assert widths == [8, 8] and SMALL.n_ctx > 8
    with pytest.raises(ValueError, match=f"block_size {SMALL.n_ctx + 1} exceeds the context length {SMALL.n_ctx}"):
        train_models({"m": SMALL}, TrainSettings(steps=1, batch_size=2, block_size=SMALL.n_ctx + 1), tokens)


def test_train_models_runs_twins_on_the_same_batches(tmp_path):
    configs = {"pre": SMALL, "post": SMALL.replace(norm="post")}
    tokens = random_ids(3000, seed=4)
    seen = []
    settings = TrainSettings(steps=3, batch_size=2, warmup=1, eval_every=2, eval_batches=2, lr=1e-3)
    models, results = train_models(configs, settings, tokens, on_step=lambda name, log: seen.append((name, log.step)))
    assert seen == [("pre", 1), ("post", 1), ("pre", 2), ("post", 2), ("pre", 3), ("post", 3)]
    for name, result in results.items():
        assert [h["step"] for h in result.history] == [1, 2, 3]
        vals = [h["val_loss"] for h in result.history]
        assert vals[0] is not None and vals[1] is not None and vals[2] is not None  # first, every 2nd, last
        assert result.final["step"] == 3 and result.final["val_loss"] == vals[2]
        assert not models[name].training and not result.stopped_early
        assert result.config == configs[name].to_dict()
    assert results["pre"].history[0]["train_loss"] != results["post"].history[0]["train_loss"]
    write_history(results["pre"], tmp_path / "out")
    lines = (tmp_path / "out" / "history.csv").read_text().splitlines()
    assert lines[0].startswith("step,lr,train_loss") and len(lines) == 4
    saved = json.loads((tmp_path / "out" / "history.json").read_text())
    assert saved["final"]["step"] == 3 and len(saved["history"]) == 3


def test_format_eta():
    assert format_eta(0, 10, 5.0) == "?"
    assert format_eta(5, 10, 50.0) == "0m50s"
    assert format_eta(1, 100, 10.0) == "16m30s"


def test_train_models_continues_from_given_weights():
    start = build(seed=9).state_dict()
    tokens = random_ids(2000, seed=5)
    models, _ = train_models(
        {"m": SMALL}, TrainSettings(steps=1, batch_size=2), tokens, should_stop=lambda: True, start_states={"m": start}
    )
    assert all(torch.equal(models["m"].state_dict()[k], start[k]) for k in start)
    fresh, _ = train_models({"m": SMALL}, TrainSettings(steps=1, batch_size=2), tokens, should_stop=lambda: True)
    assert not torch.equal(fresh["m"].state_dict()["wte.weight"], start["wte.weight"])


def test_corpus_vocabulary_loss_equals_full_softmax_restricted_to_those_ids():
    from gptviz.training.train import subset_lm_loss

    model = build(seed=10).eval()
    x, y = random_ids(12, seed=6)[None], random_ids(12, seed=7)[None]
    vocab = torch.unique(torch.cat([y.flatten(), torch.arange(0, 50)]))
    index_of = torch.full((model.config.vocab_size,), -1, dtype=torch.long)
    index_of[vocab] = torch.arange(len(vocab))
    with torch.no_grad():
        logits = model(x)[..., vocab]
        expected = torch.nn.functional.cross_entropy(logits.reshape(-1, len(vocab)), index_of[y].reshape(-1))
        assert subset_lm_loss(model, x, y, vocab, index_of) == pytest.approx(float(expected), abs=1e-5)
        assert float(expected) < float(lm_loss(model, x, y))  # fewer ids compete for the mass


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_training_grows_a_previous_token_head_when_the_task_needs_one(norm):
    """The pipeline (init, Trainer, attention capture, the score) can make and find a sharp previous-token head:
    on random tokens whose target is the token before, one head must learn to look one back. The bundled
    Shakespeare models' heads stay near 0.25 (issue 6); this shows that is the data, not the machinery."""
    cfg = SMALL.replace(vocab_size=64, n_heads=2, norm=norm)
    model = build(cfg)
    val = torch.randint(0, 64, (400,), generator=torch.Generator().manual_seed(99))
    uniform = sum(1 / (i + 1) for i in range(1, cfg.n_ctx)) / (cfg.n_ctx - 1)  # every query spread evenly
    assert previous_token_on_text(model, val).max().item() == pytest.approx(uniform, abs=0.02)
    trainer = Trainer(model, TrainSettings(steps=150, batch_size=16, lr=1e-2, warmup=10, seed=0))
    gen = torch.Generator().manual_seed(0)
    for _ in range(150):
        x = torch.randint(0, 64, (16, cfg.n_ctx), generator=gen)
        trainer.step(x, torch.cat([x[:, :1], x[:, :-1]], 1))
    assert previous_token_on_text(model, val).max().item() > 0.9


def test_repeated_sequence_windows_repeat_a_sequence_of_the_texts_own_ids():
    text = torch.tensor([5, 9, 11, 40, 9, 5, 77] * 10)
    gen = torch.Generator().manual_seed(3)
    for _ in range(20):
        row = repeated_sequence(torch.unique(text), 16, gen)
        assert len(row) == 17 and set(row.tolist()) <= {5, 9, 11, 40, 77}
        # the period n is in [8, 8] for block 16: every token after the first copy equals the one n back
        assert torch.equal(row[8:], row[:9])
    x, y = next(batches(text, 8, 16, torch.Generator().manual_seed(0), copy_fraction=0.375))
    assert x.shape == y.shape == (8, 16) and torch.equal(x[:, 1:], y[:, :-1])
    # rows 5..7 (3 of 8) are repeats; rows 0..4 are windows of the text (its period is 7, not 8)
    assert all(torch.equal(x[r, 8:], x[r, :8]) for r in range(5, 8))
    assert not any(torch.equal(x[r, 8:], x[r, :8]) for r in range(5))
    with pytest.raises(ValueError, match="copy_fraction"):
        TrainSettings(copy_fraction=1.5)


def test_copy_windows_draw_from_the_most_frequent_ids_when_asked():
    # counts: 9 x5, 5 x4, 11 x3, 40 x2, 77 x1; ties would go to the smaller id
    text = torch.tensor([9, 5, 9, 11, 9, 5, 40, 9, 11, 5, 9, 77, 40, 11, 5])
    assert most_frequent_ids(text, 2).tolist() == [5, 9]
    assert most_frequent_ids(text, 3).tolist() == [5, 9, 11]
    assert most_frequent_ids(text).tolist() == most_frequent_ids(text, 99).tolist() == [5, 9, 11, 40, 77]
    assert most_frequent_ids(torch.tensor([3, 2, 2, 3, 1]), 1).tolist() == [2]  # tie 2/3: the smaller id
    x, _ = next(batches(text, 8, 12, torch.Generator().manual_seed(0), copy_fraction=0.5, copy_vocab=2))
    assert set(x[4:].unique().tolist()) <= {5, 9}  # the repeats use the 2 most frequent ids only
    assert {11, 40, 77} & set(x[:4].unique().tolist())  # the text rows still hold the rest
    with pytest.raises(ValueError, match="copy_vocab"):
        TrainSettings(copy_vocab=-1)


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_training_learns_to_copy_a_repeated_sequence_of_one_period(norm):
    """The repeated windows, the trainer and the copy measurements work end to end: at n_ctx 16 every window
    is an 8-token random sequence and its repeat, and the model learns to attend to the token after the
    earlier copy and predict it. With one period a fixed-offset head (7 back) is enough, so this is not yet an
    induction head; periods that vary need a real one, which a toy grows in a few hundred larger steps
    (gptviz/bundled/README.md), too slow for a unit test."""
    cfg = SMALL.replace(vocab_size=64, n_heads=2, norm=norm)
    model = build(cfg)
    ids = torch.arange(64)
    half = cfg.n_ctx // 2
    before = induction_test(model, half, ids=ids)
    assert before.scores.max().item() == pytest.approx(before.chance, abs=0.01)  # random init: at chance
    assert before.repeat_loss == pytest.approx(math.log(64), abs=0.3)
    trainer = Trainer(model, TrainSettings(steps=300, batch_size=16, lr=3e-3, warmup=10, seed=0))
    data = batches(ids, 16, cfg.n_ctx, torch.Generator().manual_seed(0), copy_fraction=1.0)
    for _ in range(300):
        trainer.step(*next(data))
    after = induction_test(model, half, ids=ids)
    assert after.scores.max().item() > 0.6 > 5 * after.chance
    assert after.repeat_loss < 2.5


def test_copy_rows_normalise_over_the_copy_ids_and_text_rows_over_the_corpus_ids():
    from gptviz.training.train import subset_lm_loss, vocab_index

    model = build(seed=11).eval()
    corpus_ids = torch.arange(0, model.config.vocab_size)
    copy_ids = torch.arange(0, model.config.vocab_size, 7)
    text = random_ids(3 * 12, seed=8).view(3, 12)
    copy = copy_ids[torch.randint(0, len(copy_ids), (2, 12), generator=torch.Generator().manual_seed(2))]
    x, y = torch.cat([text, copy])[:, :-1], torch.cat([text, copy])[:, 1:]
    with torch.no_grad():
        logits = model(x)

        def ce(rows, ids):  # the full softmax restricted by hand
            index = {int(i): k for k, i in enumerate(ids)}
            targets = torch.tensor([[index[int(t)] for t in row] for row in y[rows]])
            return torch.nn.functional.cross_entropy(
                logits[rows][..., ids].reshape(-1, len(ids)), targets.reshape(-1), reduction="sum"
            )

        expected = (ce(slice(0, 3), corpus_ids) + ce(slice(3, 5), copy_ids)) / y.numel()
        got = subset_lm_loss(
            model,
            x,
            y,
            *vocab_index(corpus_ids, model.config.vocab_size),
            n_copy=2,
            copy_vocab=vocab_index(copy_ids, model.config.vocab_size),
        )
        assert float(got) == pytest.approx(float(expected), abs=1e-5)
        only_copy = subset_lm_loss(
            model,
            x[3:],
            y[3:],
            *vocab_index(corpus_ids, model.config.vocab_size),
            n_copy=2,
            copy_vocab=vocab_index(copy_ids, model.config.vocab_size),
        )
        assert float(only_copy) == pytest.approx(float(ce(slice(3, 5), copy_ids)) / y[3:].numel(), abs=1e-5)


def test_a_trainer_on_copy_windows_uses_the_copy_ids_softmax_only_while_the_corpus_one_is_on():
    tokens = random_ids(3000, seed=3)
    s = TrainSettings(steps=4, batch_size=4, copy_fraction=0.5, copy_vocab=40, corpus_vocab_steps=2, warmup=0)
    trainer = Trainer(build(seed=12), s, tokens)
    assert trainer.n_copy == 2 and len(trainer.copy_vocab[0]) == 40
    assert torch.equal(trainer.copy_vocab[0], most_frequent_ids(tokens, 40))
    data = batches(tokens, 4, 16, torch.Generator().manual_seed(0), 0.5, 40)
    logs = [trainer.step(*next(data)) for _ in range(4)]
    assert [log.full_vocab for log in logs] == [False, False, True, True]


def test_copy_any_share_draws_that_share_of_repeated_rows_from_every_id():
    """With copy_vocab 20 and copy_any_share 0.5, about half the repeated rows hold ids outside the 20 most
    frequent; with 0, none do; and a trainer on such batches normalises their softmax over every training id."""
    tokens = random_ids(5000, seed=5)
    frequent = set(most_frequent_ids(tokens, 20).tolist())

    def outside(share):
        x, _ = next(batches(tokens, 200, 24, torch.Generator().manual_seed(1), 1.0, 20, share))
        return sum(not set(row.tolist()) <= frequent for row in x) / len(x)

    assert outside(0.0) == 0.0 and 0.4 < outside(0.5) < 0.6 and outside(1.0) == 1.0
    s = TrainSettings(
        steps=2, batch_size=4, copy_fraction=0.5, copy_vocab=20, copy_any_share=0.5, corpus_vocab_steps=2, warmup=0
    )
    trainer = Trainer(build(seed=14), s, tokens)
    assert torch.equal(trainer.copy_vocab[0], torch.unique(tokens))
    data = batches(tokens, 4, 16, torch.Generator().manual_seed(0), 0.5, 20, 0.5)
    assert all(math.isfinite(trainer.step(*next(data)).train_loss) for _ in range(2))
    with pytest.raises(ValueError, match="copy_any_share"):
        TrainSettings(copy_any_share=1.5)


def test_copy_batch_softmax_normalises_the_repeated_rows_over_their_own_ids():
    """With copy_batch_softmax the step's loss is the text rows over the corpus ids and the repeated rows over the
    ids those rows contain, recomputed here by hand from the full logits."""
    tokens = random_ids(3000, seed=4)
    s = TrainSettings(
        steps=1, batch_size=4, copy_fraction=0.5, corpus_vocab_steps=1, warmup=0, lr=1e-9, copy_batch_softmax=True
    )
    model = build(seed=13)
    trainer = Trainer(model, s, tokens)
    x, y = next(batches(tokens, 4, 16, torch.Generator().manual_seed(0), 0.5, 0))
    corpus_ids = torch.unique(tokens)
    window_ids = torch.unique(torch.cat([x[2:].flatten(), y[2:].flatten()]))
    assert len(window_ids) < len(corpus_ids)
    model.eval()
    with torch.no_grad():
        logits = model(x)

        def ce(rows, ids):
            index = {int(i): k for k, i in enumerate(ids)}
            targets = torch.tensor([[index[int(t)] for t in row] for row in y[rows]])
            return torch.nn.functional.cross_entropy(
                logits[rows][..., ids].reshape(-1, len(ids)), targets.reshape(-1), reduction="sum"
            )

        expected = (ce(slice(0, 2), corpus_ids) + ce(slice(2, 4), window_ids)) / y.numel()
    log = trainer.step(x, y)  # dropout 0 (build): train mode computes the same logits
    assert log.train_loss == pytest.approx(float(expected), abs=1e-5)
    with pytest.raises(ValueError, match="copy_batch_softmax"):
        TrainSettings(copy_batch_softmax=1)


def test_the_model_cards_commands_rebuild_every_stage_with_its_settings():
    import shlex

    from gptviz.__main__ import build_parser, config_and_settings
    from gptviz.training.model_card import _train_commands

    cfg = {"name": "small-4l", "norm": "post", "n_ctx": 128, "dropout": 0.0}
    first = {
        "settings": {
            "steps": 4000,
            "batch_size": 16,
            "lr": 0.003,
            "warmup": 100,
            "seed": 1337,
            "corpus_vocab_steps": 3900,
            "copy_fraction": 0.375,
            "eval_every": 250,
        },
        "init": "xavier",
    }
    second = {
        "settings": {
            "steps": 2400,
            "batch_size": 16,
            "lr": 0.0015,
            "warmup": 100,
            "seed": 1337,
            "corpus_vocab_steps": 2300,
            "copy_fraction": 0.5,
            "copy_vocab": 2000,
            "eval_every": 200,
            "weight_decay": 0.0,
        }
    }
    third = {
        "settings": {
            **second["settings"],
            "steps": 800,
            "block_size": 32,
            "seed": 7,
            "min_lr_ratio": 1.0,
            "copy_batch_softmax": True,
            "copy_any_share": 0.5,
        },
        "dropout": 0.1,
    }
    text = _train_commands(cfg, "shakespeare-post", [first, second, third])
    one, two, three = text.split("\npython ")
    assert "--steps 4000" in one and "--copy-fraction 0.375" in one and "--copy-vocab" not in one
    assert "--out /tmp/shakespeare-post-stage1" in one and "--init-from" not in one
    assert "--init xavier" in one and "--init " not in two + three  # the first stage's init; later ones continue
    assert "--copy-fraction 0.5 --copy-vocab 2000" in two and "--lr 0.0015" in two and "--block-size" not in two
    assert "--weight-decay 0.0" in two and "--weight-decay" not in one  # only where it is not the default
    assert "--init-from /tmp/shakespeare-post-stage1 --out /tmp/shakespeare-post-stage2" in two
    assert "--block-size 32" in three and "--min-lr-ratio 1.0" in three and "--min-lr-ratio" not in two
    assert "--copy-batch-softmax" in three and "--copy-batch-softmax" not in two
    assert "--copy-any-share 0.5" in three and "--copy-any-share" not in two
    assert "--dropout 0.1" in three and "--dropout 0.0" in two  # each stage's own dropout, else the model's
    assert "--init-from /tmp/shakespeare-post-stage2 --out gptviz/bundled/shakespeare-post" in three
    # each line, parsed by the CLI, gives back exactly the stage's settings (absent ones at their defaults)
    commands = text.replace("\\\n", " ").splitlines()
    for line, stage in zip(commands, (first, second, third), strict=True):
        args = build_parser().parse_args(shlex.split(line)[3:])
        model_cfg, settings = config_and_settings(args)
        assert settings == TrainSettings(**stage["settings"])
        assert args.init == stage.get("init", "gpt2")
        assert model_cfg.norm == "post" and model_cfg.n_ctx == 128


def test_recipe_differences_name_every_setting_but_warmup_that_twins_do_not_share():
    from gptviz.training.evaluate import recipe_differences

    base = {"data": "shakespeare-works", "settings": {"steps": 100, "lr": 0.003, "warmup": 100, "batch_size": 16}}
    assert recipe_differences(base, {**base, "settings": {**base["settings"], "warmup": 1000}}) == []
    other = {**base, "settings": {**base["settings"], "lr": 0.001}}
    assert recipe_differences(base, other) == ["stage 1: lr 0.003 against 0.001"]
    two = {**base, "continued_from": {**base}}
    assert recipe_differences(two, base) == ["the pre-norm model trained in 2 stages, the post-norm one in 1"]
    assert recipe_differences(two, {**two, "data": "tiny"}) == ["stage 2: data shakespeare-works against tiny"]
    # the first stage's init: a record from before --init existed ran GPT-2's
    assert recipe_differences(base, {**base, "init": "gpt2"}) == []
    assert recipe_differences(base, {**base, "init": "xavier"}) == ["stage 1: init gpt2 against xavier"]
    # a setting added after a stage was trained is absent from its record: its default ran then, so it is no
    # difference; a value other than the default is
    newer = {**base, "settings": {**base["settings"], "copy_any_share": 0.0, "copy_batch_softmax": False}}
    assert recipe_differences(base, newer) == []
    newer["settings"]["copy_any_share"] = 0.5
    assert recipe_differences(base, newer) == ["stage 1: copy any share 0.0 against 0.5"]


def test_the_model_card_says_when_the_first_stage_started_from_xavier():
    from gptviz.training.model_card import model_card

    report = json.loads((bundled_models()["shakespeare-pre"] / "check.json").read_text())
    stage = {
        "data": "shakespeare-works",
        "held_out": report["data"]["held_out"],
        "dropout": 0.0,
        "settings": {
            "steps": 10,
            "lr": 0.001,
            "warmup": 1,
            "batch_size": 4,
            "seed": 1,
            "min_lr_ratio": 1.0,
            "weight_decay": 0.0,
            "grad_clip": 1.0,
        },
    }
    cfg = {**get_preset("small-4l").to_dict(), "norm": "post"}
    xavier = model_card("x", {"config": cfg, "training": {**stage, "init": "xavier"}}, report)
    plain = model_card("x", {"config": cfg, "training": stage}, report)
    assert "starts from Xavier-uniform matrices (`--init xavier`)" in xavier and "--init xavier" not in plain
    assert "--init xavier --out gptviz/bundled/x" in xavier.replace("\\\n    ", "")
    assert "warmup in the first stage is longer" in plain and "warmup in the first stage" not in xavier


def test_the_chunked_validation_loss_equals_the_whole_batchs():
    """summed_lm_loss computes the LM head LOSS_ROWS positions at a time: the same sum as lm_loss over the batch."""
    from gptviz.training.train import LOSS_ROWS, lm_loss, summed_lm_loss

    model = build()
    x = random_ids(16, batch=9, seed=1)  # 144 positions: two whole chunks and a partial one
    y = random_ids(16, batch=9, seed=2)
    assert x.numel() % LOSS_ROWS and x.numel() > 2 * LOSS_ROWS
    with torch.no_grad():
        whole = float(lm_loss(model, x, y)) * y.numel()
    assert summed_lm_loss(model, x, y) == pytest.approx(whole, rel=1e-6)


COPY_ONLY = TrainSettings(
    steps=12,
    batch_size=4,
    block_size=16,
    lr=1e-2,
    warmup=2,
    weight_decay=0.0,
    copy_fraction=1.0,
    copy_vocab=30,
    corpus_vocab_steps=12,
    seed=0,
)


def _copy_only_run(settings, tokens):
    model = build(seed=15)
    initial = model.wte.weight.detach().clone()
    trainer = Trainer(model, settings, tokens)
    data = batches(tokens, settings.batch_size, settings.block_size, torch.Generator().manual_seed(0), 1.0, 30)
    logs = [trainer.step(*next(data)) for _ in range(settings.steps)]
    return model, trainer, logs, initial


def test_a_copy_only_run_steps_its_copy_ids_rows_alone_and_trains_the_same_model(monkeypatch):
    """Copy windows only, every step's softmax over the copy ids, no weight decay: the trainer steps those ids'
    embedding rows as their own tensor, and the model it trains equals (to float rounding) the one trained with the
    whole embedding in the optimiser; every other row keeps its initial value, in both."""
    tokens = random_ids(3000, seed=6)
    copy_ids = most_frequent_ids(tokens, 30)
    model, trainer, logs, initial = _copy_only_run(COPY_ONLY, tokens)
    assert torch.equal(trainer.trained_rows(), copy_ids) and trainer.rows.shape == (30, SMALL.d_model)
    assert model.wte.weight.grad is None  # the whole embedding had no gradient, and no optimiser state
    assert all(p.shape[0] != SMALL.vocab_size for g in trainer.optimizer.param_groups for p in g["params"])
    with monkeypatch.context() as m:  # the optimiser holds the whole embedding, as every run did before
        m.setattr(Trainer, "trained_rows", lambda self: None)
        twin, twin_trainer, twin_logs, _ = _copy_only_run(COPY_ONLY, tokens)
    assert twin_trainer.rows is None
    d = SMALL.d_model
    for (name, p), q in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        if name.endswith("attn.c_attn.bias"):
            # The key bias has no gradient in exact arithmetic (it shifts all of a query's scores alike, and softmax
            # ignores a shift), so AdamW's steps there follow rounding noise, which differs between the two runs (and
            # between CPUs: a few 1e-5 on one): within 1e-3 of each other; the query and value biases must agree
            key = slice(d, 2 * d)
            assert (p[key] - q[key]).abs().max() < 1e-3, name
            p, q = torch.cat([p[:d], p[2 * d :]]), torch.cat([q[:d], q[2 * d :]])
        assert torch.allclose(p, q, atol=1e-6, rtol=1e-5), name
    assert [log.train_loss for log in logs] == pytest.approx([log.train_loss for log in twin_logs], rel=1e-5)
    assert [log.grad_norm for log in logs] == pytest.approx([log.grad_norm for log in twin_logs], rel=1e-5)
    others = torch.ones(SMALL.vocab_size, dtype=torch.bool)
    others[copy_ids] = False
    for trained in (model, twin):
        assert torch.equal(trained.wte.weight[others], initial[others])
        assert not torch.equal(trained.wte.weight[copy_ids], initial[copy_ids])
    assert torch.equal(model.lm_head.weight, model.wte.weight)  # still tied


@pytest.mark.parametrize(
    "changes",
    [
        {"weight_decay": 0.1},  # AdamW's decay moves every row
        {"copy_fraction": 0.5},  # text windows hold any id
        {"corpus_vocab_steps": 6},  # later steps normalise over every id
        {"copy_batch_softmax": True},
    ],
)
def test_any_other_run_keeps_the_whole_embedding_in_the_optimiser(changes):
    tokens = random_ids(3000, seed=6)
    trainer = Trainer(build(seed=15), dataclasses.replace(COPY_ONLY, **changes), tokens)
    assert trainer.trained_rows() is None and trainer.rows is None
    model = trainer.model
    assert any(p is model.wte.weight for g in trainer.optimizer.param_groups for p in g["params"])


def test_a_trainer_of_the_copy_rows_refuses_a_batch_outside_them():
    tokens = random_ids(3000, seed=6)
    trainer = Trainer(build(seed=15), COPY_ONLY, tokens)
    x, y = next(batches(tokens, 4, 16, torch.Generator().manual_seed(0), 1.0, 30))
    outside = int(next(i for i in range(SMALL.vocab_size) if i not in set(trainer.trained_rows().tolist())))
    x[0, 3] = outside
    with pytest.raises(ValueError, match="copy ids only"):
        trainer.step(x, y)
    with pytest.raises(ValueError, match="copy ids only"):
        trainer.step(x[:2] * 0 + trainer.trained_rows()[0], y[:2])  # a short batch
