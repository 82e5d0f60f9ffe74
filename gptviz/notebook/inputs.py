"""What people already hold, as one array of attention weights [layers, heads, T, T] and a label per token.

Accepted: a gptviz capture (ActivationCache), a TransformerLens ActivationCache (or any mapping with
`blocks.{i}.attn.hook_pattern` keys), Hugging Face's `output_attentions=True` tuple (one [batch, heads, T, T] per
layer), or plain tensors / arrays: [layers, heads, T, T], [layers, batch, heads, T, T] or one layer [heads, T, T].
Tokens: strings (TransformerLens's to_str_tokens, a tokenizer's convert_ids_to_tokens), or GPT-2 ids (labelled with
gptviz's tokenizer). Everything stays data: labels are drawn as text, never parsed as HTML.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

_PATTERN_KEY = re.compile(r"^blocks\.(\d+)\.attn\.hook_pattern$")
# the app's marks for invisible characters (tokenizer.token_label), for tokens given as strings
_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})
# Hugging Face's byte-level spellings of a space and a newline (GPT-2's "Ġthe", "Ċ")
_HF_BYTE_LEVEL = str.maketrans({"Ġ": " ", "Ċ": "\n", "ĉ": "\t"})


def _numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor (no torch import needed for numpy input)
        x = x.detach().to("cpu").float().numpy()
    return np.asarray(x, dtype=np.float32)


def patterns_of(source, batch: int = 0) -> np.ndarray:
    """[layers, heads, T, T] float32 attention weights from any accepted source; `batch` picks one sequence."""
    if isinstance(source, Mapping) or (hasattr(source, "keys") and hasattr(source, "__getitem__")):
        keys = sorted((int(m.group(1)), k) for k in source.keys() if (m := _PATTERN_KEY.match(str(k))))
        if not keys:
            raise ValueError(
                "this cache holds no attention patterns (no blocks.{i}.attn.hook_pattern): capture "
                "them, e.g. capture(model, ids) or model.run_with_cache(tokens)"
            )
        layers = [i for i, _ in keys]
        if layers != list(range(len(layers))):
            raise ValueError(f"the cache has the patterns of layers {layers}, not of every layer from 0")
        return _one_sequence(np.stack([_numpy(source[k]) for _, k in keys]), batch)
    if isinstance(source, (tuple, list)):
        if not source:
            raise ValueError("no attention layers given (an empty tuple)")
        return _one_sequence(np.stack([_numpy(layer) for layer in source]), batch)
    return _one_sequence(_numpy(source), batch)


def _one_sequence(p: np.ndarray, batch: int) -> np.ndarray:
    if p.ndim == 3:  # one layer: [heads, T, T]
        p = p[None]
    if p.ndim == 5:  # [layers, batch, heads, T, T]
        if not 0 <= batch < p.shape[1]:
            raise ValueError(f"batch {batch} is not in 0..{p.shape[1] - 1}")
        p = p[:, batch]
    if p.ndim != 4 or p.shape[-1] != p.shape[-2]:
        raise ValueError(
            f"attention weights must be [layers, heads, T, T] (or with a batch axis after layers, or "
            f"one layer's [heads, T, T]); got shape {tuple(p.shape)}"
        )
    if not np.all(np.isfinite(p)):
        raise ValueError(
            "the attention weights hold NaN or infinite values; pass the pattern (softmax), not the scores"
        )
    if p.min() < -1e-4 or p.max() > 1 + 1e-4:
        raise ValueError(
            f"attention weights must be in [0, 1] (a softmax); these run from {p.min():.3g} to "
            f"{p.max():.3g}: pass hook_pattern, not hook_attn_scores"
        )
    return p


def labels_of(tokens, T: int) -> list[str]:
    """One display label per token: strings with spaces and newlines made visible, or GPT-2 ids decoded by gptviz's
    tokenizer; None gives the positions."""
    if tokens is None:
        return [str(i) for i in range(T)]
    if hasattr(tokens, "tolist"):
        tokens = tokens.tolist()
    if isinstance(tokens, str):
        raise ValueError("tokens must be one string per token (e.g. model.to_str_tokens(text)), not one string")
    tokens = list(tokens)
    if len(tokens) == 1 and isinstance(tokens[0], (list, tuple)):  # a batch of one
        tokens = list(tokens[0])
    if len(tokens) != T:
        raise ValueError(f"{len(tokens)} tokens for attention over {T} positions")
    if all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in tokens):
        from ..model.tokenizer import get_tokenizer, token_labels

        n = get_tokenizer().n_vocab
        bad = [t for t in tokens if not 0 <= t < n]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside GPT-2's vocabulary; pass the tokens as strings")
        return token_labels(tokens)
    if not all(isinstance(t, str) for t in tokens):
        raise ValueError("tokens must be all strings or all GPT-2 token ids")
    byte_level = any(t.startswith("Ġ") for t in tokens)  # Hugging Face's convert_ids_to_tokens spelling
    return [(t.translate(_HF_BYTE_LEVEL) if byte_level else t).translate(_VISIBLE) for t in tokens]


def attention_data(source, tokens=None, batch: int = 0) -> tuple[np.ndarray, list[str]]:
    """(patterns [layers, heads, T, T], labels) from any accepted source and its tokens."""
    p = patterns_of(source, batch)
    return p, labels_of(tokens, p.shape[-1])


__all__ = ["attention_data", "patterns_of", "labels_of"]
