"""Your corpus's texts, read a bounded piece at a time: a text file, a folder of them, Parquet or JSON lines.

A document's text arrives as pieces of about CHUNK_CHARS characters, each cut where a cut changes no GPT-2 token
(`pieces`), so a tokenizer that stops after N tokens reads about N tokens' worth of the file, whatever its size or
its longest line. Only regular files are opened (a FIFO would block forever, a device never end), and a folder's
links that lead out of it are not followed.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from pathlib import Path

TEXT_SUFFIXES = (".txt", ".text", ".md")
CHUNK_CHARS = 1 << 20  # characters read (and tokenized) at a time
LONGEST_RUN = 1 << 22  # characters without a safe cut (below) before a piece is cut anyway
SNIFF_BYTES = 8192  # a NUL byte in a file's first 8 KB marks it as binary (git's test)
MAX_LINE_CHARS = 64 << 20  # a JSON line longer than this is refused (json.loads needs it whole)

# GPT-2's pre-tokenizer (tiktoken's r50k/gpt2 pattern; a test pins it to the tokenizer's). BPE runs within each of
# its matches, so a cut between two matches, where the matches before it do not depend on what follows, changes no
# token. _CUT marks the character before such a cut, with the one after it as lookahead:
# - a non-space character, then whitespace: no match takes whitespace after a non-space character, and the only
#   lookahead, `\s+(?!\S)`, ends on whitespace (a cut after whitespace is not safe: "a\n\n" + "B" gives \n\n as one
#   token where "a\n\nB" gives \n, \n);
# - ASCII letter, digit, punctuation: a change between two of these classes ends a run (` ?\p{L}+`, ` ?\p{N}+`,
#   ` ?[^\s\p{L}\p{N}]+`), except after ', which starts the contractions ('s, 'll) that run on into letters.
# Python's \S is narrower than Unicode's non-space (\x1c-\x1f count as space here), which only leaves cuts out.
PRE_TOKENIZER = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_PUNCT, _PUNCT_NOT_QUOTE = r"!-/:-@\[-`{-~", r"!-&(-/:-@\[-`{-~"
_CUT = re.compile(
    rf"\S(?=[ \t\n\r])|[A-Za-z](?=[0-9{_PUNCT}])|[0-9](?=[A-Za-z{_PUNCT}])"
    rf"|[{_PUNCT_NOT_QUOTE}](?=[A-Za-z0-9])"
)


def _last_cut(text: str, cut=None) -> int:
    """The last place where `text` may be cut (see _CUT; `cut`: another tokenizer's rule, gptviz.index.tokens), or 0
    where none is: searched from the end, in windows that grow, so a text with cuts near its end is not scanned
    whole."""
    cut = cut or _CUT
    size = 1 << 10
    while True:
        start = max(0, len(text) - size)
        last = deque(cut.finditer(text, start), maxlen=1)  # the last match, without keeping the others
        if last:
            return last[0].end()
        if start == 0:
            return 0
        size *= 16


def pieces(chunks: Iterable[str], cut=None) -> Iterator[str]:
    """The text of `chunks` again, cut only where GPT-2's tokens of the pieces are the whole text's (or those of the
    tokenizer whose rule `cut` is: gptviz.index.tokens.cut_pattern): what follows a chunk's last safe cut waits for
    the next chunk. A piece is at most LONGEST_RUN + a chunk's characters."""
    rule = cut
    carry = ""
    for chunk in chunks:
        text = carry + chunk
        cut = _last_cut(text, rule)
        if not cut and len(text) > LONGEST_RUN:
            # more than LONGEST_RUN characters with no safe cut (no whitespace and no ASCII class change: one
            # enormous word or run of symbols, or of whitespace): cut anyway, so that memory stays bounded. The
            # tokens at this cut may differ from the whole text's; no ordinary text gets here.
            cut = len(text)
        if cut:
            yield text[:cut]
        carry = text[cut:]
    if carry:
        yield carry


def _string_chunks(text: str) -> Iterator[str]:
    for i in range(0, len(text), CHUNK_CHARS):
        yield text[i : i + CHUNK_CHARS]


def _open_regular(path: Path, name: str):
    """`path` opened for reading in binary; ValueError for anything but a regular file. Opened without blocking
    and checked on the open file, so a FIFO put in a file's place after a listing cannot hang the read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise ValueError(f"cannot read {name!r} ({err.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{name!r} is not a regular file (a FIFO, socket or device): not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _text_file(path: Path, name: str, cut=None) -> Iterator[str]:
    """A file's text in pieces (see `pieces`), UTF-8 with undecodable bytes replaced and newlines as Path.read_text
    gives them (\\r\\n and \\r become \\n). ValueError for a binary file (a NUL byte early on: an image, an archive, a
    compressed or UTF-16 file), which would otherwise be indexed as replacement characters."""
    with _open_regular(path, name) as raw:
        if b"\0" in raw.read(SNIFF_BYTES):
            raise ValueError(f"{name!r} is not a UTF-8 text file (it holds NUL bytes: binary, compressed or UTF-16?)")
        raw.seek(0)
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as text:
            yield from pieces(iter(lambda: text.read(CHUNK_CHARS), ""), cut)


def _warn(name: str, why: str) -> None:
    warnings.warn(f"skipped {name}: {why}", stacklevel=2)


def folder_files(folder: Path, on_skip: Callable[[str, str], None] | None = None) -> list[Path]:
    """The text files below `folder`, in sorted path order. A link whose target lies outside the folder is not
    followed, nor are links to folders (rglob does not enter them); a FIFO, socket or device is never opened. Each
    thing skipped is passed to `on_skip(name, why)` (default: a warning)."""
    on_skip = on_skip or _warn
    root = folder.resolve()
    files = []
    for p in sorted(folder.rglob("*")):
        name = p.relative_to(folder).as_posix()
        try:
            target, mode = p.resolve(strict=True), p.stat().st_mode
        except (OSError, RuntimeError):  # a broken link, or a loop of links
            on_skip(name, "a broken link")
            continue
        if not target.is_relative_to(root):
            on_skip(name, "a link that leads out of the corpus folder")
        elif p.suffix.lower() not in TEXT_SUFFIXES or stat.S_ISDIR(mode):
            continue
        elif not stat.S_ISREG(mode):
            on_skip(name, "not a regular file (a FIFO, socket or device)")
        else:
            files.append(p)
    return files


def corpus_pieces(
    path, text_column: str = "text", on_skip: Callable[[str, str], None] | None = None, cut=None
) -> Iterator[tuple[str, Iterator[str]]]:
    """(name, pieces of its text) for every document of a corpus, streamed (cut by `cut`, see pieces): a text file
    (one document), a folder
    (each text file below it one document, in sorted path order; see folder_files), a Parquet file or a JSON-lines
    file (each row one document, its `text_column`). Each document's pieces must be read before the next document.
    ValueError for what cannot be read as one of these."""
    path = Path(path)
    if path.is_dir():
        files = folder_files(path, on_skip)
        if not files:
            raise ValueError(f"the folder {path.name!r} holds no text files ({', '.join(TEXT_SUFFIXES)})")
        for p in files:
            relative = p.relative_to(path)
            yield relative.with_suffix("").as_posix(), _text_file(p, relative.as_posix(), cut)
    elif not path.exists():
        raise ValueError(f"no corpus file or folder at {path.name!r}")
    elif path.suffix.lower() == ".parquet":
        for name, text in _parquet_texts(path, text_column):
            yield name, pieces(_string_chunks(text), cut)
    elif path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        for name, text in _jsonl_texts(path, text_column):
            yield name, pieces(_string_chunks(text), cut)
    else:
        yield path.stem, _text_file(path, path.name, cut)


def corpus_texts(
    path, text_column: str = "text", on_skip: Callable[[str, str], None] | None = None
) -> Iterator[tuple[str, str]]:
    """(name, text) of every document of a corpus (see corpus_pieces), each document's text whole."""
    for name, parts in corpus_pieces(path, text_column, on_skip):
        with closing(parts):
            yield name, "".join(parts)


def _parquet_texts(path: Path, column: str) -> Iterator[tuple[str, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            "reading Parquet needs pyarrow: pip install pyarrow (from a checkout: pip install '.[corpus]')"
        ) from None
    with _open_regular(path, path.name) as f:
        try:
            reader = pq.ParquetFile(f)
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
    with _open_regular(path, path.name) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as lines:
        number = 0
        while line := lines.readline(MAX_LINE_CHARS + 1):
            number += 1
            if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                raise ValueError(f"line {number} of {path.name!r} is longer than {MAX_LINE_CHARS:,} characters")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or column not in record:
                    raise ValueError(f"line {number} of {path.name!r} has no {column!r} field")
                text = None if record[column] is None else str(record[column])
            except json.JSONDecodeError:
                raise ValueError(f"line {number} of {path.name!r} is not JSON") from None
            except RecursionError:  # json.loads (or str of what it read) past Python's recursion limit
                raise ValueError(f"line {number} of {path.name!r} nests too deeply to read") from None
            if text is not None:
                yield f"line{number}", text
