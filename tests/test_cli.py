"""`python -m gptviz`: the params table and a short training run, in a real subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gptviz.__main__ import main
from gptviz.weights import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "tinyshakespeare.txt"

def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "gptviz", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


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


@pytest.mark.subprocess
def test_train_writes_a_loadable_checkpoint(tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text(CORPUS.read_text(encoding="utf-8")[:40_000], encoding="utf-8")
    out_dir = tmp_path / "model"
    out = run_cli("train", "--preset", "tiny", "--steps", "2", "--batch-size", "2", "--warmup", "1",
                  "--threads", "1", "--data", str(data), "--out", str(out_dir), timeout=300)
    assert out.returncode == 0, out.stderr
    assert "saved" in out.stdout
    model = load_checkpoint(out_dir)
    assert model.config.n_layers == 2 and model.config.dropout == 0.1 and model.config.norm == "pre"
    meta = json.loads((out_dir / "config.json").read_text())
    assert meta["training"]["data"] == "corpus.txt" and meta["training"]["final"]["step"] == 2
    assert (out_dir / "history.csv").read_text().count("\n") == 3  # header + 2 steps
    with torch.no_grad():
        assert model(torch.tensor([15496, 11, 314])).shape == (1, 3, 50257)


def test_train_rejects_bad_settings(capsys, tmp_path):
    assert main(["train", "--steps", "0", "--out", str(tmp_path / "never")]) == 2
    assert "steps=0" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
