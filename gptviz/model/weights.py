"""Where a model comes from: a bundled model's name, a local folder, or a Hugging Face Hub id (load_pretrained); and
for a server's visitors, only folders inside its model roots (load_allowed). The checkpoint format is checkpoint.py,
Hub downloads hub.py; their names are importable from here too, the one place callers load weights from."""
from __future__ import annotations

import os
from pathlib import Path

from .checkpoint import (MODELS_DIR, TRAINING_VOCAB, CheckpointError, bundled_models, check_load_limits,  # noqa: F401
                         config_from_hf, expected_shapes, read_config, save_checkpoint, state_from_hf,
                         training_vocab, write_training_vocab)
from .formats.load import FileCheck, check_file_bytes, checkpoint_file, load_path, needs_n_head, path_config, path_nbytes  # noqa: F401
from .hub import fetch_checked, forget_download, hub_copy_on_disk, hub_download_budget, hub_folder  # noqa: F401
from ..serve.limits import server_limits
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


def model_roots() -> list[Path]:
    """Where a server loads model folders from: the bundled models, the Hugging Face cache, and the folders its
    operator lists in GPTVIZ_MODEL_DIRS (separated by os.pathsep; limits.py reads it)."""
    try:
        from huggingface_hub import constants
        hub_cache = Path(constants.HF_HUB_CACHE)
    except ImportError:
        hub_cache = Path(os.environ.get("HF_HUB_CACHE", Path.home() / ".cache" / "huggingface" / "hub"))
    extra = [Path(p) for p in server_limits().model_dirs]
    return [MODELS_DIR, hub_cache, *extra]


FOLDER_REFUSED = ("No model folder of that name is available on this server. It loads folders and checkpoint files "
                  "only from its model folders (the bundled models, the Hugging Face cache, and folders its operator "
                  "lists in GPTVIZ_MODEL_DIRS). Give a bundled model's name, a Hub id such as gpt2, or such a folder.")


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or bool(Path(name).suffix) or "\\" in name


CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")  # the files a visitor may name, besides folders


def _is_checkpoint(path: Path) -> bool:
    """A folder with config.json or one of the checkpoint files, or a checkpoint file itself."""
    if path.is_dir():
        return (path / "config.json").is_file() or checkpoint_file(path) is not None
    return path.is_file() and path.suffix in CHECKPOINT_SUFFIXES


def allowed_folder(name: str, roots: list[Path] | None = None) -> Path | None:
    """The checkpoint folder or file `name` names when it lies inside one of `roots` (default model_roots()), after
    resolving links and `..`; None otherwise, whatever the reason (missing, outside, unreadable, no config.json nor
    checkpoint file), so the answer says nothing about the rest of the filesystem. `~` is not expanded."""
    if "\x00" in name or not name.strip():
        return None
    try:
        path = Path(name)
        resolved = (path if path.is_absolute() else Path.cwd() / path).resolve()
        for root in roots if roots is not None else model_roots():
            root = root.resolve()
            if resolved.is_relative_to(root):
                return resolved if _is_checkpoint(resolved) else None
    except (OSError, RuntimeError, ValueError):
        return None
    return None


def trained_norm(name: str, roots: list[Path] | None = None, n_head: int | None = None) -> str | None:
    """The wiring ("pre" or "post") a visitor's folder or checkpoint file inside the allowed roots was trained with,
    read from its config or header without loading its weights; None where it cannot be read so (a bundled model, a
    Hub id, a refused or unreadable path)."""
    found = allowed_folder(name, roots) if _looks_like_path(name) else None
    try:
        return path_config(found, n_head).norm if found is not None else None
    except (CheckpointError, OSError):
        return None


def load_allowed(name: str, norm: str | None = None, roots: list[Path] | None = None,
                 offline: bool | None = None, n_head: int | None = None) -> GPT:
    """load_pretrained for a server's visitors: a bundled model's name, a Hub id, or a folder inside the allowed
    roots. Every refused folder gets the same message (FOLDER_REFUSED), which echoes no path."""
    return load_checkpoint(allowed_source(name, roots, offline), norm, n_head)


def allowed_source(name: str, roots: list[Path] | None = None, offline: bool | None = None) -> Path:
    """The folder a visitor's model name stands for: a bundled model, a folder inside the allowed roots, or a Hub
    repo (from the cache, else downloaded within the server's size budget after its config passed the checks)."""
    bundled = bundled_models()
    if name in bundled:
        return bundled[name]
    if _looks_like_path(name) or not name.strip():
        folder = allowed_folder(name, roots)
        if folder is None:
            raise CheckpointError(FOLDER_REFUSED)
        return folder
    return hub_folder(name, offline, checked=True)


def load_pretrained(name_or_path: str, norm: str | None = None, offline: bool | None = None,
                    n_head: int | None = None) -> GPT:
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
    if _looks_like_path(name_or_path) or not name_or_path.strip():
        raise CheckpointError(f"{name_or_path!r} is not a folder holding a checkpoint (config.json plus "
                              f"model.safetensors), a checkpoint file, a bundled model "
                              f"({', '.join(bundled) or 'none'}) or a Hub id")
    return load_checkpoint(hub_folder(name_or_path, offline), norm)
