"""GPT-1's own tokenizer, read from a Hugging Face openai-gpt folder's vocab.json and merges.txt: the model's
tokenizer when such a folder is loaded (gptviz.model.formats.openai_gpt attaches it; tokenizer.tokenizer_for returns
it). Its ids equal transformers' OpenAIGPTTokenizer's, which the tests check; no transformers needed here."""

from __future__ import annotations

import functools
import json
import unicodedata
from pathlib import Path

TOKENIZER_FILES = ("vocab.json", "merges.txt")
_MAX_TOKENIZER_BYTES = 16 << 20  # openai-gpt's are 0.8 MB and 0.5 MB
END_OF_WORD = "</w>"


def _is_punctuation(ch: str) -> bool:
    """BERT's punctuation: ASCII's non-alphanumeric printable characters, and Unicode's P* categories."""
    cp = ord(ch)
    return (
        33 <= cp <= 47
        or 58 <= cp <= 64
        or 91 <= cp <= 96
        or 123 <= cp <= 126
        or unicodedata.category(ch).startswith("P")
    )


def _is_cjk(cp: int) -> bool:
    return any(
        lo <= cp <= hi
        for lo, hi in (
            (0x4E00, 0x9FFF),
            (0x3400, 0x4DBF),
            (0x20000, 0x2A6DF),
            (0x2A700, 0x2B73F),
            (0x2B740, 0x2B81F),
            (0x2B820, 0x2CEAF),
            (0xF900, 0xFAFF),
            (0x2F800, 0x2FA1F),
        )
    )


def _normalise(text: str) -> str:
    """BERT's normaliser as GPT-1's tokenizer sets it (lowercase): control characters out, whitespace as spaces,
    CJK ideographs spaced, accents stripped (NFD, marks dropped), lower case."""
    out = []
    for ch in text:
        if ch in ("\x00", "\ufffd"):
            continue
        if ch in " \t\n\r" or unicodedata.category(ch) == "Zs":
            out.append(" ")
        elif unicodedata.category(ch).startswith("C"):
            continue
        elif _is_cjk(ord(ch)):
            out.append(f" {ch} ")
        else:
            out.append(ch)
    text = unicodedata.normalize("NFD", "".join(out))
    return "".join(ch for ch in text if unicodedata.category(ch) != "Mn").lower()


def _words(text: str) -> list[str]:
    """BERT's pre-tokeniser: split at whitespace, and every punctuation character a word of its own."""
    words = []
    for chunk in text.split():
        word = ""
        for ch in chunk:
            if _is_punctuation(ch):
                words += [word, ch] if word else [ch]
                word = ""
            else:
                word += ch
        if word:
            words.append(word)
    return words


class OpenAIGPTTokenizer:
    """GPT-1's own BPE (40,478 ids) from a Hugging Face openai-gpt folder's vocab.json and merges.txt, in plain
    Python: what transformers' OpenAIGPTTokenizer does (BERT's lowercasing normaliser and pre-tokeniser, then BPE
    whose word-final pieces end in "</w>"; tests/model/test_gpt1_tokenizer.py compares the two). Needs no package."""

    name = "openai-gpt"

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], unk: str = "<unk>"):
        self.vocab, self.unk = vocab, vocab.get(unk)
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.pieces = {i: piece for piece, i in vocab.items()}
        self.n_vocab = max(vocab.values()) + 1 if vocab else 0
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_folder(cls, folder) -> OpenAIGPTTokenizer:
        """From a folder holding vocab.json and merges.txt (ValueError when they are missing or malformed)."""
        paths = [Path(folder) / name for name in TOKENIZER_FILES]
        if not all(p.is_file() and p.stat().st_size <= _MAX_TOKENIZER_BYTES for p in paths):
            raise ValueError("the folder has no GPT-1 vocab.json and merges.txt of a plausible size")
        try:
            vocab = json.loads(paths[0].read_text(encoding="utf-8"))
            lines = paths[1].read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"GPT-1's tokenizer files are unreadable: {err}") from None
        merges = [tuple(line.split()) for line in lines if line.strip() and not line.startswith("#version")]
        if (
            not isinstance(vocab, dict)
            or not all(isinstance(k, str) and isinstance(v, int) for k, v in vocab.items())
            or not all(len(m) == 2 for m in merges)
        ):
            raise ValueError("GPT-1's vocab.json or merges.txt is not in the Hugging Face layout")
        return cls(vocab, merges)

    def _bpe(self, word: str) -> list[int]:
        if word in self._cache:
            return self._cache[word]
        parts = list(word[:-1]) + [word[-1] + END_OF_WORD]
        while len(parts) > 1:
            ranked = [(self.ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(parts, parts[1:], strict=False))]
            best = min((r for r in ranked if r[0] is not None), default=None)
            if best is None:
                break
            pair, merged, i = (parts[best[1]], parts[best[1] + 1]), [], 0
            while i < len(parts):  # every occurrence of the pair, left to right
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        ids = [self.vocab.get(p, self.unk) for p in parts]
        ids = [i for i in ids if i is not None]  # no <unk> in the vocabulary: an unknown character is dropped
        if len(self._cache) < 100_000:
            self._cache[word] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        return [i for word in _words(_normalise(text)) for i in self._bpe(word)]

    def decode(self, ids) -> str:
        """The text (lower case, words spaced), as transformers' decoder writes it."""
        pieces = [self.pieces.get(int(i), "") for i in ids]
        return "".join(p.replace(END_OF_WORD, " ") for p in pieces[:-1]) + (
            pieces[-1].replace(END_OF_WORD, "") if pieces else ""
        )

    def decode_single_token_bytes(self, i) -> bytes:
        """One token's text as tiktoken's method of that name gives it, for labels: a word's last piece ends in a
        space ("the</w>" is b"the ", labelled "the␣"); KeyError for an id outside the vocabulary, as tiktoken's."""
        return self.pieces[int(i)].replace(END_OF_WORD, " ").encode("utf-8")

    def labels(self, ids) -> list[str]:
        """A display label per id: the piece, a word's last piece followed by a visible space ("the␣")."""
        return [self.pieces.get(int(i), "?").replace(END_OF_WORD, "␣") for i in ids]


def folder_tokenizer(folder) -> OpenAIGPTTokenizer | None:
    """GPT-1's tokenizer from a folder's vocab.json and merges.txt, parsed once per version of the files; None when
    the folder has neither file (ValueError when they are there but unreadable)."""
    paths = [Path(folder) / name for name in TOKENIZER_FILES]
    if not any(p.exists() for p in paths):
        return None
    try:
        stamp = tuple(p.stat().st_mtime_ns for p in paths)
    except OSError:
        raise ValueError("the folder has no GPT-1 vocab.json and merges.txt of a plausible size") from None
    return _parsed(str(Path(folder).resolve()), stamp)


@functools.lru_cache(maxsize=2)  # one parsed vocabulary (about 10 MB of Python objects) per GPT-1 folder version
def _parsed(folder: str, stamp: tuple) -> OpenAIGPTTokenizer:
    return OpenAIGPTTokenizer.from_folder(folder)
