"""Checkpoints: our safetensors round-trip, Hugging Face GPT-2 import (parity with transformers), corrupt
and malicious files refused, offline Hub behaviour."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from gptviz import load_pretrained
from gptviz.model.weights import CheckpointError, config_from_hf, load_checkpoint, save_checkpoint, state_from_hf
from tests.support.cli import run_python
from tests.support.models import SMALL, build, random_ids
from tests.support.small_configs import hf_gpt2_config

VOCAB = 300


# ---------------------------------------------------------------- our own format


def test_round_trip_fp32_exact(tmp_path):
    model = build(seed=11, tie_weights=False, norm="post", activation="relu")
    save_checkpoint(model, tmp_path / "ckpt", extra={"note": "hello"})
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.config == model.config and loaded.config.name == model.config.name
    assert not loaded.training
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    meta = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert meta["format"] == "gptviz" and meta["note"] == "hello"


def test_round_trip_fp16_within_tolerance(tmp_path):
    model = build(seed=12)
    save_checkpoint(model, tmp_path, dtype=torch.float16)
    stored = load_file(str(tmp_path / "model.safetensors"))
    assert all(t.dtype == torch.float16 for t in stored.values())
    loaded = load_checkpoint(tmp_path)
    assert loaded.wte.weight.dtype == torch.float32
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, atol=1e-4, rtol=1e-3)
    ids = random_ids(12)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids), atol=2e-3, rtol=0)


def test_tied_model_stores_the_embedding_once(tmp_path):
    save_checkpoint(build(seed=13), tmp_path / "tied")
    keys = set(load_file(str(tmp_path / "tied" / "model.safetensors")))
    assert "wte.weight" in keys and "lm_head.weight" not in keys
    loaded = load_checkpoint(tmp_path / "tied")
    assert loaded.lm_head.weight is loaded.wte.weight
    save_checkpoint(build(seed=13, tie_weights=False), tmp_path / "untied")
    assert "lm_head.weight" in set(load_file(str(tmp_path / "untied" / "model.safetensors")))


def test_norm_override_loads_same_weights_with_other_wiring(tmp_path):
    model = build(seed=14)
    save_checkpoint(model, tmp_path)
    post = load_checkpoint(tmp_path, norm="post")
    assert post.config.norm == "post"
    for key, value in model.state_dict().items():
        assert torch.equal(post.state_dict()[key], value)
    ids = random_ids(10)
    with torch.no_grad():
        assert (post(ids) - model(ids)).abs().max() > 1e-3
    with pytest.raises(CheckpointError, match="norm"):
        load_checkpoint(tmp_path, norm="sideways")


def test_load_pretrained_accepts_a_folder_path(tmp_path):
    model = build(seed=15)
    save_checkpoint(model, tmp_path / "mine")
    loaded = load_pretrained(str(tmp_path / "mine"))
    assert torch.equal(loaded.wpe.weight, model.wpe.weight)


# ---------------------------------------------------------------- broken inputs


def _saved(tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    save_checkpoint(build(seed=16), folder)
    return folder


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="is not a folder"):
        load_checkpoint(tmp_path / "nowhere")


BAD_HEADS = json.dumps({"format": "gptviz", "config": {**SMALL.to_dict(), "n_heads": 5}}).encode()


@pytest.mark.parametrize(
    "name, damage, message",
    [
        ("config.json", None, "has no config.json"),
        ("config.json", lambda data: b"{not json", "not a readable JSON config"),
        ("config.json", lambda data: BAD_HEADS, "n_heads"),
        ("model.safetensors", None, "no model.safetensors or pytorch_model.bin"),
        ("model.safetensors", lambda data: os.urandom(4096), "model.safetensors is corrupt"),
        ("model.safetensors", lambda data: data[: len(data) // 2], "corrupt"),  # truncated
    ],
    ids=["no-config", "config-not-json", "config-bad-heads", "no-weights", "garbage-weights", "truncated-weights"],
)
def test_a_damaged_checkpoint_is_refused_saying_why(tmp_path, name, damage, message):
    """`damage`: the file's new bytes from its old ones; None removes it."""
    path = _saved(tmp_path) / name
    if damage is None:
        path.unlink()
    else:
        path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path.parent)


def test_wrong_shapes_named(tmp_path):
    folder = _saved(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    state["wpe.weight"] = torch.zeros(8, 32)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"wpe.weight has shape \(8, 32\), the config implies \(16, 32\)"):
        load_checkpoint(folder)


def test_missing_and_unexpected_keys_named(tmp_path):
    folder = _saved(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    del state["blocks.1.mlp.c_fc.bias"]
    state["extra.weight"] = torch.zeros(2)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing \['blocks.1.mlp.c_fc.bias'\], unexpected \['extra.weight'\]"):
        load_checkpoint(folder)


class _WritesMarker:
    """Unpickling this would call open(marker, "w"): code execution by loading a file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _hf_folder_with_bin(tmp_path: Path, payload) -> Path:
    folder = tmp_path / "hf_bin"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 4}
        )
    )
    torch.save(payload, folder / "pytorch_model.bin")
    return folder


def test_bin_with_pickled_code_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    folder = _hf_folder_with_bin(tmp_path, {"transformer.wte.weight": torch.zeros(3), "x": _WritesMarker(marker)})
    with pytest.raises(CheckpointError, match="never pickled code"):
        load_checkpoint(folder)
    assert not marker.exists()
    # The payload is live: a plain unpickler would run it (proves the test would catch a regression).
    torch.load(folder / "pytorch_model.bin", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("payload", [{"a": 1}, [torch.zeros(2)], {"w": torch.zeros(2), "n": "text"}])
def test_bin_without_a_state_dict_is_refused(tmp_path, payload):
    with pytest.raises(CheckpointError, match="not a state dict"):
        load_checkpoint(_hf_folder_with_bin(tmp_path, payload))


def test_truncated_bin(tmp_path):
    folder = _hf_folder_with_bin(tmp_path, {"w": torch.zeros(1000)})
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 3])
    with pytest.raises(CheckpointError, match="pytorch_model.bin is corrupt"):
        load_checkpoint(folder)


@pytest.mark.parametrize(
    "hf, message",
    [
        ({"model_type": "llama"}, "model_type .llama. \\(rotary positions.* is not supported: gptviz reads"),
        (
            {
                "model_type": "gpt2",
                "activation_function": "silu",
                "vocab_size": 10,
                "n_embd": 8,
                "n_layer": 1,
                "n_head": 2,
            },
            "activation_function 'silu'",
        ),
        ({"model_type": "gpt2", "vocab_size": 10, "n_layer": 1, "n_head": 2}, "no 'n_embd' field"),
        (
            {
                "model_type": "gpt2",
                "vocab_size": 10,
                "n_embd": 8,
                "n_layer": 1,
                "n_head": 2,
                "scale_attn_by_inverse_layer_idx": True,
            },
            "scale_attn_by_inverse_layer_idx",
        ),
    ],
)
def test_unsupported_hf_configs(hf, message):
    with pytest.raises(CheckpointError, match=message):
        config_from_hf(hf)


# ---------------------------------------------------------------- Hugging Face parity


def _hf_model(tie: bool = True, seed: int = 0):
    pytest.importorskip("transformers")
    from transformers import GPT2LMHeadModel

    cfg = hf_gpt2_config(VOCAB, 24, tie_word_embeddings=tie, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    torch.manual_seed(seed)
    hf = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # perturb everything (norm gains and biases too) so a mis-mapped tensor shows
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return hf


def _prompts():
    return [random_ids(n, vocab=VOCAB, seed=s) for n, s in ((1, 0), (5, 1), (17, 2), (24, 3))]


def _assert_parity(ours, hf):
    for ids in _prompts():
        with torch.no_grad():
            expected = hf(ids[None]).logits
            got = ours(ids)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    batch = random_ids(9, vocab=VOCAB, batch=3, seed=9)
    with torch.no_grad():
        torch.testing.assert_close(ours(batch), hf(batch).logits, atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.hf
@pytest.mark.parametrize("tie", [True, False])
def test_hf_safetensors_folder_matches_transformers(tmp_path, tie):
    hf = _hf_model(tie=tie)
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    ours = load_pretrained(str(tmp_path))
    assert ours.config.tie_weights is tie and ours.config.activation == "gelu_tanh"
    assert (ours.lm_head.weight is ours.wte.weight) is tie
    _assert_parity(ours, hf)


@pytest.mark.hf
@pytest.mark.parametrize("tie", [True, False])
def test_hf_bin_folder_matches_transformers(tmp_path, tie):
    hf = _hf_model(tie=tie, seed=1)
    hf.config.save_pretrained(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")  # the legacy layout, written by hand
    ours = load_checkpoint(tmp_path)
    _assert_parity(ours, hf)


@pytest.mark.hf
def test_hf_import_with_post_norm_override(tmp_path):
    hf = _hf_model(seed=2)
    hf.save_pretrained(tmp_path)
    pre, post = load_pretrained(str(tmp_path)), load_pretrained(str(tmp_path), norm="post")
    assert post.config.norm == "post"
    for key, value in pre.state_dict().items():
        assert torch.equal(post.state_dict()[key], value)
    ids = random_ids(10, vocab=VOCAB)
    with torch.no_grad():
        assert (post(ids) - pre(ids)).abs().max() > 1e-3


@pytest.mark.hf
def test_state_from_hf_mapping():
    hf = _hf_model(tie=False)
    sd = hf.state_dict()
    cfg = config_from_hf(hf.config.to_dict())
    state = state_from_hf(sd, cfg)
    assert torch.equal(state["blocks.1.attn.c_attn.weight"], sd["transformer.h.1.attn.c_attn.weight"].t())
    assert torch.equal(state["blocks.0.mlp.c_proj.weight"], sd["transformer.h.0.mlp.c_proj.weight"].t())
    assert torch.equal(state["wte.weight"], sd["transformer.wte.weight"])
    assert torch.equal(state["lm_head.weight"], sd["lm_head.weight"])
    assert not any(k.startswith(("transformer.", "h.")) for k in state)


@pytest.mark.hf
def test_hub_id_offline_with_empty_cache_says_what_to_do(hub_cache):
    with pytest.raises(CheckpointError) as info:
        load_pretrained("gpt2", offline=True)
    message = str(info.value)
    assert "'gpt2' is not in the local Hugging Face cache" in message
    assert "hf download gpt2" in message and "pass its path" in message


@pytest.mark.hf
def test_hub_id_found_in_local_cache_loads_offline(hub_cache, tmp_path):
    hf = _hf_model(seed=3)
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub_cache / "models--someorg--tiny-gpt2"
    snapshot = repo / "snapshots" / commit
    hf.save_pretrained(tmp_path / "saved")
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    blobs = repo / "blobs"
    blobs.mkdir()
    for name in ("config.json", "model.safetensors"):  # the Hub cache stores blobs and links snapshots to them
        blob = blobs / f"blob-{name}"
        shutil.copy(tmp_path / "saved" / name, blob)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    ours = load_pretrained("someorg/tiny-gpt2", offline=True)
    assert ours.config.vocab_size == VOCAB
    _assert_parity(ours, hf)
    with pytest.raises(CheckpointError, match="not in the local Hugging Face cache"):
        load_pretrained("someorg/other", offline=True)


def test_path_like_names_that_do_not_exist(tmp_path):
    for name in (str(tmp_path / "missing"), "./nope", "weights.safetensors", "a/b/c", " "):
        with pytest.raises(CheckpointError, match="is not a folder holding a checkpoint"):
            load_pretrained(name)


def test_training_vocab_round_trip_and_bad_files(tmp_path):
    from gptviz.model.weights import CheckpointError, training_vocab, write_training_vocab

    assert training_vocab(tmp_path) is None  # not recorded
    write_training_vocab(tmp_path, torch.tensor([9, 3, 3, 50256, 9]))
    assert training_vocab(tmp_path).tolist() == [3, 9, 50256]
    for bad in ('{"ids": [1]}', '[1, "2"]', "[true]"):
        (tmp_path / "training_vocab.json").write_text(bad)
        with pytest.raises(CheckpointError, match="not a list of token ids"):
            training_vocab(tmp_path)


def test_no_message_names_a_server_path(tmp_path):
    """A visitor's bad folder or Hub repo is refused with messages that name the file, never where it lies on the
    server (a cached Hub repo without config.json showed the whole cache path; a pytorch_model.bin holding a list
    showed its path)."""

    def message(folder) -> str:
        with pytest.raises(CheckpointError) as info:
            load_checkpoint(folder)
        return str(info.value)

    no_config = _saved(tmp_path / "a")
    (no_config / "config.json").unlink()
    holds_a_list = _saved(tmp_path / "b")
    (holds_a_list / "model.safetensors").unlink()
    torch.save([torch.zeros(2)], holds_a_list / "pytorch_model.bin")
    messages = [message(tmp_path / "nowhere"), message(no_config), message(holds_a_list)]
    assert all(str(tmp_path) not in m and "/" not in m for m in messages), messages
    assert "no config.json" in messages[1] and "not a state dict" in messages[2]


# ---- the cold start's model load (issue 32) ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny", "gpt2-small", "gpt2-small-untied-noqkvbias", "gpt1"])
@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
def test_expected_shapes_by_formula_match_a_module_tree(name, norm_type):
    from gptviz import GPT, PRESETS
    from gptviz.model.weights import expected_shapes

    cfg = PRESETS[name].replace(norm_type=norm_type)
    with torch.device("meta"):
        tree = GPT(cfg)
    built = {k: tuple(v.shape) for k, v in tree.state_dict().items() if not (cfg.tie_weights and k == "lm_head.weight")}
    assert expected_shapes(cfg) == built


@pytest.mark.slow
def test_loading_the_bundled_model_imports_no_compiler_and_draws_nothing():
    """A fresh process loads the bundled model without torch._dynamo (a meta-device normal_ imported it: 1-2 s of
    the first visitor's wait) and without drawing random weights it then overwrites; the weights are the file's."""
    code = (
        "import sys, torch\n"
        "from unittest import mock\n"
        "from gptviz import load_pretrained\n"
        "from gptviz.model.weights import bundled_models\n"
        "from safetensors.torch import load_file\n"
        "with mock.patch.object(torch.Tensor, 'normal_', side_effect=AssertionError('drew weights')):\n"
        "    m = load_pretrained('shakespeare-pre')\n"
        "print('dynamo', any(k.startswith('torch._dynamo') for k in sys.modules))\n"
        "f = load_file(str(bundled_models()['shakespeare-pre'] / 'model.safetensors'))\n"
        "s = m.state_dict()\n"
        "print('same', all(torch.equal(s[k], v.float()) for k, v in f.items()))\n"
        "print('dtype', {str(v.dtype) for v in s.values()})\n"
    )
    out = run_python(code, timeout=600)
    assert "dynamo False" in out and "same True" in out and "dtype {'torch.float32'}" in out
