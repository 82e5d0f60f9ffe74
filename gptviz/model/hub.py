"""Hugging Face Hub checkpoints: the local cache first, then a download; a visitor's download is sized from the
repo's metadata and its config checked against the load caps before a byte of weights comes (fetch_checked)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .checkpoint import WEIGHT_FILES, CheckpointError, bundled_models, read_config
from .load_limits import load_limits

HUB_CONFIG, HUB_WEIGHTS = "config.json", WEIGHT_FILES
VISITOR_DOWNLOADS = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "gptviz-visitors"


def hub_folder(repo_id: str, offline: bool | None, checked: bool = False) -> Path:
    """The local snapshot folder of a Hub repo: the cache first, then a download unless offline. `checked` (a
    visitor's request): the download is sized from the repo's metadata and its config validated before the weights
    come, into a folder of its own that is removed if anything fails (fetch_checked)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(
            f"{repo_id!r} is not a bundled model or a local folder, and huggingface_hub is "
            f"not installed to fetch it: `pip install huggingface_hub`, or pass a folder "
            f"holding config.json and model.safetensors"
        ) from None
    patterns = [HUB_CONFIG, *HUB_WEIGHTS]
    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:  # not cached
        if checked and (VISITOR_DOWNLOADS / _folder_name(repo_id) / HUB_CONFIG).is_file():
            return VISITOR_DOWNLOADS / _folder_name(repo_id)
        if offline:
            raise CheckpointError(_offline_message(repo_id)) from None
    if checked:
        return fetch_checked(repo_id, VISITOR_DOWNLOADS / _folder_name(repo_id))
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as err:
        raise CheckpointError(
            f"could not download {repo_id!r} from the Hugging Face Hub ({type(err).__name__}). "
            + _offline_message(repo_id)
        ) from None


def hub_copy_on_disk(repo_id: str) -> bool:
    """Whether a Hub repo's weights are on this machine already (the Hugging Face cache, or a visitor's kept
    download), so that loading it downloads nothing. Reads the disk only, never the network."""
    if (VISITOR_DOWNLOADS / _folder_name(repo_id) / HUB_CONFIG).is_file():
        return True
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in HUB_WEIGHTS)


def forget_download(folder: Path | None) -> None:
    """Remove a visitor's Hub download that failed to load (other folders are never touched)."""
    if folder is not None and VISITOR_DOWNLOADS in Path(folder).parents:
        shutil.rmtree(folder, ignore_errors=True)


def _folder_name(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def hub_download_budget() -> int:
    """The most bytes a visitor's Hub download may bring: the largest checkpoint the server loads in float32, and
    a megabyte for its config."""
    return load_limits().download_bytes


def fetch_checked(repo_id: str, folder: Path, budget: int | None = None) -> Path:
    """Download a Hub repo's config and weights into `folder`, checking before each step: the repo's metadata
    states its files' sizes and they fit `budget`; the config passes read_config; only then the weights. Anything
    failing removes `folder` (no half download is left on disk). CheckpointError names the repo, never a path."""
    from huggingface_hub import HfApi, hf_hub_download

    budget = hub_download_budget() if budget is None else budget
    try:
        info = HfApi().model_info(repo_id, files_metadata=True)
    except Exception as err:
        raise CheckpointError(
            f"could not read {repo_id!r} on the Hugging Face Hub ({type(err).__name__}). " + _offline_message(repo_id)
        ) from None
    sizes = {f.rfilename: f.size for f in info.siblings or [] if f.rfilename in (HUB_CONFIG, *HUB_WEIGHTS)}
    weights = next((name for name in HUB_WEIGHTS if name in sizes), None)
    if HUB_CONFIG not in sizes or weights is None:
        raise CheckpointError(f"{repo_id!r} has no config.json with model.safetensors or pytorch_model.bin")
    if sizes[HUB_CONFIG] is None or sizes[weights] is None:
        raise CheckpointError(f"{repo_id!r} does not state its files' sizes, so this server does not download it")
    total = sizes[HUB_CONFIG] + sizes[weights]
    if total > budget:
        raise CheckpointError(
            f"{repo_id!r} would download {total / 2**20:,.0f} MiB; this server downloads at most "
            f"{budget / 2**20:,.0f} MiB (GPTVIZ_MAX_LOAD_PARAMS in float32)"
        )
    try:
        for name in (HUB_CONFIG, weights):
            hf_hub_download(repo_id, name, local_dir=folder)
            if (folder / name).stat().st_size > sizes[name]:
                raise CheckpointError(f"{repo_id!r} sent more than its metadata stated for {name}")
            if name == HUB_CONFIG:
                read_config(folder)  # the caps, before a byte of weights
    except BaseException as err:
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(err, CheckpointError) or not isinstance(err, Exception):
            raise
        raise CheckpointError(
            f"could not download {repo_id!r} from the Hugging Face Hub ({type(err).__name__}). "
            + _offline_message(repo_id)
        ) from None
    return folder


def _offline_message(repo_id: str) -> str:
    names = ", ".join(bundled_models()) or "none"
    return (
        f"{repo_id!r} is not in the local Hugging Face cache and the Hub cannot be reached. On a machine "
        f"with internet run 'hf download {repo_id}' (or save_pretrained to a folder) and copy "
        f"the folder here, then pass its path. Bundled models that work offline: {names}."
    )
