"""Files gptviz writes (neuron indexes, their shards and merges) appear whole or not at all: a crash, a full disk
or a killed server mid-write leaves the previous version (or nothing), never a torn file that breaks a page for good.

Each write goes to a temporary name in the same folder (so the final rename never crosses a file system), is
flushed and fsync'ed, then os.replace'd over the target, which POSIX and Windows make atomic; the folder is
fsync'ed after, so the rename itself survives a power cut. A folder of files (a neuron index: index.json beside
index.npz) is written whole into a temporary folder and swapped in (`atomic_folder`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

TEMP_PREFIX = ".tmp-"  # temporary names start with this: a reader listing a folder can skip them


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where folders cannot be opened: Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """`with atomic_file(path) as f: f.write(...)`: `path` holds what was written once the block ends without an
    error; if it raises, `path` is untouched and the temporary file is removed."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_file writes a whole new file: mode 'w' or 'wb', got {mode!r}")
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding if mode == "w" else None) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def atomic_write(path, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write `data` (text is encoded) to `path` atomically; returns the path."""
    with atomic_file(path, "wb") as f:
        f.write(data.encode(encoding) if isinstance(data, str) else data)
    return Path(path)


@contextmanager
def atomic_folder(path) -> Iterator[Path]:
    """`with atomic_folder(dest) as tmp: write files into tmp`: when the block ends without an error, `dest` is
    replaced by the new folder whole (its files fsync'ed first); if it raises, `dest` is untouched and the
    temporary folder removed. An existing `dest` is moved aside, the new one renamed in, then the old removed:
    a reader sees the old folder or the new one, never a mix (between the two renames, none)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX + path.name + ".", dir=path.parent))
    try:
        yield tmp
        for file in tmp.iterdir():
            if file.is_file():
                with open(file, "rb") as f:
                    os.fsync(f.fileno())
        _fsync_dir(tmp)
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX + path.name + ".old.", dir=path.parent))
            os.replace(path, old / path.name)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old is not None:  # the new one could not go in: the old one goes back
                os.replace(old / path.name, path)
                shutil.rmtree(old, ignore_errors=True)
            raise
        _fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
