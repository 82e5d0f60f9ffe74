"""`python -m gptviz`: the params table and a short training run, in a real subprocess."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch

from gptviz.__main__ import main
from gptviz.model.weights import load_checkpoint, training_vocab
from gptviz.training.corpus import load_training_data
from tests.support import ROOT
from tests.support.cli import run_cli

CORPUS = ROOT / "data" / "tinyshakespeare.txt"


def plays_folder(tmp_path: Path, names: tuple[str, ...]) -> Path:
    """A folder of plays as --data reads them (<name>_gut.txt), 6,000 characters of the corpus each."""
    text = CORPUS.read_text(encoding="utf-8")
    plays = tmp_path / "plays"
    plays.mkdir()
    for i, name in enumerate(names):
        (plays / f"{name}_gut.txt").write_text(text[i * 6000 : (i + 1) * 6000], encoding="utf-8")
    return plays


def tiny_train(plays: Path, steps: int = 2) -> list[str]:
    """`train` of the tiny preset at context 32, batch 2, on the plays with "beta" held out."""
    settings = f"train --preset tiny --steps {steps} --batch-size 2 --n-ctx 32 --held-out beta".split()
    return [*settings, "--data", str(plays)]


@pytest.mark.slow
@pytest.mark.subprocess
def test_params_gpt2_xl_prints_the_total():
    out = run_cli("params", "gpt2-xl")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("gpt2-xl: 48 layers, d_model=1600, 25 heads")
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[-1] == "1,557,611,200"
    assert any(line.startswith("LM head") and "tied to token embedding" in line for line in lines)
    token = next(line for line in lines if line.startswith("token embedding"))
    assert "80,411,200" in token  # 50,257 x 1,600


@pytest.mark.slow
@pytest.mark.subprocess
def test_unknown_preset_exits_2_with_a_message():
    out = run_cli("params", "gpt5")
    assert out.returncode == 2
    assert "unknown preset 'gpt5'" in out.stderr and "gpt2-small" in out.stderr
    assert out.stdout == ""


def test_missing_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2 and "usage:" in capsys.readouterr().err


def test_params_in_process(capsys):
    assert main(["params", "gpt2-small-untied-noqkvbias"]) == 0
    text = capsys.readouterr().out
    assert "163,009,536" in text and "untied head" in text


@pytest.mark.slow
@pytest.mark.subprocess
def test_train_writes_a_loadable_checkpoint(tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text(CORPUS.read_text(encoding="utf-8")[:40_000], encoding="utf-8")
    out_dir = tmp_path / "model"
    out = run_cli(
        "train",
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--warmup",
        "1",
        "--threads",
        "1",
        "--data",
        str(data),
        "--out",
        str(out_dir),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "saved" in out.stdout
    model = load_checkpoint(out_dir)
    assert model.config.n_layers == 2 and model.config.dropout == 0.1 and model.config.norm == "pre"
    meta = json.loads((out_dir / "config.json").read_text())
    assert meta["training"]["data"] == "corpus.txt" and meta["training"]["final"]["step"] == 2
    assert (out_dir / "history.csv").read_text().count("\n") == 3  # header + 2 steps
    assert torch.equal(training_vocab(out_dir), torch.unique(load_training_data(data, 0.1).train))
    with torch.no_grad():
        assert model(torch.tensor([15496, 11, 314])).shape == (1, 3, 50257)


def test_train_rejects_bad_settings(capsys, tmp_path):
    assert main(["train", "--steps", "0", "--out", str(tmp_path / "never")]) == 2
    assert "steps=0" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


@pytest.mark.slow
def test_check_writes_its_report_where_told_and_beside_the_model_only_when_asked(tmp_path, capsys):
    plays = plays_folder(tmp_path, ("alpha", "beta", "gamma"))
    model_dir = tmp_path / "model"
    assert (
        main(
            [
                *tiny_train(plays),
                "--copy-fraction",
                "0.5",
                "--out",
                str(model_dir),
            ]
        )
        == 0
    )
    meta = json.loads((model_dir / "config.json").read_text())["training"]
    assert meta["data"] == "plays" and meta["held_out"] == ["beta"] and meta["settings"]["copy_fraction"] == 0.5
    before = sorted(p.name for p in model_dir.iterdir())
    out_dir = tmp_path / "report"
    assert main(["check", str(model_dir), "--data", str(plays), "--out", str(out_dir)]) == 1  # bars not met
    assert sorted(p.name for p in model_dir.iterdir()) == before  # nothing written beside the model
    report = json.loads((out_dir / "check.json").read_text())
    assert report["data"]["held_out"] == ["beta"] and "Not text alone" in (out_dir / "MODEL_CARD.md").read_text()
    assert f"wrote check.json and MODEL_CARD.md to {out_dir}" in capsys.readouterr().out
    main(["check", str(model_dir), "--data", str(plays)])  # no --out: a new temporary folder
    printed = capsys.readouterr().out.splitlines()[-1].removeprefix("wrote check.json and MODEL_CARD.md to ")
    assert Path(printed).parent == Path(tempfile.gettempdir()) and (Path(printed) / "check.json").is_file()
    assert sorted(p.name for p in model_dir.iterdir()) == before
    main(["check", str(model_dir), "--data", str(plays), "--update-card"])
    assert {"check.json", "MODEL_CARD.md"} <= {p.name for p in model_dir.iterdir()}


@pytest.mark.slow
def test_a_continued_stage_may_change_dropout_but_not_the_model(tmp_path, capsys):
    plays = plays_folder(tmp_path, ("alpha", "beta"))
    common = tiny_train(plays)
    first, second = tmp_path / "one", tmp_path / "two"
    assert main([*common, "--dropout", "0", "--min-lr-ratio", "1", "--out", str(first)]) == 0
    assert main([*common, "--dropout", "0.1", "--init-from", str(first), "--out", str(second)]) == 0
    meta = json.loads((second / "config.json").read_text())
    assert meta["config"]["dropout"] == 0.1 and meta["training"]["dropout"] == 0.1
    parent = meta["training"]["continued_from"]
    assert parent["dropout"] == 0.0 and parent["settings"]["min_lr_ratio"] == 1.0
    assert main([*common, "--norm", "post", "--init-from", str(first), "--out", str(tmp_path / "no")]) == 2
    assert "different model" in capsys.readouterr().err
    assert json.loads((first / "config.json").read_text())["training"]["init"] == "gpt2"
    assert "init" not in meta["training"]  # a continued stage starts from its parent, not from an init


@pytest.mark.slow
def test_train_starts_from_the_init_it_is_given_and_records_it(tmp_path):
    import torch

    from gptviz.model.config import get_preset
    from gptviz.model.model import GPT
    from gptviz.model.weights import load_checkpoint

    plays = plays_folder(tmp_path, ("alpha", "beta"))
    out = tmp_path / "xavier"
    # --lr tiny and one step: the trained weights stay within 1e-3 of the init they started from
    assert (
        main(
            [
                *tiny_train(plays, steps=1),
                "--init",
                "xavier",
                "--lr",
                "1e-7",
                "--warmup",
                "0",
                "--save-dtype",
                "float32",
                "--norm",
                "post",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads((out / "config.json").read_text())["training"]["init"] == "xavier"
    trained = load_checkpoint(out).state_dict()
    cfg = get_preset("tiny").replace(n_ctx=32, norm="post")
    for init in ("xavier", "gpt2"):
        start = GPT(cfg, init=init, seed=1337).state_dict()
        close = all(torch.allclose(trained[k], start[k], atol=1e-3) for k in start if k in trained)
        assert close == (init == "xavier"), init
