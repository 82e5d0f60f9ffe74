"""GPT-2's byte-level BPE as a tiktoken Encoding built from the bundled file (never the network),
and readable display labels for tokens.

A model reads one tokenizer everywhere: `tokenizer_for(model)`, its own (GPT-1's BPE, attached when a Hugging Face
openai-gpt folder is loaded: gptviz.model.gpt1_tokenizer) or else GPT-2's. Every helper here takes that tokenizer
as `enc`; without one it is GPT-2's."""

from __future__ import annotations

import base64
import functools
import hashlib
from importlib import resources

import tiktoken

BPE_FILE = "r50k_base.tiktoken"
BPE_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
# GPT-2's pre-tokenisation pattern (tiktoken's r50k_base / gpt2).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"
EOT_ID = 50256


class GPT2Encoding(tiktoken.Encoding):
    """tiktoken's Encoding, except that text containing `<|endoftext|>` encodes as plain text by default
    (a user's prompt is text, not a control sequence) instead of raising."""

    def encode(self, text, *, allowed_special=frozenset(), disallowed_special=()):
        return super().encode(text, allowed_special=allowed_special, disallowed_special=disallowed_special)


def _load_ranks() -> dict[bytes, int]:
    data = resources.files("gptviz.assets").joinpath(BPE_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != BPE_SHA256:
        raise RuntimeError(
            f"the bundled BPE file {BPE_FILE} is corrupt (sha256 {digest}, expected {BPE_SHA256}); reinstall gptviz"
        )
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.lru_cache(maxsize=1)
def get_tokenizer() -> GPT2Encoding:
    """GPT-2's tokenizer (50,257 ids), identical to tiktoken.get_encoding("gpt2"), offline."""
    return GPT2Encoding(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=_load_ranks(),
        special_tokens={EOT: EOT_ID},
        explicit_n_vocab=50257,
    )


_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


@functools.lru_cache(maxsize=1 << 16)
def token_label(token_bytes: bytes) -> str:
    """A readable label for one token's bytes: spaces, newlines and tabs made visible, and bytes that are
    not whole UTF-8 characters (an emoji split across tokens) written as <0xF0> rather than '?'. Cached: each live
    frame labels the whole text again."""
    pieces = []
    i = 0
    while i < len(token_bytes):
        for size in (1, 2, 3, 4):  # the shortest valid UTF-8 character starting here
            try:
                char = token_bytes[i : i + size].decode("utf-8")
            except UnicodeDecodeError:
                continue
            pieces.append(_VISIBLE.get(char, char if char.isprintable() else f"U+{ord(char):04X}"))
            i += size
            break
        else:
            pieces.append(f"<0x{token_bytes[i]:02X}>")
            i += 1
    return "".join(pieces)


def tokenizer_for(model):
    """The tokenizer `model` reads (a GPT, or None): its own when its folder brought one, else GPT-2's. Every
    tokenizer has encode(text), decode(ids), decode_single_token_bytes(id), n_vocab and name."""
    return getattr(model, "tokenizer", None) or get_tokenizer()


def is_gpt2(enc) -> bool:
    """Whether `enc` is GPT-2's BPE (tiktoken's ids), which the bundled corpora and indexes are tokenized with."""
    return enc is None or isinstance(enc, tiktoken.Encoding)


def token_labels(ids, enc: tiktoken.Encoding | None = None) -> list[str]:
    """Display labels for a sequence of ids (may repeat; see position_labels to tell repeats apart)."""
    enc = enc or get_tokenizer()
    return [token_label(enc.decode_single_token_bytes(int(i))) for i in ids]


def position_labels(ids, enc: tiktoken.Encoding | None = None) -> list[str]:
    """Labels unique by position, e.g. '3:␣the', for axes and tables where repeated tokens must differ."""
    return [f"{i}:{label}" for i, label in enumerate(token_labels(ids, enc))]


def encode(text: str, enc=None) -> list[int]:
    return (enc or get_tokenizer()).encode(text)


def decode(ids, enc=None) -> str:
    return (enc or get_tokenizer()).decode([int(i) for i in ids])


def fit_vocabulary(ids: list[int], vocab_size: int) -> tuple[list[int], int]:
    """GPT-2's BPE ids made to fit a smaller vocabulary (the GPT-1 preset has 40,000 ids): every id past it
    becomes the last id. Returns the ids and how many were replaced."""
    last = vocab_size - 1
    return [i if i <= last else last for i in ids], sum(i > last for i in ids)
