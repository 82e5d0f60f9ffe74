"""Checkpoints: our own (safetensors + config.json), Hugging Face GPT-2 folders, and the bundled models.

Nothing is ever unpickled: safetensors, or `torch.load(weights_only=True)` for legacy `.bin` files.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .config import ConfigError, GPTConfig
from .model import GPT

FORMAT = "gptviz"
MODELS_DIR = Path(__file__).parent / "models"  # bundled, trained checkpoints (one folder each)
_HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                   "gelu": "gelu", "relu": "relu"}
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class CheckpointError(ValueError):
    """A checkpoint is missing, of an unknown layout, or corrupt; the message says what to do."""


def save_checkpoint(model: GPT, folder: str | os.PathLike, dtype: torch.dtype | None = None,
                    extra: dict | None = None) -> Path:
    """Write `model.safetensors` and `config.json` (with `format: gptviz`) into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", dtype or v.dtype).contiguous() for k, v in model.state_dict().items()
             if not (model.config.tie_weights and k == "lm_head.weight")}  # tied: stored once, as wte
    save_file(state, str(folder / "model.safetensors"), metadata={"format": FORMAT})
    meta = {"format": FORMAT, "config": model.config.to_dict(), **(extra or {})}
    (folder / "config.json").write_text(json.dumps(meta, indent=2))
    return folder


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path} is not a readable JSON config: {err}") from None


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    st, binary = folder / "model.safetensors", folder / "pytorch_model.bin"
    try:
        if st.exists():
            return load_file(str(st))
        if binary.exists():  # legacy format: tensors only, never arbitrary objects
            return _only_tensors(torch.load(binary, map_location="cpu", weights_only=True), binary)
    except CheckpointError:
        raise
    except (SafetensorError, OSError, RuntimeError, EOFError, ValueError) as err:
        name = st.name if st.exists() else binary.name
        raise CheckpointError(f"{folder / name} is corrupt or not a weights file: {err}") from None
    except Exception as err:  # weights_only's UnpicklingError: something other than plain tensors
        raise CheckpointError(f"{binary} holds more than tensors and was not loaded (only plain "
                              f"tensors are accepted, never pickled code): {err}") from None
    raise CheckpointError(f"{folder} has no model.safetensors or pytorch_model.bin")


def _only_tensors(loaded, path: Path) -> dict[str, torch.Tensor]:
    """weights_only=True still admits plain containers and numbers; a state dict is names -> tensors."""
    if not isinstance(loaded, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                               for k, v in loaded.items()):
        raise CheckpointError(f"{path} is not a state dict (a mapping of names to tensors); "
                              f"got {type(loaded).__name__}")
    return loaded


def config_from_hf(hf: dict) -> GPTConfig:
    """A GPTConfig from a Hugging Face GPT-2 `config.json` dict."""
    if hf.get("model_type") not in (None, "gpt2"):
        raise CheckpointError(f"model_type {hf.get('model_type')!r} is not GPT-2; gptviz loads GPT-2 "
                              f"checkpoints (gpt2, distilgpt2, gpt2-medium/large/xl and fine-tunes)")
    # GPT-2 variants whose attention we do not reproduce would load but give other logits: refuse them.
    for key, supported in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                           ("add_cross_attention", False)):
        if hf.get(key, supported) != supported:
            raise CheckpointError(f"{key}={hf[key]!r} is not supported (gptviz implements GPT-2's "
                                  f"attention with {key}={supported})")
    act = hf.get("activation_function", "gelu_new")
    if act not in _HF_ACTIVATIONS:
        raise CheckpointError(f"activation_function {act!r} is not supported")
    try:
        return GPTConfig(vocab_size=hf["vocab_size"], n_ctx=hf.get("n_positions", hf.get("n_ctx", 1024)),
                         d_model=hf["n_embd"], n_layers=hf["n_layer"], n_heads=hf["n_head"],
                         d_ff=hf.get("n_inner") or 4 * hf["n_embd"], norm="pre", activation=_HF_ACTIVATIONS[act],
                         tie_weights=hf.get("tie_word_embeddings", True), qkv_bias=True,
                         ln_eps=hf.get("layer_norm_epsilon", 1e-5), name=hf.get("_name_or_path") or "gpt2")
    except KeyError as err:
        raise CheckpointError(f"the GPT-2 config has no {err} field") from None


def state_from_hf(tensors: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Rename Hugging Face GPT-2 keys to ours and transpose its Conv1D matrices ([in, out] -> [out, in])."""
    state = {}
    for key, value in tensors.items():
        key = key.removeprefix("transformer.")
        if key.endswith((".attn.bias", ".attn.masked_bias")):  # causal-mask buffers, not weights
            continue
        key = key.replace("h.", "blocks.", 1) if key.startswith("h.") else key
        if key.endswith(_CONV1D):
            value = value.t()
        state[key] = value.contiguous()
    if config.tie_weights:
        state.pop("lm_head.weight", None)
    return state


def _load_state(model: GPT, state: dict[str, torch.Tensor], source: str) -> GPT:
    expected = {k for k in model.state_dict() if not (model.config.tie_weights and k == "lm_head.weight")}
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{source} does not match its config: missing {missing[:4]}, "
                              f"unexpected {unexpected[:4]}")
    own = model.state_dict()
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise CheckpointError(f"{source}: {key} has shape {tuple(value.shape)}, "
                                  f"the config implies {tuple(own[key].shape)}")
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return model.eval()


def load_checkpoint(folder: str | os.PathLike, norm: str | None = None) -> GPT:
    """Load a folder written by save_checkpoint, or a Hugging Face GPT-2 folder. `norm` overrides the
    LayerNorm placement (same weights, other wiring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder")
    if not (folder / "config.json").exists():
        raise CheckpointError(f"{folder} has no config.json")
    meta = _read_json(folder / "config.json")
    try:
        config = GPTConfig.from_dict(meta["config"]) if meta.get("format") == FORMAT else config_from_hf(meta)
    except ConfigError as err:
        raise CheckpointError(f"{folder / 'config.json'}: {err}") from None
    if norm is not None:
        try:
            config = config.replace(norm=norm)
        except ConfigError as err:
            raise CheckpointError(f"norm override: {err}") from None
    tensors = _read_tensors(folder)
    state = tensors if meta.get("format") == FORMAT else state_from_hf(tensors, config)
    return _load_state(GPT(config), state, str(folder))


TRAINING_VOCAB = "training_vocab.json"  # the ids that occur in a checkpoint's training text, beside it


def write_training_vocab(folder: str | os.PathLike, ids: torch.Tensor) -> None:
    """Record which ids the training text used (views that sample the vocabulary sample these)."""
    (Path(folder) / TRAINING_VOCAB).write_text(json.dumps(sorted(int(i) for i in torch.unique(ids))))


def training_vocab(folder: str | os.PathLike) -> torch.Tensor | None:
    """Sorted ids the checkpoint in `folder` was trained on, or None where that is not recorded."""
    path = Path(folder) / TRAINING_VOCAB
    if not path.is_file():
        return None
    ids = json.loads(path.read_text())
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise CheckpointError(f"{TRAINING_VOCAB} is not a list of token ids")
    return torch.tensor(ids, dtype=torch.long)


def bundled_models() -> dict[str, Path]:
    """Trained checkpoints shipped with gptviz, by name."""
    if not MODELS_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(MODELS_DIR.iterdir()) if (p / "config.json").exists()}


def load_pretrained(name_or_path: str, norm: str | None = None, offline: bool | None = None) -> GPT:
    """A GPT from: a bundled model's name; a local folder (ours or Hugging Face GPT-2 layout); or a Hugging
    Face Hub id such as "gpt2" or "distilgpt2", from the local cache or, when online, downloaded."""
    bundled = bundled_models()
    if name_or_path in bundled:
        return load_checkpoint(bundled[name_or_path], norm)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return load_checkpoint(path, norm)
    looks_like_path = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or path.suffix
    if looks_like_path or not name_or_path.strip():
        raise CheckpointError(f"{name_or_path!r} is not a folder holding a checkpoint (config.json plus "
                              f"model.safetensors), a bundled model ({', '.join(bundled) or 'none'}) or a Hub id")
    return load_checkpoint(_hub_folder(name_or_path, offline), norm)


def _hub_folder(repo_id: str, offline: bool | None) -> Path:
    """The local snapshot folder of a Hub repo: the cache first, then a download unless offline."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{repo_id!r} is not a bundled model or a local folder, and huggingface_hub is "
                              f"not installed to fetch it: `pip install huggingface_hub`, or pass a folder "
                              f"holding config.json and model.safetensors") from None
    patterns = ["config.json", "model.safetensors", "pytorch_model.bin"]
    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:  # not cached
        if offline:
            raise CheckpointError(_offline_message(repo_id)) from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as err:
        raise CheckpointError(f"could not download {repo_id!r} from the Hugging Face Hub ({type(err).__name__}). "
                              + _offline_message(repo_id)) from None


def _offline_message(repo_id: str) -> str:
    names = ", ".join(bundled_models()) or "none"
    return (f"{repo_id!r} is not in the local Hugging Face cache and the Hub cannot be reached. On a machine "
            f"with internet run `hf download {repo_id}` (or save_pretrained to a folder) and copy "
            f"the folder here, then pass its path. Bundled models that work offline: {names}.")
