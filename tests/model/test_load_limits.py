"""Checkpoints from outside are validated before anything is allocated: malformed config.json files, sizes past
the caps, and weights whose header disagrees with the config each give a CheckpointError that names the problem
and no server path. The hostile sizes run in a child process under a memory cap."""

from __future__ import annotations

import json
import os
import re
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from gptviz import PRESETS
from gptviz.model.load_limits import LoadLimits, load_limits
from gptviz.model.params import param_count, total_params
from gptviz.model.weights import CheckpointError, check_load_limits, load_checkpoint, save_checkpoint
from gptviz.serve import model_access
from gptviz.serve.limits import ServerLimits, server_limits
from tests.support.cli import run_python
from tests.support.models import SMALL, build

HF_BASE = {"model_type": "gpt2", "vocab_size": 50, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 4}


def folder_with(tmp_path: Path, config, name: str = "ckpt") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    save_file({"wte.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize(
    "config, message",
    [
        ("[1, 2]", "holds a JSON list"),
        ('"gpt2"', "holds a JSON str"),
        ("42", "holds a JSON int"),
        ("null", "holds a JSON NoneType"),
        ({"format": "gptviz"}, 'without a "config" object'),
        ({"format": "gptviz", "config": [1]}, 'without a "config" object'),
        ({"format": "gptviz", "config": {"vocab_size": "many"}}, "vocab_size"),
        ({**HF_BASE, "activation_function": ["gelu"]}, "activation_function"),
        ({**HF_BASE, "n_embd": [32]}, "config.json"),
        ("{" * 100_000, "not a readable JSON config"),
    ],
)
def test_malformed_config_json_gives_a_checkpoint_error_without_paths(tmp_path, config, message):
    folder = folder_with(tmp_path, config)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(folder)
    assert str(tmp_path) not in str(info.value)


def test_a_fifo_config_is_refused_without_hanging(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    result = {}

    def load():
        try:
            load_checkpoint(folder)
        except CheckpointError as err:
            result["error"] = str(err)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "reading a FIFO hung"
    assert result["error"] == "config.json is not a regular file"


def test_weights_header_that_disagrees_with_the_config_is_refused_before_loading(tmp_path):
    model = build()
    folder = save_checkpoint(model, tmp_path / "ckpt")
    meta = json.loads((folder / "config.json").read_text())
    meta["config"]["d_model"] = 64  # the weights are 32 wide
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"has shape \(96,\), the config implies \(192,\)"):
        load_checkpoint(folder)


@pytest.mark.parametrize("name", ["tiny", "gpt2-small", "gpt2-xl", "gpt1"])
def test_closed_form_parameter_count_equals_the_table(name):
    for cfg in (PRESETS[name], PRESETS[name].replace(tie_weights=False, qkv_bias=False, norm_type="rmsnorm")):
        assert param_count(cfg) == total_params(cfg)


HOSTILE = textwrap.dedent("""
    import json, resource, sys, tempfile, time
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))  # 3 GiB: torch's own import fits
    from gptviz.model.weights import CheckpointError, load_checkpoint
    from safetensors.torch import save_file
    import torch
    base = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
            "n_head": 12}
    for change in json.loads(sys.argv[1]):
        folder = Path(tempfile.mkdtemp())
        (folder / "config.json").write_text(json.dumps({**base, **change}))
        save_file({"wte.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
        started = time.perf_counter()
        try:
            load_checkpoint(folder)
            print("LOADED", change)
        except CheckpointError as err:
            print(f"REFUSED {time.perf_counter() - started:.2f}s {err}")
""")


@pytest.mark.slow
def test_configs_past_the_caps_are_refused_before_allocating():
    changes = [
        {"n_positions": 10**8},
        {"n_layer": 10**5},
        {"n_embd": 65536, "n_head": 1},
        {"n_layer": 10**8, "n_embd": 1, "n_head": 1, "n_inner": 1},
    ]
    lines = run_python(HOSTILE, json.dumps(changes)).splitlines()
    assert len(lines) == 4 and all(line.startswith("REFUSED") for line in lines), lines
    assert "context of 100,000,000 positions" in lines[0]
    assert "100,000 layers" in lines[1]
    assert "parameters; this server loads at most 2,000,000,000" in lines[2]
    assert "100,000,000 layers" in lines[3]
    assert all(float(line.split()[1][:-1]) < 5 for line in lines)  # refused at once, not after building


# ---- finding 6: a visitor's folder field loads only from the server's model folders ------------------------


def test_visitors_load_folders_only_inside_the_allowed_roots(tmp_path, monkeypatch):
    from gptviz.serve.model_access import FOLDER_REFUSED, load_allowed

    allowed, outside = tmp_path / "models", tmp_path / "elsewhere"
    save_checkpoint(build(seed=2), allowed / "mine")
    save_checkpoint(build(seed=2), outside / "theirs")
    (allowed / "link").symlink_to(outside / "theirs")  # a link out of the root is outside
    os.chmod(outside, 0o755)
    roots = [allowed]
    assert load_allowed(str(allowed / "mine"), roots=roots).config == SMALL
    monkeypatch.chdir(tmp_path)
    assert load_allowed("./models/mine", roots=roots).config == SMALL
    refused = [
        str(outside / "theirs"),
        str(allowed / "link"),
        str(allowed / "mine" / ".." / ".." / "elsewhere"),
        "/etc",
        "/nonexistent/x",
        "~root",
        "~/models/mine",
        "./models",
        str(allowed / "missing"),
        "/proc/self/cwd",
        "./models/mine\x00",
    ]
    for name in refused:
        with pytest.raises(CheckpointError) as info:
            load_allowed(name, roots=roots)
        assert str(info.value) == FOLDER_REFUSED, name  # one message, echoing nothing


def test_the_sidebar_loader_uses_the_allowed_roots(tmp_path, monkeypatch):
    from gptviz.app import keys as K
    from gptviz.app import model_service
    from gptviz.serve.model_access import FOLDER_REFUSED

    save_checkpoint(build(seed=4), tmp_path / "ops" / "model")
    spec = model_service.ModelSpec(K.SOURCE_PRETRAINED, str(tmp_path / "ops" / "model"), "pre", 0)
    with pytest.raises(CheckpointError, match="No model folder of that name"):
        model_service.load_model(spec)
    model_service.model_store().clear()
    # GPTVIZ_MODEL_DIRS is read once, by limits.server_limits(); the server's model access reads it from there
    limits = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": str(tmp_path / "ops")})
    monkeypatch.setattr(model_access, "server_limits", lambda: limits)
    assert model_service.load_model(spec).config == SMALL
    model_service.model_store().clear()
    assert FOLDER_REFUSED.count("/") == 0


# ---- the load caps are the library's (it loads), the model folders the server's; both refused when malformed ----


def test_load_caps_come_from_the_environment_and_model_dirs_from_server_limits(tmp_path, monkeypatch):
    assert ServerLimits.from_env({}).model_dirs == ()
    sep = os.pathsep
    got = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": f"{tmp_path / 'a'}{sep} {sep}{tmp_path / 'b'}{sep}"})
    assert got.model_dirs == (str(tmp_path / "a"), str(tmp_path / "b"))  # blank entries skipped
    monkeypatch.setattr(model_access, "server_limits", lambda: got)  # the model roots
    assert model_access.model_roots()[2:] == [tmp_path / "a", tmp_path / "b"]
    caps = LoadLimits.from_env({"GPTVIZ_MAX_LOAD_PARAMS": "1_000", "GPTVIZ_MAX_LOAD_CTX": "64"})
    assert (caps.max_params, caps.max_ctx) == (1000, 64)
    assert LoadLimits.from_env({}) == LoadLimits() and LoadLimits().max_params == 2_000_000_000
    monkeypatch.setenv("GPTVIZ_MAX_LOAD_PARAMS", "1_000")
    monkeypatch.setenv("GPTVIZ_MAX_LOAD_CTX", "64")
    load_limits.cache_clear()
    try:
        with pytest.raises(CheckpointError, match=r"at most 64 \(GPTVIZ_MAX_LOAD_CTX\)"):
            check_load_limits(SMALL.replace(n_ctx=65))
        with pytest.raises(CheckpointError, match=r"at most 1,000 \(GPTVIZ_MAX_LOAD_PARAMS\)"):
            check_load_limits(SMALL)
    finally:
        monkeypatch.undo()
        load_limits.cache_clear()
    check_load_limits(SMALL)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"GPTVIZ_MAX_LOAD_PARAMS": "two billion"}, "GPTVIZ_MAX_LOAD_PARAMS must be a whole number, got 'two billion'"),
        (
            {"GPTVIZ_MAX_LOAD_CTX": "0"},
            "GPTVIZ_MAX_LOAD_CTX: the load limit max_ctx must be a whole number of at least 1",
        ),
        ({"GPTVIZ_MAX_LOAD_CTX": "-5"}, "GPTVIZ_MAX_LOAD_CTX: the load limit"),
    ],
)
def test_malformed_load_caps_name_their_variable(env, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        LoadLimits.from_env(env)


def test_a_malformed_load_cap_stops_the_server_at_start_up(monkeypatch):
    # weights.py once read these itself and fell back to its defaults on a bad value; server_limits() reads them too
    monkeypatch.setenv("GPTVIZ_MAX_LOAD_CTX", "many")
    load_limits.cache_clear()
    server_limits.cache_clear()
    try:
        with pytest.raises(ValueError, match="GPTVIZ_MAX_LOAD_CTX must be a whole number"):
            server_limits()
    finally:
        monkeypatch.undo()
        load_limits.cache_clear()
        server_limits.cache_clear()


@pytest.mark.parametrize(
    "env, message",
    [
        ({"GPTVIZ_MODEL_DIRS": "models"}, "GPTVIZ_MODEL_DIRS must list absolute folder paths"),
        ({"GPTVIZ_MODEL_DIRS": "~/models"}, "GPTVIZ_MODEL_DIRS must list absolute folder paths"),
    ],
)
def test_malformed_model_dirs_name_their_variable(env, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ServerLimits.from_env(env)


def test_model_dirs_given_directly_must_be_absolute_paths():
    with pytest.raises(ValueError, match="absolute folder paths"):
        ServerLimits(model_dirs=("relative",))
    with pytest.raises(ValueError, match="tuple of folder paths"):
        ServerLimits(model_dirs="/one/string")
