"""Documents and the windows a scan runs over them."""
from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Document:
    """One document of a corpus (a play): its token ids and whether the bundled models were trained on it."""
    name: str
    ids: np.ndarray  # integer ids (int64 in memory, or IdsOnDisk: a tokenized corpus's int32 file)
    held_out: bool = False


def corpus_documents(folder=None, held_out: Sequence[str] | None = None) -> list[Document]:
    """A folder of plays (default: the complete works) as documents, one per file in `play_files` order, each the
    file's GPT-2 ids (no <|endoftext|>); `held_out` (default HELD_OUT_PLAYS) marks the plays the bundled models
    never trained on."""
    from ..training.corpus import HELD_OUT_PLAYS, WORKS, play_files, play_name
    from ..model.tokenizer import get_tokenizer
    held = set(HELD_OUT_PLAYS if held_out is None else held_out)
    enc = get_tokenizer()
    return [Document(play_name(p), np.asarray(enc.encode(p.read_text(encoding="utf-8")), dtype=np.int64),
                     play_name(p) in held) for p in play_files(WORKS if folder is None else folder)]


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
        crc = zlib.crc32(np.ascontiguousarray(ids[i:i + chunk], dtype=np.int64).tobytes(), crc)
    return crc


def token_counts(docs: Sequence[Document], vocab_size: int, chunk: int = 1 << 20) -> np.ndarray:
    """How often each id occurs in the documents, [vocab_size] int64, a chunk at a time."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for d in docs:
        for i in range(0, len(d.ids), chunk):
            part = np.asarray(d.ids[i:i + chunk])
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

TEXT_SUFFIXES = (".txt", ".text", ".md")
CHUNK_CHARS = 1 << 20  # a long text is tokenized a piece at a time, cut where the cut changes no token
SNIFF_BYTES = 8192     # a NUL byte in a file's first 8 KB marks it as binary (git's test)


def _read_text(path: Path, name: str) -> str:
    """A file's text, UTF-8 with undecodable bytes replaced. ValueError for a binary file (a NUL byte early on: an
    image, an archive, a compressed or UTF-16 file), which would otherwise be indexed as replacement characters."""
    with path.open("rb") as f:
        if b"\0" in f.read(SNIFF_BYTES):
            raise ValueError(f"{name!r} is not a UTF-8 text file (it holds NUL bytes: binary, compressed or UTF-16?)")
    return path.read_text(encoding="utf-8", errors="replace")


def corpus_texts(path, text_column: str = "text") -> Iterator[tuple[str, str]]:
    """(name, text) of every document of a corpus, streamed: a text file (one document), a folder (each text file
    below it one document, in sorted path order), a Parquet file or a JSON-lines file (each row one document, its
    `text_column`). ValueError for what cannot be read as one of these."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
        if not files:
            raise ValueError(f"the folder {path.name!r} holds no text files ({', '.join(TEXT_SUFFIXES)})")
        for p in files:
            relative = p.relative_to(path)
            yield relative.with_suffix("").as_posix(), _read_text(p, relative.as_posix())
    elif not path.is_file():
        raise ValueError(f"no corpus file or folder at {path.name!r}")
    elif path.suffix.lower() == ".parquet":
        yield from _parquet_texts(path, text_column)
    elif path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        yield from _jsonl_texts(path, text_column)
    else:
        yield path.stem, _read_text(path, path.name)


def _parquet_texts(path: Path, column: str) -> Iterator[tuple[str, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading Parquet needs pyarrow: pip install 'gptviz[corpus]'") from None
    try:
        reader = pq.ParquetFile(path)
    except Exception as err:  # pyarrow.ArrowInvalid and friends
        raise ValueError(f"{path.name!r} is not a readable Parquet file ({type(err).__name__})") from None
    if column not in reader.schema_arrow.names:
        raise ValueError(f"{path.name!r} has no column {column!r} (it has {', '.join(reader.schema_arrow.names)})")
    row = 0
    for batch in reader.iter_batches(batch_size=256, columns=[column]):
        for text in batch.column(0).to_pylist():
            row += 1
            if text is not None:
                yield f"row{row}", str(text)


def _jsonl_texts(path: Path, column: str) -> Iterator[tuple[str, str]]:
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"line {number} of {path.name!r} is not JSON") from None
            if not isinstance(record, dict) or column not in record:
                raise ValueError(f"line {number} of {path.name!r} has no {column!r} field")
            if record[column] is not None:
                yield f"line{number}", str(record[column])


def _pieces(text: str) -> Iterator[str]:
    """`text` in pieces of about CHUNK_CHARS, each cut after a newline that a non-space character follows: GPT-2's
    pre-tokenizer always splits there, so the pieces' tokens are the whole text's."""
    start = 0
    while len(text) - start > CHUNK_CHARS:
        cut = start + CHUNK_CHARS
        while cut < len(text) and not (text[cut - 1] == "\n" and not text[cut].isspace()):
            cut += 1
        yield text[start:cut]
        start = cut
    yield text[start:]


def tokenize_corpus(path, store: Path, *, text_column: str = "text", limit_tokens: int | None = None,
                    progress: Callable[[int, str], None] | None = None) -> list[Document]:
    """A corpus (see corpus_texts) as Documents whose ids live in `store`, an int32 file written as the texts stream
    by, and are read back a slice at a time (IdsOnDisk): memory does not grow with the corpus. Blank documents are skipped;
    `limit_tokens` stops after that many tokens (the last document cut short). `progress(tokens, name)` after each
    document."""
    from ..model.tokenizer import get_tokenizer
    enc = get_tokenizer()
    spans, total = [], 0
    with open(store, "wb") as out:
        for name, text in corpus_texts(path, text_column):
            if not text.strip():  # nothing but whitespace: no document
                continue
            length = 0
            for piece in _pieces(text):
                ids = np.asarray(enc.encode_ordinary(piece), dtype=np.int32)
                if limit_tokens is not None:
                    ids = ids[:max(0, limit_tokens - total - length)]
                out.write(ids.tobytes())
                length += len(ids)
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
        return self[i:i + 1][0]

    def __iter__(self):
        return iter(self[:])

    def __array__(self, dtype=None, copy=None):
        return self[:] if dtype is None else self[:].astype(dtype)

    def __reduce__(self):
        return np.asarray, (self[:],)
