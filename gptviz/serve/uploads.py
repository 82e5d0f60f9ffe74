"""Visitors' uploaded checkpoint files: one private folder per browser session under one server-wide temporary root,
each file checked before it is written, and every folder removed once its session is gone.

A file is checked from its bytes in memory (where Streamlit holds an upload) before anything is written: its size
against GPTVIZ_UPLOAD_MB, its name's suffix, then its format and the load limits (formats.check_file_bytes: llm.c's
header, or the pickle's structure with every tensor on the meta device, so no tensor is read or allocated). Only then
is it written, into `<root>/<session folder>/<upload token>/<file name>`; a ModelSpec names it as `<upload token>/<file
name>`, a name unique to this upload (the model cache's key), and only the session that uploaded it can turn that
name into a path (`path`): the root is never one of the server's model roots, and the session's folder is the only
root a lookup is allowed.

Streamlit has no hook for a session's end, so the folders are kept in a process-wide registry keyed by session id and
swept: on each new upload, and by a timer thread while any folder exists; `alive(session id)` decides (the app passes
Streamlit's own answer, as the training jobs use it). A session keeps one upload: a new one replaces the last.
"""

from __future__ import annotations

import atexit
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..model.config import GPTConfig
from ..model.weights import CHECKPOINT_SUFFIXES, CheckpointError, check_file_bytes
from .limits import LimitError
from .model_access import allowed_folder

UPLOADS_KEPT = 32  # sessions holding an upload at once: the disk they take is at most this x GPTVIZ_UPLOAD_MB
SWEEP_S = 30.0  # how often the timer looks for folders whose session has ended
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
GONE = "that upload is gone (its browser session ended, or a newer upload replaced it): upload the file again"
SUFFIXES_TEXT = ", ".join(CHECKPOINT_SUFFIXES)


class Upload(NamedTuple):
    """A visitor's checked, stored upload."""

    name: str  # "<upload token>/<file name>": what its ModelSpec names
    filename: str  # the file's name as stored and shown (the visitor's, where it was plain)
    size: int  # bytes
    config: GPTConfig  # what the file describes (one head where it cannot say: needs_n_head)
    needs_n_head: bool  # Raschka's GPTModel: the head count must be given


def stored_name(filename: str) -> str:
    """The name an upload is stored and shown under: the visitor's file name where it is plain (letters, digits,
    `.`, `_`, `-`; at most 100 characters), else "upload" with its suffix. CheckpointError for a suffix gptviz does
    not read."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    suffix = Path(base).suffix.lower()
    if suffix not in CHECKPOINT_SUFFIXES:
        raise CheckpointError(
            f"gptviz reads uploads ending in {SUFFIXES_TEXT}: nanoGPT's ckpt.pt, Raschka's "
            f"model.pth, llm.c's .bin. A Hugging Face or gptviz folder (config.json beside its "
            f"weights) is not one file: its server's operator can put it in a model folder"
        )
    base = base[: -len(suffix)] + suffix  # the suffix in lower case, as the loaders look for it
    return base if _SAFE_NAME.fullmatch(base) else "upload" + suffix


class UploadFolders:
    """The server's uploads, by session id. `alive(session id)`: whether that session is still connected;
    `on_removed(prefixes)`: told the uploads removed, each as `<upload token>/`, the start of its ModelSpec's name
    (the app drops their models and captures from its caches)."""

    def __init__(
        self,
        alive: Callable[[str], bool],
        on_removed: Callable[[list[str]], None] | None = None,
        kept: int = UPLOADS_KEPT,
        sweep_s: float = SWEEP_S,
        parent: str | None = None,
    ):
        self.alive, self.on_removed, self.kept, self.sweep_s, self.parent = alive, on_removed, kept, sweep_s, parent
        self._root: Path | None = None
        self._folders: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._timer: threading.Thread | None = None

    def root(self) -> Path:
        """The server-wide temporary root (made on first use, readable by the server's user only; removed at exit)."""
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="gptviz-uploads-", dir=self.parent))
                atexit.register(shutil.rmtree, self._root, True)
            return self._root

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._folders)

    def folder(self, session: str) -> Path | None:
        with self._lock:
            return self._folders.get(session)

    def save(
        self, session: str, data: BinaryIO, size: int, filename: str, cap: int, n_head: int | None = None
    ) -> Upload:
        """Check an upload held in memory, then write it into `session`'s folder in place of its last one. LimitError
        when uploads are off (`cap` 0), the file is past `cap` bytes or the server holds its most uploads;
        CheckpointError when the file is not a checkpoint gptviz reads or is past the load limits."""
        if cap <= 0:
            raise LimitError("this server takes no uploads (its operator set GPTVIZ_UPLOAD_MB to 0)")
        if size > cap:
            raise LimitError(
                f"the file is {size / 2**20:,.1f} MB; this server takes uploads of up to "
                f"{cap / 2**20:,.0f} MB (GPTVIZ_UPLOAD_MB)"
            )
        name = stored_name(filename)
        check = check_file_bytes(data, size, name, n_head)  # nothing written, no tensor allocated
        self.sweep()
        root = self.root()
        with self._lock:
            folder = self._folders.get(session)
            if folder is None:
                if len(self._folders) >= self.kept:
                    raise LimitError(
                        f"this server holds {self.kept} visitors' uploads already, its most; try again "
                        "in a few minutes, when some of their sessions have ended"
                    )
                folder = root / secrets.token_hex(16)
                folder.mkdir(mode=0o700)
                self._folders[session] = folder
            token = secrets.token_hex(8)
        try:
            (folder / token).mkdir(mode=0o700)
            data.seek(0)
            with open(folder / token / name, "xb") as out:
                shutil.copyfileobj(data, out, 1 << 20)
        except OSError:
            shutil.rmtree(folder / token, ignore_errors=True)
            raise LimitError("the server could not store the upload (its disk may be full); try again later") from None
        replaced = [p.name for p in folder.iterdir() if p.name != token]
        for old in replaced:
            shutil.rmtree(folder / old, ignore_errors=True)
        self._tell([f"{old}/" for old in replaced])
        self._start_timer()
        return Upload(f"{token}/{name}", name, size, check.config, check.needs_n_head)

    def path(self, session: str | None, name: str) -> Path:
        """The stored file `name` (an Upload's name) of `session`'s own folder, after resolving links and `..`;
        CheckpointError (GONE) for any other session's, a name outside the folder, or a file no longer there."""
        folder = self.folder(session) if session is not None else None
        found = allowed_folder(str(folder / name), roots=[folder]) if folder is not None else None
        if found is None or not found.is_file():
            raise CheckpointError(GONE)
        return found

    def remove(self, session: str) -> None:
        """Remove a session's folder now (its visitor removed the upload, or the session ended)."""
        with self._lock:
            folder = self._folders.pop(session, None)
        if folder is not None:
            names = [f"{p.name}/" for p in folder.iterdir()] if folder.is_dir() else []
            shutil.rmtree(folder, ignore_errors=True)
            self._tell(names)

    def sweep(self) -> list[str]:
        """Remove the folders of sessions that have ended; their session ids."""
        gone = [session for session in self.sessions() if not self.alive(session)]
        for session in gone:
            self.remove(session)
        return gone

    def _tell(self, prefixes: list[str]) -> None:
        if prefixes and self.on_removed is not None:
            self.on_removed(prefixes)

    def _start_timer(self) -> None:
        """A daemon thread that sweeps every `sweep_s` while any folder is left (started again by the next upload)."""

        def run() -> None:
            while True:
                time.sleep(self.sweep_s)
                self.sweep()
                with self._lock:
                    if not self._folders:
                        self._timer = None
                        return

        with self._lock:
            if self._timer is None:
                self._timer = threading.Thread(target=run, name="gptviz-upload-sweep", daemon=True)
                self._timer.start()
