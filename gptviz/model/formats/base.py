"""What every loader shares and checkpoint.py needs too: the one error type, and a pickle read that can run no code.

A `.pt`/`.pth`/`.bin` file is a pickle. It is read only with `torch.load(weights_only=True)`, which rebuilds tensors
and plain containers and refuses any other object before it is created, and memory-mapped, so that no tensor is
read until the loader has checked the sizes the file describes against the load limits.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import torch

from ..load_limits import load_limits


class CheckpointError(ValueError):
    """A checkpoint is missing, of an unknown layout, or corrupt; the message says what to do."""


NOT_PLAIN = (
    "holds Python objects other than tensors and plain data and was not loaded: gptviz reads only plain "
    "tensors, never pickled code ({detail}). Save the state dict with torch.save instead"
)


def read_pickle(path: Path):
    """The file's contents with torch.load(weights_only=True) on the CPU, memory-mapped where its format allows (a
    torch.save zip: nothing is read until used). CheckpointError for code, a corrupt file or an unmappable file
    past the parameter cap (the old non-zip format is read whole)."""

    def load():
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as err:
            if "mmap" not in str(err):
                raise
        most = load_limits().max_params
        if path.stat().st_size > 4 * most + (1 << 20):
            raise CheckpointError(
                f"{path.name} is in the old pickle format (not a torch.save zip) and larger than "
                f"{most:,} float32 parameters"
            )
        return torch.load(path, map_location="cpu", weights_only=True)

    return _read(path.name, load)


def read_pickle_meta(data: BinaryIO, what: str):
    """The contents of a pickle held in memory (an upload before it is written anywhere), with every tensor on the
    meta device: names, shapes and dtypes, no tensor data read or allocated. Refuses code as read_pickle does."""
    return _read(what, lambda: torch.load(data, map_location="meta", weights_only=True))


def _read(what: str, load: Callable[[], object]):
    """load(), with every way a pickle can fail as one CheckpointError naming `what` (a file name, never a path)."""
    try:
        return load()
    except CheckpointError:
        raise
    except pickle.UnpicklingError as err:  # weights_only refused something: a global (code), or not a pickle
        refused = _refused(err)
        if "global" not in refused:  # an opcode torch.save never writes, or not a pickle at all
            raise CheckpointError(f"{what} is corrupt or not a PyTorch file ({refused})") from None
        raise CheckpointError(f"{what} " + NOT_PLAIN.format(detail=refused)) from None
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, IndexError) as err:
        raise CheckpointError(f"{what} is corrupt or not a PyTorch file: {_first_line(err)}") from None


def _refused(err: Exception) -> str:
    """What weights_only refused ("Unsupported global: GLOBAL io.open"), without torch's advice to turn it off."""
    text = str(err)
    if "WeightsUnpickler error:" not in text:
        return _first_line(err)
    after = text.split("WeightsUnpickler error:", 1)[1].splitlines()
    detail = next((line.strip() for line in after if line.strip()), "")
    return detail.split(" was not an allowed", 1)[0][:200]


def _first_line(err: Exception) -> str:
    """The reason without torch's paragraphs of advice (which suggest weights_only=False) or a path: its first
    sentence ("...: not a ZIP archive", not the miniz advice after it)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text.split(". ", 1)[0][:200]


def hf_sizes(hf: dict, n_ctx: int) -> dict:
    """The GPTConfig fields a Hugging Face GPT-2 or GPT-1 config.json gives alike: the sizes (`n_ctx` where it names
    no context length), the tied head and the norms' epsilon. KeyError names a missing field."""
    return dict(
        vocab_size=hf["vocab_size"],
        n_ctx=hf.get("n_positions", hf.get("n_ctx", n_ctx)),
        d_model=hf["n_embd"],
        n_layers=hf["n_layer"],
        n_heads=hf["n_head"],
        tie_weights=hf.get("tie_word_embeddings", True),
        ln_eps=hf.get("layer_norm_epsilon", 1e-5),
    )


def hf_name(hf: dict, default: str) -> str:
    """A display name from config.json's _name_or_path: text only, short (it is shown on pages); else `default`."""
    value = hf.get("_name_or_path")
    return value[:100] if isinstance(value, str) and value.strip() else default


def strip_prefix(state: dict, prefix: str = "_orig_mod.") -> dict:
    """torch.compile's wrapper prefixes every name with `_orig_mod.`; the weights are the same."""
    return {k.removeprefix(prefix): v for k, v in state.items()}


def tensors_only(state, what: str) -> dict[str, torch.Tensor]:
    """A mapping of names to tensors, or a CheckpointError naming what it is instead."""
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise CheckpointError(f"{what} is not a state dict (a mapping of names to tensors); got {type(state).__name__}")
    return state


def check_shapes(shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]], what: str) -> None:
    """Every expected tensor present with its shape, and nothing else; names the first differences."""
    missing, unexpected = sorted(set(expected) - set(shapes)), sorted(set(shapes) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{what} does not match the model it describes: missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    for key, shape in shapes.items():
        if tuple(shape) != tuple(expected[key]):
            raise CheckpointError(
                f"{what}: {key} has shape {tuple(shape)}, the model it describes needs {tuple(expected[key])}"
            )
