"""The checkpoint format: our own (safetensors + config.json) and Hugging Face GPT-2 and GPT-1 folders, validated
against the load caps before anything is allocated, and the bundled models (gptviz/bundled/). Files of other formats
(nanoGPT, Raschka's GPTModel, llm.c) are formats/, reached through formats/load.py.

Nothing is ever unpickled: safetensors, or `torch.load(weights_only=True)` for legacy `.bin` files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from .config import ConfigError, GPTConfig
from .formats.base import CheckpointError, hf_name, hf_sizes, read_pickle, tensors_only
from .formats.openai_gpt import MODEL_TYPE as OPENAI_GPT
from .formats.openai_gpt import config_from_openai_gpt
from .formats.unsupported import unsupported_config
from .load_limits import MAX_CONFIG_BYTES, MAX_LOAD_LAYERS, load_limits
from .model import GPT
from .sizes import load_nbytes

FORMAT = "gptviz"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # the first present is read
BUNDLED_DIR = Path(__file__).parents[1] / "bundled"  # bundled, trained checkpoints (one folder each)
_HF_ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def check_load_limits(config: GPTConfig) -> None:
    """CheckpointError when a config is past the caps; counts by formula, allocating nothing."""
    from .params import param_count

    limits = load_limits()
    if config.n_layers > MAX_LOAD_LAYERS:
        raise CheckpointError(
            f"the config asks for {config.n_layers:,} layers; this server loads at most {MAX_LOAD_LAYERS}"
        )
    if config.n_ctx > limits.max_ctx:
        raise CheckpointError(
            f"the config asks for a context of {config.n_ctx:,} positions; this server loads "
            f"at most {limits.max_ctx:,} (GPTVIZ_MAX_LOAD_CTX)"
        )
    n = param_count(config)
    if n > limits.max_params:
        raise CheckpointError(
            f"the config describes {n:,} parameters; this server loads at most "
            f"{limits.max_params:,} (GPTVIZ_MAX_LOAD_PARAMS)"
        )


def admit(config: GPTConfig, norm: str | None = None, n_head: int | None = None) -> GPTConfig:
    """`config` with the LayerNorm placement overridden (`norm`), checked against the load limits: the step every
    format's config goes through. An `n_head` given for a file that records its own must agree with it."""
    if n_head is not None and n_head != config.n_heads:
        raise CheckpointError(f"n_head={n_head!r} was given, but the checkpoint records {config.n_heads} heads")
    if norm is not None:
        try:
            config = config.replace(norm=norm)
        except ConfigError as err:
            raise CheckpointError(f"norm override: {err}") from None
    check_load_limits(config)
    return config


def save_checkpoint(
    model: GPT, folder: str | os.PathLike, dtype: torch.dtype | None = None, extra: dict | None = None
) -> Path:
    """Write `model.safetensors` and `config.json` (with `format: gptviz`) into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().to("cpu", dtype or v.dtype).contiguous()
        for k, v in model.state_dict().items()
        if not (model.config.tie_weights and k == "lm_head.weight")
    }  # tied: stored once, as wte
    save_file(state, str(folder / "model.safetensors"), metadata={"format": FORMAT})
    meta = {"format": FORMAT, "config": model.config.to_dict(), **(extra or {})}
    (folder / "config.json").write_text(json.dumps(meta, indent=2))
    return folder


def _read_json(path: Path) -> dict:
    """config.json as a dict; CheckpointError for anything else (a FIFO or device is refused unread)."""
    if not path.is_file():
        raise CheckpointError(f"{path.name} is not a regular file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise CheckpointError(
            f"{path.name} is larger than {MAX_CONFIG_BYTES // 1024} KB; a config is a few hundred bytes"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise CheckpointError(f"{path.name} is not a readable JSON config: {err}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name} holds a JSON {type(data).__name__}, not an object of settings")
    return data


def _header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes from a safetensors file's header, without reading the tensors."""
    with safe_open(str(path), framework="pt") as f:
        return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}


def _check_shapes(shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]) -> None:
    missing, unexpected = sorted(set(expected) - set(shapes)), sorted(set(shapes) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"the weights do not match the config: missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    for key, shape in shapes.items():
        if shape != expected[key]:
            raise CheckpointError(f"{key} has shape {shape}, the config implies {expected[key]}")


def expected_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every stored tensor's shape for this config (tied LM head stored once), by formula (params.py; the same as
    a module tree on the meta device, tests/model/test_weights.py): building one took most of a cold start's model
    load."""
    from .params import _tensor_shapes

    return {k: shape for k, shape in _tensor_shapes(config) if not (config.tie_weights and k == "lm_head.weight")}


def _read_tensors(folder: Path, expected: dict[str, tuple[int, ...]], hf_layout: bool) -> dict[str, torch.Tensor]:
    """The weights, after their names and shapes (from the safetensors header, or a memory-mapped .bin) match
    `expected` (in our layout; Hugging Face names and Conv1D shapes are translated first)."""
    st, binary = folder / "model.safetensors", folder / "pytorch_model.bin"
    translate = (lambda shapes: _hf_shapes(shapes, expected)) if hf_layout else (lambda shapes: shapes)
    try:
        if st.exists():
            if not st.is_file():
                raise CheckpointError("model.safetensors is not a regular file")
            _check_shapes(translate(_header_shapes(st)), expected)
            return load_file(str(st))
        if binary.exists():  # legacy format: tensors only, never arbitrary objects
            if not binary.is_file():
                raise CheckpointError("pytorch_model.bin is not a regular file")
            loaded = tensors_only(_load_bin(binary), binary.name)  # weights_only still admits containers
            _check_shapes(translate({k: tuple(v.shape) for k, v in loaded.items()}), expected)
            return loaded
    except CheckpointError:
        raise
    except (SafetensorError, OSError, RuntimeError, EOFError, ValueError) as err:
        name = st.name if st.exists() else binary.name
        raise CheckpointError(f"{name} is corrupt or not a weights file: {err}") from None
    except Exception as err:  # weights_only's UnpicklingError: something other than plain tensors
        raise CheckpointError(
            f"{binary.name} holds more than tensors and was not loaded (only plain "
            f"tensors are accepted, never pickled code): {err}"
        ) from None
    raise CheckpointError("the folder has no model.safetensors or pytorch_model.bin")


def _load_bin(path: Path):
    """torch.load with weights_only, memory-mapped where the file's format allows (nothing is read until used)."""
    return read_pickle(path)


def config_from_hf(hf: dict) -> GPTConfig:
    """A GPTConfig from a Hugging Face GPT-2 (or GPT-1) `config.json` dict."""
    if not isinstance(hf, dict):
        raise CheckpointError(f"config.json holds a JSON {type(hf).__name__}, not an object of settings")
    refusal = unsupported_config(hf)
    if refusal:
        raise CheckpointError(refusal)
    if hf.get("model_type") == OPENAI_GPT:
        return config_from_openai_gpt(hf)
    try:
        return _config_from_hf(hf)
    except (TypeError, ConfigError) as err:  # a field of the wrong JSON type (a list for a name, ...)
        raise CheckpointError(f"config.json: {err}") from None


def _config_from_hf(hf: dict) -> GPTConfig:
    if hf.get("model_type") not in (None, "gpt2"):
        raise CheckpointError(
            f"model_type {hf.get('model_type')!r} is not GPT-2; gptviz loads GPT-2 "
            f"checkpoints (gpt2, distilgpt2, gpt2-medium/large/xl and fine-tunes)"
        )
    # GPT-2 variants whose attention we do not reproduce would load but give other logits: refuse them.
    for key, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if hf.get(key, supported) != supported:
            raise CheckpointError(
                f"{key}={hf[key]!r} is not supported (gptviz implements GPT-2's attention with {key}={supported})"
            )
    act = hf.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in _HF_ACTIVATIONS:
        raise CheckpointError(f"activation_function {act!r} is not supported")
    try:
        return GPTConfig(
            **hf_sizes(hf, n_ctx=1024),
            d_ff=hf.get("n_inner") or 4 * hf["n_embd"],
            norm="pre",
            activation=_HF_ACTIVATIONS[act],
            qkv_bias=True,
            name=hf_name(hf, "gpt2"),
        )
    except KeyError as err:
        raise CheckpointError(f"the GPT-2 config has no {err} field") from None


_GPT1_EMBEDDINGS = {"tokens_embed.": "wte.", "positions_embed.": "wpe."}  # GPT-1's names; its blocks are GPT-2's


def _our_key(hf_key: str) -> str | None:
    """Our name for a Hugging Face GPT-2 or GPT-1 tensor name; None for the causal-mask buffers (not weights)."""
    key = hf_key.removeprefix("transformer.")
    if key.endswith((".attn.bias", ".attn.masked_bias")):
        return None
    for theirs, ours in _GPT1_EMBEDDINGS.items():
        if key.startswith(theirs):
            return ours + key[len(theirs) :]
    return key.replace("h.", "blocks.", 1) if key.startswith("h.") else key


def _hf_shapes(shapes: dict[str, tuple[int, ...]], expected: dict) -> dict[str, tuple[int, ...]]:
    """Hugging Face names and shapes in our layout (Conv1D matrices transposed; a tied LM head dropped)."""
    ours = {}
    for key, shape in shapes.items():
        name = _our_key(key)
        if name is None or (name == "lm_head.weight" and name not in expected):
            continue
        ours[name] = tuple(reversed(shape)) if name.endswith(_CONV1D) else shape
    return ours


def state_from_hf(tensors: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Rename Hugging Face GPT-2 keys to ours and transpose its Conv1D matrices ([in, out] -> [out, in])."""
    state = {}
    for key, value in tensors.items():
        name = _our_key(key)
        if name is None:
            continue
        if name.endswith(_CONV1D):
            value = value.t()
        state[name] = value.contiguous()
    if config.tie_weights:
        state.pop("lm_head.weight", None)
    return state


def _load_state(model: GPT, state: dict[str, torch.Tensor], source: str) -> GPT:
    expected = {k for k in model.state_dict() if not (model.config.tie_weights and k == "lm_head.weight")}
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{source} does not match its config: missing {missing[:4]}, unexpected {unexpected[:4]}")
    own = model.state_dict()
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise CheckpointError(
                f"{source}: {key} has shape {tuple(value.shape)}, the config implies {tuple(own[key].shape)}"
            )
    model.load_state_dict(state, strict=False)  # copies convert float16 to the model's float32 in one pass
    return model.eval()


def read_config(folder: str | os.PathLike, norm: str | None = None) -> tuple[GPTConfig, bool]:
    """A checkpoint folder's config, validated and within the load caps, before any weight is read: (config,
    whether it is gptviz's own format rather than Hugging Face's). `norm` overrides the LayerNorm placement."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"the checkpoint's folder is not a folder ({folder.name!r})")
    if not (folder / "config.json").exists():
        raise CheckpointError(f"the checkpoint's folder ({folder.name!r}) has no config.json")
    meta = _read_json(folder / "config.json")
    ours = meta.get("format") == FORMAT
    if ours and not isinstance(meta.get("config"), dict):
        raise CheckpointError('config.json is a gptviz file without a "config" object')
    try:
        config = GPTConfig.from_dict(meta["config"]) if ours else config_from_hf(meta)
    except (ConfigError, TypeError) as err:
        raise CheckpointError(f"config.json: {err}") from None
    return admit(config, norm), ours


def load_checkpoint(folder: str | os.PathLike, norm: str | None = None) -> GPT:
    """Load a folder written by save_checkpoint, or a Hugging Face GPT-2 folder. `norm` overrides the
    LayerNorm placement (same weights, other wiring). Validates, then builds: config.json must describe a
    model within the caps, and the weights file's header must match it, before any weight is allocated."""
    config, ours = read_config(folder, norm)
    tensors = _read_tensors(Path(folder), expected_shapes(config), hf_layout=not ours)
    state = tensors if ours else state_from_hf(tensors, config)
    return _load_state(GPT(config, init="empty"), state, "the checkpoint")  # every weight is loaded next


def weights_nbytes(folder: str | os.PathLike) -> int:
    """What loading a checkpoint folder holds at its peak, before it is read: its weights file (read whole) beside
    the float32 model built from its config (gptviz.model.sizes.load_nbytes). 0 when the folder does not describe a
    loadable model (loading it then fails with its own message)."""
    try:
        config, _ = read_config(folder)
    except (CheckpointError, OSError):
        return 0
    files = [Path(folder) / name for name in WEIGHT_FILES]
    return load_nbytes(config, next((f.stat().st_size for f in files if f.is_file()), 0))


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
    if not BUNDLED_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(BUNDLED_DIR.iterdir()) if (p / "config.json").exists()}
