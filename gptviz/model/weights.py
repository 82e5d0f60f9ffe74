"""Where a model comes from: a bundled model's name, a local folder or checkpoint file, or a Hugging Face Hub id
(load_pretrained). The checkpoint format is checkpoint.py, Hub downloads hub.py; their names are importable from here
too, the one place callers load weights from. What a server's visitors may name is the server's rule
(gptviz.serve.model_access)."""

from __future__ import annotations

import os
from pathlib import Path

from .checkpoint import (  # noqa: F401
    BUNDLED_DIR,
    TRAINING_VOCAB,
    CheckpointError,
    bundled_models,
    check_load_limits,
    config_from_hf,
    expected_shapes,
    read_config,
    save_checkpoint,
    state_from_hf,
    training_vocab,
    write_training_vocab,
)
from .formats.load import (  # noqa: F401
    FileCheck,
    check_file_bytes,
    checkpoint_file,
    load_path,
    needs_n_head,
    path_config,
    path_nbytes,
)
from .hub import fetch_checked, forget_download, hub_copy_on_disk, hub_download_budget, hub_folder  # noqa: F401
from .model import GPT


def load_checkpoint(path: str | os.PathLike, norm: str | None = None, n_head: int | None = None) -> GPT:
    """The model in a checkpoint folder (ours, Hugging Face GPT-2 or GPT-1) or file (nanoGPT, Raschka's GPTModel
    with its config.json beside it or `n_head`, llm.c), or a folder holding such a file; validated before it is
    built. `norm` overrides the LayerNorm placement (same weights, other wiring)."""
    return load_path(path, norm, n_head)


def weights_nbytes(path: str | os.PathLike, n_head: int | None = None) -> int:
    """What loading a checkpoint folder or file holds at its peak, before it is read; 0 when it describes no
    loadable model (loading it then fails with its own message)."""
    return path_nbytes(path, n_head)


def looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or bool(Path(name).suffix) or "\\" in name


CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")  # the files a visitor may name, besides folders


def load_pretrained(
    name_or_path: str, norm: str | None = None, offline: bool | None = None, n_head: int | None = None
) -> GPT:
    """A GPT from: a bundled model's name; a local folder (ours, Hugging Face GPT-2 or GPT-1) or checkpoint file
    (nanoGPT's ckpt.pt, Raschka's GPTModel .pth, llm.c's .bin), or a folder holding one; or a Hugging Face Hub id such
    as "gpt2" or "openai-gpt", from the local cache or, when online, downloaded. `norm` overrides the LayerNorm
    placement; `n_head` is the head count for a file that does not record it (Raschka's GPTModel)."""
    bundled = bundled_models()
    if name_or_path in bundled:
        return load_checkpoint(bundled[name_or_path], norm)
    path = Path(name_or_path).expanduser()
    if path.is_dir() or path.is_file():
        return load_path(path, norm, n_head)
    if looks_like_path(name_or_path) or not name_or_path.strip():
        raise CheckpointError(
            f"{name_or_path!r} is not a folder holding a checkpoint (config.json plus "
            f"model.safetensors), a checkpoint file, a bundled model "
            f"({', '.join(bundled) or 'none'}) or a Hub id"
        )
    return load_checkpoint(hub_folder(name_or_path, offline), norm)
