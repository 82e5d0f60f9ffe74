"""One entry for every checkpoint on disk: a folder with config.json (gptviz's own, Hugging Face GPT-2 or GPT-1), a
nanoGPT ckpt.pt, a Raschka GPTModel .pth, an llm.c .bin, or a folder holding one of those files. The format is read
from the file itself (llm.c's magic number; the pickle's structure and tensor names), never from its name."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..checkpoint import admit, load_checkpoint, read_config, weights_nbytes
from ..config import GPTConfig
from ..model import GPT
from ..sizes import load_nbytes
from . import llmc, nanogpt, openai_gpt, raschka
from .base import CheckpointError, read_pickle, read_pickle_meta
from .build import build
from .unsupported import SUPPORTED, unknown_layout, unsupported_keys

# Looked for, in this order, in a folder without config.json (llm.c's files go by any name: every .bin is tried)
CHECKPOINT_FILES = ("ckpt.pt", "model.pth", "model_and_optimizer.pth")
_GPT2_NAMES = ("transformer.h.0.attn.c_attn.weight", "h.0.attn.c_attn.weight", "blocks.0.attn.c_attn.weight")


def checkpoint_file(folder: Path) -> Path | None:
    """The checkpoint file a folder without config.json holds: a known name, else the one llm.c .bin in it."""
    for name in CHECKPOINT_FILES:
        if (folder / name).is_file():
            return folder / name
    bins = sorted(p for p in folder.glob("*.bin") if p.is_file() and llmc.is_llmc(p))
    return bins[0] if len(bins) == 1 else None


def raschka_config_heads(folder: Path) -> int | None:
    """n_heads from a config.json that is the book's GPT_CONFIG dict (emb_dim, n_heads, ...; saved beside
    model.pth with json.dump), else None. Such a folder is a Raschka checkpoint, not a Hugging Face one."""
    path = folder / "config.json"
    if not path.is_file() or path.stat().st_size > 1 << 16:
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None  # the folder loader reports it
    if isinstance(meta, dict) and {"emb_dim", "n_heads"} <= set(meta) and "model_type" not in meta:
        heads = meta["n_heads"]
        if not isinstance(heads, int) or isinstance(heads, bool):
            raise CheckpointError(f"config.json: n_heads must be a whole number, got {heads!r}")
        return heads
    return None


def _resolve(path: Path) -> Path:
    """The folder with config.json, or the checkpoint file, that `path` stands for."""
    if path.is_dir():
        if (path / "config.json").exists() and (raschka_config_heads(path) is None or checkpoint_file(path) is None):
            return path
        found = checkpoint_file(path)
        if found is None:
            raise CheckpointError(
                f"the checkpoint's folder ({path.name!r}) has no config.json and no checkpoint file "
                f"gptviz reads ({', '.join(CHECKPOINT_FILES)} or one llm.c .bin)"
            )
        return found
    if not path.is_file():
        raise CheckpointError(f"the checkpoint ({path.name!r}) is not a folder or a regular file")
    return path


def _describe(path: Path, n_head: int | None):
    """(config, a function building its state dict) for a checkpoint file; nothing past a header or a pickle's
    structure read (a torch.save zip is memory-mapped)."""
    if llmc.is_llmc(path):
        config, version, padded = llmc.config_of(path)
        return config, lambda c: llmc.state_of(path, c, version, padded)
    if path.suffix == ".safetensors":
        raise CheckpointError(f"{path.name} needs its config.json beside it: give the folder that holds both")
    return _describe_pickle(read_pickle(path), path.name, n_head)


def _describe_pickle(obj, what: str, n_head: int | None):
    """_describe for a pickle's contents (`what`: the file's name)."""
    if nanogpt.is_nanogpt(obj):
        return nanogpt.config_of(obj, what), lambda c: nanogpt.state_of(obj, c, what)
    state = raschka.model_state(obj)
    if isinstance(state, dict):
        refusal = unsupported_keys(k for k in state if isinstance(k, str))
        if refusal:
            raise CheckpointError(refusal)
        if raschka.is_raschka(state):
            return raschka.config_of(state, what, n_head), lambda c: raschka.state_of(state, c, what)
        if any(name in state or "_orig_mod." + name in state for name in _GPT2_NAMES):
            raise CheckpointError(
                f"{what} holds GPT-2-style weights without the sizes that go with them: give "
                f"nanoGPT's whole ckpt.pt (with model_args) or a folder with its config.json"
            )
    raise CheckpointError(unknown_layout(what))


class FileCheck(NamedTuple):
    """What an uploaded file describes: its config (with one head where the file cannot say: `needs_n_head`)."""

    config: GPTConfig
    needs_n_head: bool


def check_file_bytes(data: BinaryIO, size: int, what: str, n_head: int | None = None) -> FileCheck:
    """The config a checkpoint file held in memory describes (an upload, before it is written anywhere), checked
    against the load limits: llm.c's header (and the file's length against it), or the pickle's structure with every
    tensor on the meta device, so no tensor is read or allocated. A Raschka GPTModel without `n_head` is checked
    with one head (its sizes do not depend on the count) and says it needs one. CheckpointError otherwise."""
    data.seek(0)
    head = data.read(4 * llmc.HEADER_INTS)
    data.seek(0)
    if llmc.starts_llmc(head):
        config, version, padded = llmc.header_config(head, what)
        llmc.check_length(size, config, version, padded, what)
        return FileCheck(admit(config), False)
    obj = read_pickle_meta(data, what)
    missing = n_head is None and raschka.is_raschka(raschka.model_state(obj))
    config = _describe_pickle(obj, what, 1 if missing else n_head)[0]
    return FileCheck(admit(config, None, None if missing else n_head), missing)


def needs_n_head(path: str | os.PathLike) -> bool:
    """Whether a checkpoint file (or a folder holding one) is Raschka's GPTModel with no head count beside it (a
    GPT_CONFIG config.json), so that loading it needs n_head. Reads the pickle's structure only (memory-mapped)."""
    try:
        resolved = _resolve(Path(path))
        if resolved.is_dir() or llmc.is_llmc(resolved) or _heads(Path(path), None) is not None:
            return False
        return raschka.is_raschka(raschka.model_state(read_pickle(resolved)))
    except (CheckpointError, OSError):
        return False


def _heads(given: Path, n_head: int | None) -> int | None:
    """n_head as given, else from a GPT_CONFIG config.json beside the file (or in the folder) given."""
    if n_head is not None:
        return n_head
    folder = given if given.is_dir() else given.parent
    return raschka_config_heads(folder)


def load_path(path: str | os.PathLike, norm: str | None = None, n_head: int | None = None) -> GPT:
    """The model a checkpoint folder or file holds (see the module's docstring for the formats). `norm` overrides
    the LayerNorm placement; `n_head` is the head count for files that do not record it (Raschka's GPTModel)."""
    path, n_head = _resolve(Path(path)), _heads(Path(path), n_head)
    if path.is_dir():
        config = read_config(path)[0]
        if n_head is not None:
            admit(config, None, n_head)
        tokenizer = openai_gpt.model_tokenizer(path, config)  # checked before any weight is read
        model = load_checkpoint(path, norm)
        if tokenizer is not None:
            model.tokenizer = tokenizer  # every view reads the model's own ids (tokenizer_for)
        return model
    config, state_of = _describe(path, n_head)
    config = admit(config, norm, n_head)
    return build(config, state_of(config), path.name)


def path_config(path: str | os.PathLike, n_head: int | None = None) -> GPTConfig:
    """The config a checkpoint folder or file describes, checked against the limits, with no weight read."""
    path, n_head = _resolve(Path(path)), _heads(Path(path), n_head)
    if path.is_dir():
        return read_config(path)[0]
    return admit(_describe(path, n_head)[0], None, None)


def path_nbytes(path: str | os.PathLike, n_head: int | None = None) -> int:
    """What loading holds at its peak: for a file, the float32 model beside the tensors read from the file (at
    most as many bytes again: they are memory-mapped). 0 when it describes no loadable model (loading then fails
    with its own message)."""
    try:
        resolved = _resolve(Path(path))
        if resolved.is_dir():
            return weights_nbytes(resolved)
        return load_nbytes(path_config(resolved, n_head))
    except (CheckpointError, OSError):
        return 0


__all__ = [
    "SUPPORTED",
    "FileCheck",
    "check_file_bytes",
    "checkpoint_file",
    "load_path",
    "needs_n_head",
    "path_config",
    "path_nbytes",
]
