"""llm.c's model checkpoints (`gpt2_124M.bin`, `model_00005000.bin`), as its train_gpt2.py `write_model` writes them.

A header of 256 little-endian int32: magic 20240326, version (3: float32 tensors, 5: bfloat16), max sequence length,
vocabulary size V, layers, heads, channels, padded vocabulary Vp. Then the tensors, each grouped by type across the
layers and in nn.Linear's [out, in] layout: wte (Vp rows, the padding zeros), wpe, ln_1 weights, ln_1 biases, c_attn
weights, c_attn biases, attention c_proj weights and biases, ln_2 weights and biases, c_fc weights and biases, MLP
c_proj weights and biases, ln_f weight and bias. The model is GPT-2: tanh GELU, tied LM head, LayerNorm eps 1e-5. The
padded rows are dropped (llm.c's own softmax covers the first V logits only). Nothing past the header is read before
the sizes it states have passed the load limits and match the file's length.
"""

from __future__ import annotations

import struct
from pathlib import Path

import torch

from ..config import GPTConfig
from .base import CheckpointError
from .build import make_config

MAGIC, HEADER_INTS = 20240326, 256
VERSIONS = {3: (torch.float32, 4), 5: (torch.bfloat16, 2)}


def is_llmc(path: Path) -> bool:
    """Whether the file starts with llm.c's magic number."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack("<i", head)[0] == MAGIC


def _header(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(4 * HEADER_INTS)


def starts_llmc(head: bytes) -> bool:
    """Whether these first bytes of a file are llm.c's magic number."""
    return len(head) >= 4 and struct.unpack("<i", head[:4])[0] == MAGIC


def config_of(path: Path) -> tuple[GPTConfig, int, int]:
    """(config, version, padded vocabulary) from the header alone."""
    return header_config(_header(path), path.name)


def header_config(data: bytes, what: str) -> tuple[GPTConfig, int, int]:
    """config_of from the header's bytes (a file's first 1,024 bytes, or an upload's before it is written)."""
    if len(data) < 4 * HEADER_INTS:
        raise CheckpointError(f"{what} is shorter than llm.c's 1,024-byte header")
    version, max_t, vocab, layers, heads, channels, padded = struct.unpack(f"<{HEADER_INTS}i", data[: 4 * HEADER_INTS])[
        1:8
    ]
    if version not in VERSIONS:
        raise CheckpointError(
            f"{what} is an llm.c checkpoint of version {version}; gptviz reads versions 3 "
            f"(float32) and 5 (bfloat16), what llm.c's train_gpt2.py writes"
        )
    if padded < vocab:
        raise CheckpointError(f"{what}: the padded vocabulary ({padded}) is smaller than the vocabulary ({vocab})")
    config = make_config(
        what,
        vocab_size=vocab,
        n_ctx=max_t,
        d_model=channels,
        n_layers=layers,
        n_heads=heads,
        activation="gelu_tanh",
        ln_eps=1e-5,
        name=f"{what} (llm.c)",
    )
    return config, version, padded


def _layout(c: GPTConfig, padded: int) -> list[tuple[str, tuple[int, ...]]]:
    """The tensors in file order: (our name, or a per-layer name with {} for the layer; shape), stacked over layers."""
    d, ff, L = c.d_model, c.d_ff, c.n_layers
    per_layer = [
        ("ln_1.weight", (d,)),
        ("ln_1.bias", (d,)),
        ("attn.c_attn.weight", (3 * d, d)),
        ("attn.c_attn.bias", (3 * d,)),
        ("attn.c_proj.weight", (d, d)),
        ("attn.c_proj.bias", (d,)),
        ("ln_2.weight", (d,)),
        ("ln_2.bias", (d,)),
        ("mlp.c_fc.weight", (ff, d)),
        ("mlp.c_fc.bias", (ff,)),
        ("mlp.c_proj.weight", (d, ff)),
        ("mlp.c_proj.bias", (d,)),
    ]
    return (
        [("wte.weight", (padded, d)), ("wpe.weight", (c.n_ctx, d))]
        + [("blocks.{}." + name, (L, *shape)) for name, shape in per_layer]
        + [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def check_length(actual: int, config: GPTConfig, version: int, padded: int, what: str) -> None:
    """CheckpointError unless a file of `actual` bytes is exactly the header and the tensors the header describes."""
    expected = 4 * HEADER_INTS + VERSIONS[version][1] * sum(_numel(shape) for _, shape in _layout(config, padded))
    if actual != expected:
        raise CheckpointError(
            f"{what} holds {actual:,} bytes; its header describes {expected:,} (truncated, or "
            f"not an llm.c model file: its state files, with optimizer moments, are not models)"
        )


def state_of(path: Path, config: GPTConfig, version: int, padded: int) -> dict[str, torch.Tensor]:
    """The tensors, memory-mapped (read as they are copied into the model), after the file's length matches."""
    dtype, size = VERSIONS[version]
    layout = _layout(config, padded)
    actual = path.stat().st_size
    check_length(actual, config, version, padded, path.name)
    flat = torch.from_file(str(path), shared=False, size=actual // size, dtype=dtype)[4 * HEADER_INTS // size :]
    state, start = {}, 0
    for name, shape in layout:
        tensor = flat[start : start + _numel(shape)].view(shape)
        start += _numel(shape)
        if "{}" in name:
            state |= {name.format(i): tensor[i] for i in range(config.n_layers)}
        else:
            state[name] = tensor
    state["wte.weight"] = state["wte.weight"][: config.vocab_size]
    return state
