"""Documents and the windows a scan runs over them."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .texts import corpus_pieces


@dataclass(frozen=True)
class Document:
    """One document of a corpus (a play): its token ids and whether the bundled models were trained on it."""

    name: str
    ids: np.ndarray  # integer ids (int64 in memory, or IdsOnDisk: a tokenized corpus's int32 file)
    held_out: bool = False


def corpus_documents(
    folder=None, held_out: Sequence[str] | None = None, limit_tokens: int | None = None, enc=None
) -> list[Document]:
    """A folder of plays (default: the complete works) as documents, one per file in `play_files` order, each the
    file's ids in `enc` (default GPT-2's; no <|endoftext|>); `held_out` (default HELD_OUT_PLAYS) marks the plays
    the bundled models
    never trained on. `limit_tokens` stops after that many tokens (the last play cut short, the rest not read)."""
    from ..model.tokenizer import get_tokenizer
    from ..training.corpus import HELD_OUT_PLAYS, WORKS, play_files, play_name

    held = set(HELD_OUT_PLAYS if held_out is None else held_out)
    enc = enc or get_tokenizer()
    docs, total = [], 0
    for p in play_files(WORKS if folder is None else folder):
        if limit_tokens is not None and total >= limit_tokens:
            break
        ids = np.asarray(enc.encode(p.read_text(encoding="utf-8")), dtype=np.int64)
        if limit_tokens is not None:
            ids = ids[: limit_tokens - total]
        docs.append(Document(play_name(p), ids, play_name(p) in held))
        total += len(ids)
    return docs


def _as_documents(docs) -> list[Document]:
    """Documents from Documents or id sequences; integer arrays and a corpus file (IdsOnDisk) are kept as they are."""
    out = []
    for i, d in enumerate(docs):
        ids, name, held = (d.ids, d.name, d.held_out) if isinstance(d, Document) else (d, f"doc{i}", False)
        if not (isinstance(ids, IdsOnDisk) or isinstance(ids, np.ndarray) and ids.dtype.kind in "iu" and ids.ndim == 1):
            ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        out.append(Document(name, ids, held))
    return out


def _checksum(ids: np.ndarray, chunk: int = 1 << 20) -> int:
    """crc32 of the ids as int64 bytes, a chunk at a time (a memory-mapped document is never copied whole)."""
    crc = 0
    for i in range(0, len(ids), chunk):
        crc = zlib.crc32(np.ascontiguousarray(ids[i : i + chunk], dtype=np.int64).tobytes(), crc)
    return crc


def token_counts(docs: Sequence[Document], vocab_size: int, chunk: int = 1 << 20) -> np.ndarray:
    """How often each id occurs in the documents, [vocab_size] int64, a chunk at a time."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for d in docs:
        for i in range(0, len(d.ids), chunk):
            part = np.asarray(d.ids[i : i + chunk])
            if len(part) and (part.min() < 0 or part.max() >= vocab_size):
                raise ValueError(f"token ids must be in 0..{vocab_size - 1}")
            counts += np.bincount(part, minlength=vocab_size)
    return counts


def default_stride(n_ctx: int) -> int:
    return max(1, n_ctx - n_ctx // 4)


def scoring_window(pos: int, n_ctx: int, stride: int) -> int:
    """Where the scan scored position `pos` of a document: the start of its window (see the module docstring)."""
    return 0 if pos < n_ctx else ((pos - n_ctx) // stride + 1) * stride


def _windows(lengths: Sequence[int], n_ctx: int, stride: int) -> np.ndarray:
    """[n, 4] int64: document, start, length, first scored offset of every window, in corpus order."""
    rows = []
    for d, n in enumerate(lengths):
        k = 0
        while True:
            start = k * stride
            first = 0 if k == 0 else n_ctx - stride
            if k > 0 and start + first >= n:
                break
            rows.append((d, start, min(n_ctx, n - start), first))
            if start + n_ctx >= n:
                break
            k += 1
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4)


# ---------------------------------------------------------------------------------------------------- your corpus


def tokenize_corpus(
    path,
    store: Path,
    *,
    text_column: str = "text",
    limit_tokens: int | None = None,
    progress: Callable[[int, str], None] | None = None,
    on_skip: Callable[[str, str], None] | None = None,
    enc=None,
) -> list[Document]:
    """A corpus (see texts.corpus_pieces) as Documents whose ids live in `store`, an int32 file written as the texts
    stream by, and are read back a slice at a time (IdsOnDisk): memory does not grow with the corpus. Blank documents
    are skipped; `limit_tokens` stops reading after that many tokens (the last document cut short), so a huge file
    is read only that far. `progress(tokens, name)` after each document; `on_skip(name, why)` for each thing of a
    folder left out (a link out of it, a FIFO; default: a warning). `enc`: the tokenizer (default GPT-2's); the text
    is cut into pieces only where `enc`'s tokens of the pieces are the whole text's (gptviz.index.tokens)."""
    from ..model.tokenizer import get_tokenizer
    from .tokens import cut_pattern

    enc = enc or get_tokenizer()
    spans, total = [], 0
    documents = corpus_pieces(path, text_column, on_skip, cut_pattern(enc))
    with open(store, "wb") as out, closing(documents):
        for name, parts in documents:
            with closing(parts):
                length, blank = _write_ids(enc, parts, out, None if limit_tokens is None else limit_tokens - total)
            if blank:  # nothing but whitespace: no document
                out.seek(4 * total)
                out.truncate()
                continue
            if length:
                spans.append((name, total, length))
                total += length
            if progress is not None:
                progress(total, name)
            if limit_tokens is not None and total >= limit_tokens:
                break
    if not spans:
        raise ValueError("the corpus holds no text")
    file = open(store, "rb")  # shared by the documents; closed when the last of them goes
    return [Document(name, IdsOnDisk(file, start, length)) for name, start, length in spans]


def _write_ids(enc, parts, out, room: int | None) -> tuple[int, bool]:
    """Tokenize a document's pieces into `out`, at most `room` ids (None: all): (ids written, whether the document
    is blank). Stops reading once `room` is filled, unless all read so far is whitespace: a blank document is
    dropped whole, so whether this one is blank is read on (without tokenizing) until it is settled."""
    from .tokens import encode_ordinary

    length, blank = 0, True
    for piece in parts:
        blank = blank and not piece.strip()
        if room is not None and length >= room:
            if blank:
                continue
            break
        ids = encode_ordinary(enc, piece)
        if room is not None:
            ids = ids[: room - length]
        out.write(np.asarray(ids, dtype=np.int32).tobytes())
        length += len(ids)
    return length, blank


class IdsOnDisk:
    """A document's token ids in a corpus's int32 file, read a slice at a time with pread: nothing stays in memory
    or mapped, so a scan's memory does not grow with the corpus (a memory map's pages count as the process's own
    once read). The file may be unlinked once opened. Pickles (for Ray) as the plain array."""

    dtype = np.dtype(np.int32)
    ndim = 1

    def __init__(self, file, start: int, length: int):
        self.file, self.start, self.length = file, start, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self.length)
            data = os.pread(self.file.fileno(), 4 * max(0, stop - start), 4 * (self.start + start))
            return np.frombuffer(data, dtype=np.int32)[::step].copy()
        i = range(self.length)[key]
        return self[i : i + 1][0]

    def __iter__(self):
        return iter(self[:])

    def __array__(self, dtype=None, copy=None):
        return self[:] if dtype is None else self[:].astype(dtype)

    def __reduce__(self):
        return np.asarray, (self[:],)
