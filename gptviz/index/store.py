"""An index in memory (NeuronIndex) and on disk (index.json + index.npz)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .atomic_write import atomic_file, atomic_write
from .constants import BAND_EXAMPLES, BANDS, FORMAT, INDEX_JSON, INDEX_NPZ, TOKEN_UNITS, VERSION
from .unit_ids import Unit, UnitLike, _as_unit, _flat, _unit_at


class IndexFormatError(ValueError):
    """An index folder is missing, corrupt, of another format version, or does not match what it describes."""


@dataclass
class NeuronIndex:
    """A scan's results: `meta` (JSON-able) and `arrays` (numpy, one row per unit unless said otherwise)."""

    meta: dict
    arrays: dict[str, np.ndarray]

    @property
    def n_layers(self) -> int:
        return self.meta["config"]["n_layers"]

    @property
    def d_ff(self) -> int:
        return self.meta["config"]["d_ff"]

    @property
    def n_heads(self) -> int:
        return self.meta["config"]["n_heads"]

    @property
    def n_neurons(self) -> int:
        return self.n_layers * self.d_ff

    @property
    def n_units(self) -> int:
        return self.n_neurons + self.n_layers * self.n_heads

    @property
    def documents(self) -> list[dict]:
        return self.meta["corpus"]["documents"]

    @property
    def tokens(self) -> int:
        return self.meta["corpus"]["tokens"]

    def unit(self, unit: UnitLike) -> Unit:
        return _as_unit(unit, self.n_layers, self.d_ff, self.n_heads)

    def flat(self, unit: UnitLike) -> int:
        return _flat(self.unit(unit), self.d_ff, self.n_heads, self.n_layers)

    def units(self) -> list[Unit]:
        return [_unit_at(i, self.n_layers, self.d_ff, self.n_heads) for i in range(self.n_units)]


def model_fingerprint(model) -> str:
    """sha256 of the model's config and weights (float32), to tell whether an index belongs to a model."""
    h = hashlib.sha256(json.dumps(_config_dict(model.config), sort_keys=True).encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def config_record(config) -> dict:
    """A model config as an index's meta records it (its "config"), JSON types included: equal to the meta's
    exactly when the index was built for a model of this shape."""
    return json.loads(json.dumps(_config_dict(config), sort_keys=True))


# Config fields added after indexes were first shipped, with the value every earlier model had: left out of the
# fingerprint at that value, so an index built before the field existed still belongs to its model.
LATER_FIELDS = {"bias": True, "final_norm": True}


def _config_dict(config) -> dict:
    import dataclasses

    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if not (f.name in LATER_FIELDS and getattr(config, f.name) == LATER_FIELDS[f.name])
    }


def _expected_shapes(meta: dict) -> dict[str, tuple[tuple, str]]:
    c = meta["config"]
    L, F, H = int(c["n_layers"]), int(c["d_ff"]), int(c["n_heads"])
    U, K, B = L * (F + H), int(meta["top_k"]), int(meta["bins"])
    Q, T, V = len(meta["quantile_levels"]), int(meta["top_tokens"]["k"]), int(meta["top_tokens"]["frequent_tokens"])
    return {
        "top_values": ((U, K), "f"),
        "top_doc": ((U, K), "i"),
        "top_pos": ((U, K), "i"),
        "hist_counts": ((U, B), "i"),
        "hist_range": ((U, 2), "f"),
        "min_max": ((U, 2), "f"),
        "value_range": ((U, 2), "f"),
        "mean": ((U,), "f"),
        "std": ((U,), "f"),
        "active_share": ((U,), "f"),
        "quantiles": ((U, Q), "f"),
        "top_token_ids": ((U, T), "i"),
        "top_token_mean": ((U, T), "f"),
        "token_ids": ((V,), "i"),
        "token_counts": ((V,), "i"),
        "token_neurons": ((V, min(TOKEN_UNITS, L * F)), "i"),
        "token_neuron_z": ((V, min(TOKEN_UNITS, L * F)), "f"),
        "token_heads": ((V, min(TOKEN_UNITS, L * H)), "i"),
        "token_head_z": ((V, min(TOKEN_UNITS, L * H)), "f"),
        "band_edges": ((U, BANDS + 1), "f"),
        "band_values": ((U, BANDS, BAND_EXAMPLES), "f"),
        "band_doc": ((U, BANDS, BAND_EXAMPLES), "i"),
        "band_pos": ((U, BANDS, BAND_EXAMPLES), "i"),
        "band_sampled": ((U, BANDS), "i"),
    }


def save_index(index: NeuronIndex, folder) -> Path:
    """Write index.json and index.npz (compressed) into `folder` (created); returns the folder."""
    _validate(index.meta, index.arrays)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # each file written whole under a temporary name, then renamed over the old one; index.json last, so a reader
    # never pairs a new index.json with arrays it does not describe (and _validate refuses a mismatched pair)
    with atomic_file(folder / INDEX_NPZ) as f:
        np.savez_compressed(f, **index.arrays)
    atomic_write(folder / INDEX_JSON, json.dumps(index.meta, indent=1) + "\n")
    return folder


def load_index(folder) -> NeuronIndex:
    """Read a folder written by save_index. IndexFormatError (a ValueError) when a file is missing or corrupt, of
    another format version, or its arrays' shapes disagree with its metadata. Never unpickles."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / INDEX_JSON).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(f"no {INDEX_JSON} in the index folder {folder.name!r}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise IndexFormatError(f"{INDEX_JSON} is not readable JSON ({type(err).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise IndexFormatError(f"{INDEX_JSON} is not a gptviz neuron index")
    if meta.get("version") != VERSION:
        raise IndexFormatError(stale_message(meta))
    try:
        with np.load(folder / INDEX_NPZ, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise IndexFormatError(f"no {INDEX_NPZ} in the index folder {folder.name!r}") from None
    except Exception as err:  # zipfile.BadZipFile, ValueError (pickled object), zlib.error, OSError, EOFError...
        raise IndexFormatError(f"{INDEX_NPZ} is corrupt ({type(err).__name__})") from None
    _validate(meta, arrays)
    return NeuronIndex(meta, arrays)


def stale_message(meta: dict) -> str:
    """Why an index of another format version is refused, and the command that builds it again."""
    version = meta.get("version")
    model = (meta.get("model") or {}).get("name") if isinstance(meta.get("model"), dict) else None
    corpus = meta.get("corpus") if isinstance(meta.get("corpus"), dict) else {}
    command = f"python -m gptviz index {model or 'MODEL'}"
    if corpus.get("path"):
        command += " --corpus CORPUS"
    new = " (version 3 adds examples from five bands of each unit's positive values)" if version in (1, 2) else ""
    return (
        f"index format version {version!r}; this gptviz reads version {VERSION}{new}: rebuild it with "
        f"`{command} --out FOLDER`"
    )


def _validate(meta: dict, arrays: dict[str, np.ndarray]) -> None:
    try:
        expected = _expected_shapes(meta)
        docs = meta["corpus"]["documents"]
        total = int(meta["corpus"]["tokens"])
        lengths = np.asarray([int(d["tokens"]) for d in docs] or [0])
    except (KeyError, TypeError, ValueError) as err:
        raise IndexFormatError(f"{INDEX_JSON} lacks or garbles a field ({type(err).__name__}: {err})") from None
    missing = sorted(set(expected) - set(arrays))
    if missing:
        raise IndexFormatError(f"{INDEX_NPZ} lacks {', '.join(missing)}")
    for name, (shape, kind) in expected.items():
        a = arrays[name]
        if a.shape != shape or a.dtype.kind != kind:
            raise IndexFormatError(
                f"{INDEX_NPZ}: {name} is {a.dtype}{list(a.shape)}, expected "
                f"{'float' if kind == 'f' else 'int'}{list(shape)} for the model in {INDEX_JSON}"
            )
    if total != int(lengths.sum()):
        raise IndexFormatError(f"{INDEX_JSON}: the documents' lengths do not add up to the tokens scanned")
    if (arrays["hist_counts"].astype(np.int64).sum(1) != total).any():
        raise IndexFormatError(f"{INDEX_NPZ}: a histogram's counts do not add up to the {total:,} tokens scanned")
    for what, doc, pos in (
        ("top", arrays["top_doc"], arrays["top_pos"]),
        ("band", arrays["band_doc"], arrays["band_pos"]),
    ):
        listed = doc >= 0
        if (
            (doc >= len(docs)).any()
            or (doc < -1).any()
            or (pos[listed] < 0).any()
            or (pos[listed] >= lengths[doc[listed]]).any()
        ):
            raise IndexFormatError(f"{INDEX_NPZ}: a {what} example lies outside its document")


# ---------------------------------------------------------------------------------------------------- shipped


def index_folder(model_name: str) -> Path:
    """Where a bundled model's shipped index lives: gptviz/bundled/<name>/index."""
    from ..model.weights import BUNDLED_DIR

    return BUNDLED_DIR / model_name / "index"


def bundled_index(model_name: str) -> NeuronIndex | None:
    """The shipped index of a bundled model, or None when it has none."""
    folder = index_folder(model_name)
    return load_index(folder) if (folder / INDEX_JSON).exists() else None


def index_matches(index: NeuronIndex, model) -> bool:
    """Whether `index` was built with exactly this model (config and weights) over its tokenizer's ids."""
    return index.meta["model"]["fingerprint"] == model_fingerprint(model) and index_mismatch(index, model) is None


def index_mismatch(index: NeuronIndex, model, weights: bool = False) -> str | None:
    """Why `index` is not this model's, in words (its tokenizer's ids are other words; with `weights`, also other
    weights), or None."""
    from ..model.tokenizer import tokenizer_for
    from .tokens import tokenizer_mismatch

    if weights and index.meta["model"]["fingerprint"] != model_fingerprint(model):
        return (
            "the index was built with other weights than this model's (their fingerprints differ): its "
            "examples would not be this model's"
        )
    return tokenizer_mismatch(index.meta, tokenizer_for(model))
