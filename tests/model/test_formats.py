"""Checkpoints trained with other code load through load_pretrained with logits equal to that code's own forward
pass: Hugging Face GPT-1 (transformers itself), nanoGPT, Raschka's GPTModel and llm.c (the reference models in
tests/reference/). Weights are drawn at unit scale: at GPT-2's init scale (0.02) a wrong GELU or a missing norm moves
the logits by less than the 1e-4 compared. The parameter count of each loaded config is the reference's."""

from __future__ import annotations

import json

import pytest
import torch

from gptviz import load_pretrained
from gptviz.model.params import total_params
from gptviz.model.weights import CheckpointError
from tests.reference import llmc as llmc_ref
from tests.reference import nanogpt as nanogpt_ref
from tests.reference import raschka as raschka_ref
from tests.support.models import random_ids, unit_scale
from tests.support.small_configs import hf_gpt1_config

ATOL = 1e-4


def assert_same_logits(ours, reference, vocab: int, n_ctx: int) -> None:
    """Both forward passes in float64, on the weights the file holds: at unit scale, attention scores of about 60
    make float32's rounding alone differ by up to 3e-4 between two correct implementations (one scales q before
    q @ k.T, the other the scores after), while a wrong GELU, norm or mapping differs by far more than 1e-4."""
    ours, reference = ours.double(), reference.double()
    for ids in (random_ids(1, vocab=vocab, seed=1), random_ids(n_ctx, vocab=vocab, batch=2, seed=2)):
        ids = ids if ids.dim() == 2 else ids[None]
        with torch.no_grad():
            expected = reference(ids)[..., : ours.config.vocab_size]
            torch.testing.assert_close(ours(ids), expected, atol=ATOL, rtol=0)
    ours.float(), reference.float()


class HFLogits(torch.nn.Module):
    """A Hugging Face LM as a module that returns its logits."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, ids):
        return self.hf(ids).logits


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---- Hugging Face GPT-1 ---------------------------------------------------------------------------------------


def gpt1_folder(tmp_path, afn: str = "gelu", seed: int = 0):
    transformers = pytest.importorskip("transformers")
    cfg = hf_gpt1_config(120, 24, afn=afn)
    torch.manual_seed(seed)
    hf = unit_scale(transformers.OpenAIGPTLMHeadModel(cfg), seed)
    hf.save_pretrained(tmp_path / "gpt1")
    return hf, tmp_path / "gpt1"


@pytest.mark.slow
@pytest.mark.hf
@pytest.mark.parametrize("afn", ["gelu", "relu"])
def test_hf_gpt1_folder_matches_transformers(tmp_path, afn):
    hf, folder = gpt1_folder(tmp_path, afn)
    ours = load_pretrained(str(folder))
    cfg = ours.config
    assert (cfg.norm, cfg.final_norm, cfg.activation) == ("post", False, "gelu_tanh" if afn == "gelu" else "relu")
    assert total_params(cfg) == n_params(hf)
    assert_same_logits(ours, HFLogits(hf), 120, 24)


@pytest.mark.slow
@pytest.mark.hf
def test_hf_gpt1_with_gpt2s_wiring_would_differ(tmp_path):
    """The check has teeth: the same weights with a final norm, or pre-norm, give other logits."""
    hf, folder = gpt1_folder(tmp_path)
    ids = random_ids(12, vocab=120, seed=3)[None]
    with torch.no_grad():
        expected = hf(ids).logits
        assert not torch.allclose(load_pretrained(str(folder), norm="pre")(ids), expected, atol=1e-2)
    meta = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**meta, "afn": "silu"}))
    with pytest.raises(CheckpointError, match="afn 'silu' is not supported"):
        load_pretrained(str(folder))


@pytest.mark.slow
@pytest.mark.hf
def test_hf_gpt1_hub_repo_in_the_local_cache_loads_offline(tmp_path, hub_cache):
    """What load_pretrained("openai-gpt") reads once the Hub repo is cached: the same folder, by its Hub id."""
    import os
    import shutil

    hf, folder = gpt1_folder(tmp_path)
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub_cache / "models--openai-community--openai-gpt"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    for name in ("config.json", "model.safetensors"):
        blob = repo / "blobs" / f"blob-{name}"
        shutil.copy(folder / name, blob)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    ours = load_pretrained("openai-community/openai-gpt", offline=True)
    assert (ours.config.norm, ours.config.final_norm) == ("post", False)
    assert_same_logits(ours, HFLogits(hf), 120, 24)


# ---- nanoGPT --------------------------------------------------------------------------------------------------


def nanogpt_model(vocab: int = 101, bias: bool = True, flash: bool = True, seed: int = 0):
    cfg = nanogpt_ref.GPTConfig(block_size=24, vocab_size=vocab, n_layer=2, n_head=4, n_embd=32, bias=bias)
    return unit_scale(nanogpt_ref.GPT(cfg, flash=flash), seed)


@pytest.mark.parametrize(
    "bias, flash, compiled", [(True, True, False), (False, True, False), (True, False, True), (False, False, True)]
)
def test_nanogpt_ckpt_matches_its_forward(tmp_path, bias, flash, compiled):
    ref = nanogpt_model(bias=bias, flash=flash, seed=4)
    nanogpt_ref.save_ckpt(ref, tmp_path / "ckpt.pt", torch.optim.AdamW(ref.parameters()), compiled=compiled)
    ours = load_pretrained(str(tmp_path / "ckpt.pt"))
    assert (ours.config.bias, ours.config.qkv_bias, ours.config.activation) == (bias, bias, "gelu")
    assert total_params(ours.config) == n_params(ref)
    assert_same_logits(ours, ref, 101, 24)
    assert_same_logits(load_pretrained(str(tmp_path)), ref, 101, 24)  # the folder that holds it
    ids = random_ids(24, vocab=101, batch=2, seed=3)
    with torch.no_grad():  # and in float32, as the app runs it, within float32's rounding at this scale
        torch.testing.assert_close(ours(ids), ref(ids), atol=2e-3, rtol=1e-5)


@pytest.mark.slow
def test_nanogpt_padded_vocabulary_is_trimmed_to_gpt2s(tmp_path):
    ref = nanogpt_model(vocab=50304, bias=False, seed=5)
    nanogpt_ref.save_ckpt(ref, tmp_path / "ckpt.pt")
    ours = load_pretrained(str(tmp_path / "ckpt.pt"))
    assert ours.config.vocab_size == 50257 and ours.config.tie_weights
    assert total_params(ours.config) == n_params(ref) - (50304 - 50257) * 32  # the padding rows are not loaded
    assert_same_logits(ours, ref, 50257, 24)
    ids = random_ids(10, vocab=50257, seed=6)[None]
    with torch.no_grad():  # the probabilities are the reference's with the padding's logits masked out
        masked = ref(ids).masked_fill(torch.arange(50304) >= 50257, float("-inf")).softmax(-1)[..., :50257]
        torch.testing.assert_close(ours(ids).softmax(-1), masked, atol=1e-6, rtol=1e-4)


# ---- Raschka's GPTModel ---------------------------------------------------------------------------------------


def raschka_model(qkv_bias: bool, seed: int = 0, vocab: int = 101):
    cfg = {
        "vocab_size": vocab,
        "context_length": 24,
        "emb_dim": 32,
        "n_heads": 4,
        "n_layers": 2,
        "drop_rate": 0.0,
        "qkv_bias": qkv_bias,
    }
    torch.manual_seed(seed)
    return unit_scale(raschka_ref.GPTModel(cfg), seed), cfg


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_raschka_model_pth_matches_its_forward(tmp_path, qkv_bias):
    ref, cfg = raschka_model(qkv_bias, seed=7)
    torch.save(ref.state_dict(), tmp_path / "model.pth")
    ours = load_pretrained(str(tmp_path / "model.pth"), n_head=4)
    assert (ours.config.qkv_bias, ours.config.tie_weights, ours.config.activation) == (qkv_bias, False, "gelu_tanh")
    assert total_params(ours.config) == n_params(ref)
    assert_same_logits(ours, ref, 101, 24)


def test_raschka_model_and_optimizer_dict_loads_from_its_folder(tmp_path):
    ref, _ = raschka_model(True, seed=8)
    optimizer = torch.optim.AdamW(ref.parameters(), lr=4e-4, weight_decay=0.1)
    ref(random_ids(5)[None]).sum().backward()
    optimizer.step()
    torch.save(
        {"model_state_dict": ref.state_dict(), "optimizer_state_dict": optimizer.state_dict()},
        tmp_path / "model_and_optimizer.pth",
    )
    assert_same_logits(load_pretrained(str(tmp_path), n_head=4), ref, 101, 24)


def test_raschka_without_n_head_names_it_and_a_wrong_one_is_refused(tmp_path):
    ref, _ = raschka_model(False)
    torch.save(ref.state_dict(), tmp_path / "model.pth")
    with pytest.raises(CheckpointError, match=r"pass it as n_head, e\.g\. load_pretrained\(path, n_head=12\)"):
        load_pretrained(str(tmp_path / "model.pth"))
    with pytest.raises(CheckpointError, match=r"d_model \(32\) must be divisible by n_heads \(5\)"):
        load_pretrained(str(tmp_path / "model.pth"), n_head=5)
    # the wrong head count that divides loads a different model: the heads are not in the file
    with torch.no_grad():
        ids = random_ids(12, seed=9)[None]
        assert not torch.allclose(load_pretrained(str(tmp_path / "model.pth"), n_head=2)(ids), ref(ids), atol=1e-2)


# ---- llm.c ----------------------------------------------------------------------------------------------------


def llmc_model(vocab: int = 101, seed: int = 0):
    cfg = llmc_ref.GPTConfig(block_size=24, vocab_size=vocab, n_layer=2, n_head=4, n_embd=32)
    return unit_scale(llmc_ref.GPT(cfg), seed)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_llmc_bin_matches_its_forward(tmp_path, dtype):
    ref = llmc_model(seed=10)
    llmc_ref.write_model(ref, tmp_path / "gpt2_tiny.bin", dtype)
    ours = load_pretrained(str(tmp_path / "gpt2_tiny.bin"))
    assert ours.config.vocab_size == 101 and ours.config.activation == "gelu_tanh"
    assert total_params(ours.config) == n_params(ref)
    if dtype == "bfloat16":  # the reference with the weights the file holds
        with torch.no_grad():
            for p in ref.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    assert_same_logits(ours, ref, 101, 24)
    assert_same_logits(load_pretrained(str(tmp_path)), ref, 101, 24)


def test_llmc_padded_vocabulary_and_damaged_files(tmp_path):
    ref = llmc_model(vocab=300, seed=11)  # padded to 384 rows
    path = tmp_path / "model.bin"
    llmc_ref.write_model(ref, path)
    assert_same_logits(load_pretrained(str(path)), ref, 300, 24)
    data = path.read_bytes()
    path.write_bytes(data[:-8])
    with pytest.raises(CheckpointError, match="its header describes"):
        load_pretrained(str(path))
    header = torch.frombuffer(bytearray(data[:1024]), dtype=torch.int32).clone()
    header[1] = 1
    path.write_bytes(header.numpy().tobytes() + data[1024:])
    with pytest.raises(CheckpointError, match="version 1; gptviz reads versions 3"):
        load_pretrained(str(path))
    path.write_bytes(data[:100])
    with pytest.raises(CheckpointError, match="shorter than llm.c's 1,024-byte header"):
        load_pretrained(str(path))
