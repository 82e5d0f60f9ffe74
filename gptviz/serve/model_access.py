"""Which models a server's visitors may load: a bundled model's name, a Hub id, or a folder or checkpoint file inside
the server's model roots (the bundled models, the Hugging Face cache, and the folders its operator lists in
GPTVIZ_MODEL_DIRS). Anything else gets one message that echoes no path, so the answer says nothing about the rest of
the filesystem. The library's load_pretrained loads whatever its caller names; this is the server's policy on top."""

from __future__ import annotations

import os
from pathlib import Path

from ..model.model import GPT
from ..model.weights import (
    BUNDLED_DIR,
    CHECKPOINT_SUFFIXES,
    CheckpointError,
    bundled_models,
    checkpoint_file,
    hub_folder,
    load_checkpoint,
    looks_like_path,
    path_config,
)
from .limits import server_limits


def model_roots() -> list[Path]:
    """Where a server loads model folders from: the bundled models, the Hugging Face cache, and the folders its
    operator lists in GPTVIZ_MODEL_DIRS (separated by os.pathsep; limits.py reads it)."""
    try:
        from huggingface_hub import constants

        hub_cache = Path(constants.HF_HUB_CACHE)
    except ImportError:
        hub_cache = Path(os.environ.get("HF_HUB_CACHE", Path.home() / ".cache" / "huggingface" / "hub"))
    extra = [Path(p) for p in server_limits().model_dirs]
    return [BUNDLED_DIR, hub_cache, *extra]


FOLDER_REFUSED = (
    "No model folder of that name is available on this server. It loads folders and checkpoint files "
    "only from its model folders (the bundled models, the Hugging Face cache, and folders its operator "
    "lists in GPTVIZ_MODEL_DIRS). Give a bundled model's name, a Hub id such as gpt2, or such a folder."
)


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
    found = allowed_folder(name, roots) if looks_like_path(name) else None
    try:
        return path_config(found, n_head).norm if found is not None else None
    except (CheckpointError, OSError):
        return None


def load_allowed(
    name: str,
    norm: str | None = None,
    roots: list[Path] | None = None,
    offline: bool | None = None,
    n_head: int | None = None,
) -> GPT:
    """load_pretrained for a server's visitors: a bundled model's name, a Hub id, or a folder inside the allowed
    roots. Every refused folder gets the same message (FOLDER_REFUSED), which echoes no path."""
    return load_checkpoint(allowed_source(name, roots, offline), norm, n_head)


def allowed_source(name: str, roots: list[Path] | None = None, offline: bool | None = None) -> Path:
    """The folder a visitor's model name stands for: a bundled model, a folder inside the allowed roots, or a Hub
    repo (from the cache, else downloaded within the server's size budget after its config passed the checks)."""
    bundled = bundled_models()
    if name in bundled:
        return bundled[name]
    if looks_like_path(name) or not name.strip():
        folder = allowed_folder(name, roots)
        if folder is None:
            raise CheckpointError(FOLDER_REFUSED)
        return folder
    return hub_folder(name, offline, checked=True)
