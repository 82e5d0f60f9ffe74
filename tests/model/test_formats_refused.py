"""Checkpoint files from outside are read safely: a pickle that would run code is refused and runs nothing, sizes
past the load limits are refused before a tensor is read, and architectures gptviz does not run (rotary positions,
grouped-query attention, parallel blocks, Llama-style checkpoints) get one sentence saying so, never a traceback or
a wrong model."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch

from gptviz import load_pretrained
from gptviz.model.formats.load import path_config, path_nbytes
from gptviz.model.formats.unsupported import SUPPORTED
from gptviz.model.params import param_count
from gptviz.model.weights import CheckpointError
from tests.reference import nanogpt as nanogpt_ref


class CreatesAFile:
    """Unpickling this opens (so creates) `path` for writing: what a hostile checkpoint would do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def refusal(path, **kwargs) -> str:
    with pytest.raises(CheckpointError) as info:
        load_pretrained(str(path), **kwargs)
    return str(info.value)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("write", ["torch.save", "pickle protocol 2", "pickle protocol 5"])
@pytest.mark.parametrize("name", ["ckpt.pt", "model.pth", "model.bin"])
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path, write, name):
    marker = tmp_path / "created"
    payload = {"model": {"transformer.wte.weight": [1.0, 2.0]}, "model_args": CreatesAFile(marker)}
    path = tmp_path / name
    if write == "torch.save":
        torch.save(payload, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(payload, f, protocol=int(write[-1]))
    message = refusal(path)
    assert not marker.exists()
    if write == "pickle protocol 5":  # its framing opcode is refused before the global is reached
        assert "is corrupt or not a PyTorch file (Unsupported operand" in message
    else:
        assert "never pickled code (Unsupported global: GLOBAL io.open)" in message
    assert "weights_only" not in message and str(tmp_path) not in message
    with open(path, "rb") as f:  # the payload is live: a plain unpickler would run it
        torch.load(f, weights_only=False) if write == "torch.save" else pickle.load(f)
    assert marker.exists()


def test_sizes_past_the_limits_are_refused_before_a_tensor_is_read(tmp_path):
    cfg = nanogpt_ref.GPTConfig(block_size=8, vocab_size=50, n_layer=1, n_head=2, n_embd=8)
    model = nanogpt_ref.GPT(cfg)
    for change, message in (
        ({"n_layer": 100_000}, "100,000 layers"),
        ({"block_size": 10**8}, "context of 100,000,000 positions"),
        ({"n_embd": 65536, "n_head": 1}, "parameters; this server loads at most"),
    ):
        nanogpt_ref.save_ckpt(model, tmp_path / "ckpt.pt")
        ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
        ckpt["model_args"].update(change)  # the small tensors stay: a loader past the check would fail on shapes
        torch.save(ckpt, tmp_path / "ckpt.pt")
        assert message in refusal(tmp_path / "ckpt.pt")
        assert path_nbytes(tmp_path / "ckpt.pt") == 0
    header = [20240326, 3, 10**8, 50257, 12, 12, 768, 50304] + [0] * 248  # llm.c: refused from the header alone
    (tmp_path / "big.bin").write_bytes(struct.pack("<256i", *header))
    assert "context of 100,000,000 positions" in refusal(tmp_path / "big.bin")


def test_sizes_are_known_before_loading(tmp_path):
    model = nanogpt_ref.GPT(nanogpt_ref.GPTConfig(block_size=8, vocab_size=50, n_layer=1, n_head=2, n_embd=8))
    nanogpt_ref.save_ckpt(model, tmp_path / "ckpt.pt")
    config = path_config(tmp_path)
    assert (config.n_layers, config.n_heads, config.vocab_size, config.n_ctx) == (1, 2, 50, 8)
    assert path_nbytes(tmp_path / "ckpt.pt") == 8 * param_count(config)


@pytest.mark.parametrize(
    "model_type, named",
    [
        ("llama", "rotary positions, grouped-query attention"),
        ("mistral", "rotary positions"),
        ("gpt_neox", "rotary positions and parallel blocks"),
        ("gptj", "parallel blocks"),
        ("qwen2", "rotary"),
        ("bert", "model_type 'bert'"),
    ],
)
def test_unsupported_model_types_get_one_sentence(tmp_path, model_type, named):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 64}))
    message = refusal(tmp_path)
    assert named in message and message.endswith(SUPPORTED + ".") and ". " not in message  # one sentence


@pytest.mark.parametrize(
    "extra, named",
    [
        ({"rope_theta": 10000.0}, "rotary positions (rope_theta"),
        ({"num_attention_heads": 8, "num_key_value_heads": 2}, "Grouped-query attention (2 key and value heads for 8"),
        ({"use_parallel_residual": True}, "parallel blocks"),
    ],
)
def test_unsupported_features_in_a_gpt2_like_config_are_named(tmp_path, extra, named):
    config = {"model_type": "gpt2", "vocab_size": 50, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2}
    (tmp_path / "config.json").write_text(json.dumps({**config, **extra}))
    assert named in refusal(tmp_path)


@pytest.mark.parametrize(
    "keys, named",
    [
        (
            [
                "model.embed_tokens.weight",
                "model.layers.0.self_attn.q_proj.weight",
                "model.layers.0.self_attn.k_proj.weight",
            ],
            "Llama-style layout",
        ),
        (["tok_embeddings.weight", "layers.0.attention.wq.weight"], "Llama-style layout"),
        (
            ["gpt_neox.layers.0.attention.rotary_emb.inv_freq", "gpt_neox.layers.0.attention.query_key_value.weight"],
            "rotary positions",
        ),
        (["transformer.h.0.attn.c_attn.weight", "transformer.h.0.mlp.fc_in.weight"], "GPT-J layout"),
    ],
)
def test_unsupported_state_dicts_get_one_sentence(tmp_path, keys, named):
    for wrap in (lambda s: s, lambda s: {"model_state_dict": s}):
        torch.save(wrap({k: torch.zeros(2, 2) for k in keys}), tmp_path / "model.pth")
        message = refusal(tmp_path / "model.pth", n_head=2)
        assert named in message and "is not supported" in message and SUPPORTED in message


def test_unknown_files_and_folders_say_what_is_read(tmp_path):
    torch.save({"encoder.weight": torch.zeros(2)}, tmp_path / "weights.pt")
    assert "in no layout gptviz recognises" in refusal(tmp_path / "weights.pt")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    assert "in no layout gptviz recognises" in refusal(tmp_path / "list.pt")
    torch.save({"transformer.h.0.attn.c_attn.weight": torch.zeros(6, 2)}, tmp_path / "bare.pt")
    assert "without the sizes that go with them" in refusal(tmp_path / "bare.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a pickle at all")
    assert "junk.pt is corrupt or not a PyTorch file (Unsupported operand 110)" in refusal(tmp_path / "junk.pt")
    (tmp_path / "empty").mkdir()
    message = refusal(tmp_path / "empty")
    assert "has no config.json and no checkpoint file gptviz reads" in message and "/" not in message
    torch.save({"model": [], "model_args": {"n_layer": 1}}, tmp_path / "ckpt.pt")
    assert "n_head must be a positive whole number" in refusal(tmp_path / "ckpt.pt")


@pytest.mark.parametrize(
    "payload",
    [
        {"tok_emb.weight": torch.zeros(4, 2), "trf_blocks.0.att.W_query.weight": [1.0]},
        {"tok_emb.weight": torch.zeros(4, 2), "trf_blocks.0.x": torch.zeros(1), 3: 4},
        {"model_state_dict": {"tok_emb.weight": "text", "trf_blocks.0.a": 1}},
        {"model": {"a": 1}, "model_args": {"n_layer": 1, "n_head": 1, "n_embd": 2, "block_size": 2, "vocab_size": 3}},
        {"model": [1], "model_args": {"n_layer": 1, "n_head": 1, "n_embd": 2, "block_size": 2, "vocab_size": 3}},
    ],
)
def test_containers_of_the_wrong_things_are_refused_in_words(tmp_path, payload):
    torch.save(payload, tmp_path / "model.pth")
    assert "is not a state dict (a mapping of names to tensors)" in refusal(tmp_path / "model.pth", n_head=1)


def test_a_raschka_file_with_parts_missing_names_them(tmp_path):
    from tests.reference import raschka as raschka_ref

    cfg = {
        "vocab_size": 11,
        "context_length": 8,
        "emb_dim": 8,
        "n_heads": 2,
        "n_layers": 2,
        "drop_rate": 0.0,
        "qkv_bias": False,
    }
    state = raschka_ref.GPTModel(cfg).state_dict()
    del state["trf_blocks.1.ff.layers.2.bias"]
    torch.save(state, tmp_path / "model.pth")
    assert "missing ['trf_blocks.1.ff.layers.2.bias']" in refusal(tmp_path / "model.pth", n_head=2)
    del state["trf_blocks.0.norm1.scale"], state["trf_blocks.1.norm1.scale"]
    state["trf_blocks.3.norm1.scale"] = torch.ones(8)
    torch.save(state, tmp_path / "model.pth")
    assert "are not numbered 0, 1, 2" in refusal(tmp_path / "model.pth", n_head=2)
