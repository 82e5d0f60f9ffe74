"""Neuron indexes for the unit page: the shipped index of a bundled model, or one built on request and kept on
disk per model, each loaded once per process (bounded by GPTVIZ_INDEX_CACHE_MB) with its corpus documents.

A build is bounded by the server's limits (gptviz.serve.limits): the tokens it scans (GPTVIZ_INDEX_TOKENS), its memory,
estimated before it starts (GPTVIZ_INDEX_MB), scans at once on the server (GPTVIZ_INDEX_BUILDS), and one at a time
per visitor (session and address). Built indexes live in the user's cache folder (GPTVIZ_INDEX_DIR, else
$XDG_CACHE_HOME/gptviz/indexes), never in the checkout; messages never name the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .. import index as ix
from ..index.atomic_write import TEMP_PREFIX, atomic_folder
from ..model import sizes
from ..serve import limits, memory
from ..serve.bounded_cache import BoundedCache
from ..serve.limits import LimitError
from . import keys as K
from .jobs import client_address, process_wide, session_id
from .model_service import ModelSpec, load_model

EXAMPLES_BEFORE, EXAMPLES_AFTER = 20, 6  # tokens of context either side of a top example's peak


class Loaded(NamedTuple):
    """An index, the documents it was built from, the key it is cached under, and the tokenizer its ids are in (its
    model's: tokenizer_for; None for GPT-2's), which every label and typed word of the page goes through."""

    key: tuple
    index: ix.NeuronIndex
    docs: list[ix.Document]
    enc: object = None


def index_dir() -> Path:
    """Where built indexes are kept (one folder per model fingerprint)."""
    root = os.environ.get("GPTVIZ_INDEX_DIR") or ""
    if root:
        return Path(root)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gptviz" / "indexes"


def corpus(enc=None) -> list[ix.Document]:
    """The complete works as documents in the tokenizer `enc`'s ids (default GPT-2's), read once per process."""
    if enc is None or ix.tokenizer_meta(enc)["name"] == "gpt2":
        return process_wide("index_corpus", ix.corpus_documents)
    return process_wide(f"index_corpus_{ix.tokenizer_meta(enc)['fingerprint']}", lambda: ix.corpus_documents(enc=enc))


def tokenizer_of(spec: ModelSpec):
    """The tokenizer the model `spec` names reads (its own GPT-1 BPE, else GPT-2's): its index's ids are in it."""
    from ..model.tokenizer import tokenizer_for

    return tokenizer_for(load_model(spec))


def index_store() -> BoundedCache:
    return process_wide("index_store", lambda: BoundedCache(limits.server_limits().index_cache_bytes, "neuron index"))


def context_store() -> BoundedCache:
    """Top examples' contexts per model and unit (a few KB each)."""
    return process_wide("index_contexts", lambda: BoundedCache(16 * 2**20, "unit's examples"))


def _fingerprints() -> dict:
    return process_wide("index_fingerprints", dict)


def fingerprint(spec: ModelSpec) -> str:
    """The model's weights fingerprint, hashed once per spec in this process (a handful of specs are kept)."""
    known = _fingerprints()
    if spec not in known:
        value = ix.model_fingerprint(load_model(spec))
        if len(known) >= 32:
            known.pop(next(iter(known)), None)
        known[spec] = value
    return known[spec]


def _docs_for(index: ix.NeuronIndex, enc=None) -> list[ix.Document]:
    """The corpus cut to the lengths the index lists (a build on request scans the start of each play); an index
    over your own corpus reads it again from where the index says it lies (`python -m gptviz index --corpus`)."""
    if index.meta["corpus"].get("path"):
        try:
            return ix.index_documents(index, enc=enc)
        except (ValueError, OSError) as err:  # moved, changed or unreadable: the index cannot show its examples
            raise ix.IndexFormatError(f"the index's corpus cannot be read as it was ({type(err).__name__})") from None
    docs = corpus(enc)
    by_name = {d.name: d for d in docs}
    out = []
    for listed in index.documents:
        d = by_name.get(listed["name"])
        if d is None:
            raise ix.IndexFormatError(f"the index lists a document ({listed['name']!r}) the corpus lacks")
        out.append(ix.Document(d.name, d.ids[: listed["tokens"]], listed["held_out"]))
    ix.check_documents(index, out)
    return out


def _size(loaded: Loaded) -> int:
    return sum(a.nbytes for a in loaded.index.arrays.values())


def _load(key: tuple, folder: Path, enc=None) -> Loaded:
    """The index in `folder` and its documents; IndexFormatError when its ids are not in `enc` (the model's)."""
    index = ix.load_index(folder)
    why = ix.tokenizer_mismatch(index.meta, enc)
    if why:
        raise ix.IndexFormatError(why)
    return Loaded(key, index, _docs_for(index, enc), enc)


def indexes_on_disk() -> list[tuple[int, Path, str | None, dict | None]]:
    """(modified, folder, weights fingerprint, model config) of every index in index_dir(), read from each one's
    meta once per change of its file."""
    root = index_dir()
    if not root.is_dir():
        return []
    known, found = _metas_on_disk(), []
    for folder in root.iterdir():
        meta = folder / ix.INDEX_JSON
        if folder.name.startswith(TEMP_PREFIX) or not meta.is_file():
            continue
        stamp = meta.stat().st_mtime_ns
        if known.get(meta) is None or known[meta][0] != stamp:
            try:
                read = json.loads(meta.read_text(encoding="utf-8"))
                known[meta] = (stamp, read["model"]["fingerprint"], read.get("config"))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                known[meta] = (stamp, None, None)
        found.append((stamp, folder, *known[meta][1:]))
    return found


def _metas_on_disk() -> dict:
    return process_wide("index_metas_on_disk", dict)


def indexes_of_this_shape(spec: ModelSpec) -> list[tuple[int, Path, str | None]]:
    """The indexes on disk built for a model of this spec's config, and those whose meta cannot be read (which may be
    this model's, torn: the page then offers a rebuild). Only when there is one is the model's weights fingerprint
    worth hashing: a pass over every weight, on the first unit page of a large model with no index."""
    shape = ix.config_record(load_model(spec).config)
    return [(stamp, folder, fp) for stamp, folder, fp, config in indexes_on_disk() if config in (shape, None)]


def your_index(spec: ModelSpec, candidates: list[tuple[int, Path, str | None]]) -> Path | None:
    """An index the operator put in index_dir() under a name of their own (built with `python -m gptviz index MODEL
    --corpus ... --out <index_dir>/NAME`) for this model's weights: the newest such folder, or None. `candidates`:
    indexes_of_this_shape(spec)."""
    if not candidates:
        return None
    mine = fingerprint(spec)
    found = [(stamp, folder) for stamp, folder, fp in candidates if folder.name != mine and fp == mine]
    return max(found)[1] if found else None


def find_index(spec: ModelSpec) -> Loaded | None:
    """The index for the sidebar's model: one the operator built over a corpus of their own (your_index), else a
    bundled model's shipped one (when it was built with these weights), else one built earlier on this server;
    None when there is none."""
    candidates, enc = indexes_of_this_shape(spec), tokenizer_of(spec)
    yours = your_index(spec, candidates)
    if yours is not None:
        key = ("yours", yours.name, (yours / ix.INDEX_JSON).stat().st_mtime_ns)
        return index_store().get_or_build(key, lambda: _load(key, yours, enc), _size)
    built = bool(candidates) and (index_dir() / fingerprint(spec) / ix.INDEX_JSON).exists()
    if spec.source == K.SOURCE_BUNDLED and (ix.index_folder(spec.name) / ix.INDEX_JSON).exists():
        try:
            loaded = index_store().get_or_build(
                ("bundled", spec.name), lambda: _load(("bundled", spec.name), ix.index_folder(spec.name), enc), _size
            )
        except (ix.IndexFormatError, ValueError, OSError):
            if not built:  # the page offers a build, which goes to index_dir(): the shipped files stay as they are
                raise
        else:
            if loaded.index.meta["model"]["fingerprint"] == fingerprint(spec):  # half precision: other weights
                return loaded
    if not built:
        return None
    key = ("built", fingerprint(spec), ix.tokenizer_meta(enc)["fingerprint"])
    return index_store().get_or_build(key, lambda: _load(key, index_dir() / key[1], enc), _size)


def contexts(spec: ModelSpec, loaded: Loaded, unit: ix.Unit) -> list[ix.Context]:
    """The unit's top examples with the tokens around each peak and the unit's value on each (one batched pass,
    cached per model and unit)."""

    def run() -> list[ix.Context]:
        examples, model = ix.top_examples(loaded.index, unit), load_model(spec)
        batch = ix.context_batch(loaded.index, loaded.docs, examples, before=EXAMPLES_BEFORE, after=EXAMPLES_AFTER)
        need = sizes.example_contexts_nbytes(model.config, loaded.index.unit(unit), *batch)
        with memory.reserve(need, f"the top examples of {unit}"):
            return ix.example_contexts(
                loaded.index, loaded.docs, examples, model=model, before=EXAMPLES_BEFORE, after=EXAMPLES_AFTER
            )

    return context_store().get_or_build((loaded.key, unit), run, _contexts_size)


def band_contexts(spec: ModelSpec, loaded: Loaded, unit: ix.Unit) -> list[tuple[ix.Band, list[ix.Context]]]:
    """Each band of the unit's positive values with its examples' contexts (one batched pass, cached per model and
    unit like the top examples')."""

    def run() -> list[tuple[ix.Band, list[ix.Context]]]:
        bands, model = ix.band_examples(loaded.index, unit), load_model(spec)
        examples = [e for b in bands for e in b.examples]
        batch = ix.context_batch(loaded.index, loaded.docs, examples, before=EXAMPLES_BEFORE, after=EXAMPLES_AFTER)
        need = sizes.example_contexts_nbytes(model.config, loaded.index.unit(unit), *batch)
        with memory.reserve(need, f"the band examples of {unit}"):
            found = ix.example_contexts(
                loaded.index, loaded.docs, examples, model=model, before=EXAMPLES_BEFORE, after=EXAMPLES_AFTER
            )
        out = []
        for b in bands:
            out.append((b, found[: len(b.examples)]))
            found = found[len(b.examples) :]
        return out

    return context_store().get_or_build(
        (loaded.key, unit, "bands"), run, lambda found: _contexts_size([c for _, cs in found for c in cs])
    )


def _contexts_size(found: list[ix.Context]) -> int:
    return sum(c.ids.nbytes + c.values.nbytes + c.positions.nbytes + 64 for c in found) + 64


# ---------------------------------------------------------------------------------------------------- builds

BUILD_WAIT_S = 600.0  # how long a build waits in line for its turn before it is refused


class BuildGuard:
    """Index scans on the server: at most `most` at once, and a first-come line of at most `queue` waiting for a
    turn, one build running or waiting per session and per address. First come, first served: a visitor who just
    built and asks again joins the back of the line, behind everyone already waiting, so no address can chain
    builds while another waits (the line used to be a race that the one clicking first after each end won)."""

    def __init__(self, most: int, queue: int = 8, wait_s: float = BUILD_WAIT_S):
        self.most, self.queue, self.wait_s = most, queue, wait_s
        self._running: list[tuple[str | None, str]] = []
        self._waiting: list[tuple[str | None, str]] = []
        self._cond = threading.Condition()

    def _mine(self, session: str | None, address: str) -> bool:
        return any(s == session or (address and a == address) for s, a in self._running + self._waiting)

    def start(
        self,
        session: str | None,
        address: str,
        wait_s: float | None = None,
        on_wait: Callable[[int], None] | None = None,
    ) -> None:
        """Take a turn: at once when a scan is free and nobody waits, else in line for up to `wait_s` (calling
        `on_wait(builds ahead)` about once a second: a Streamlit rerun raised there leaves the line).
        LimitError when this visitor already has a build running or waiting, the line is full, or the wait ran
        out."""
        wait_s = self.wait_s if wait_s is None else wait_s
        who = (session, address)
        with self._cond:
            if self._mine(session, address):
                raise LimitError("An index is already being built for you; wait for it to finish.")
            if len(self._running) >= self.most and len(self._waiting) >= self.queue:
                raise LimitError(
                    f"This server builds {self.most} index{'es' if self.most != 1 else ''} at a time "
                    f"and {len(self._waiting)} more are waiting; try again in a few minutes."
                )
            self._waiting.append(who)
        deadline = time.monotonic() + wait_s
        try:
            while True:
                with self._cond:
                    ahead = self._waiting.index(who)
                    if ahead == 0 and len(self._running) < self.most:
                        self._waiting.pop(0)
                        self._running.append(who)
                        self._cond.notify_all()
                        return
                    ahead += len(self._running)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LimitError(
                            f"This server builds {self.most} index{'es' if self.most != 1 else ''} "
                            f"at a time and is busy ({ahead} ahead of you); try again in a few "
                            "minutes."
                        )
                    self._cond.wait(min(left, 1.0))
                if on_wait is not None:
                    on_wait(ahead)
        except BaseException:
            with self._cond:
                if who in self._waiting:
                    self._waiting.remove(who)
                    self._cond.notify_all()
            raise

    def end(self, session: str | None, address: str) -> None:
        with self._cond:
            if (session, address) in self._running:
                self._running.remove((session, address))
                self._cond.notify_all()

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)


def build_guard() -> BuildGuard:
    def make() -> BuildGuard:
        lim = limits.server_limits()
        return BuildGuard(lim.index_builds, lim.index_queue)

    return process_wide("index_builds", make)


def corpus_cut(tokens: int, enc=None) -> list[ix.Document]:
    """The same share of every play's start, `tokens` in all at most (at least one token of each), in `enc`'s ids."""
    docs = corpus(enc)
    per = max(1, tokens // len(docs))
    return [ix.Document(d.name, d.ids[:per], d.held_out) for d in docs]


def check_build(spec: ModelSpec, tokens: int) -> list[ix.Document]:
    """The documents a build of `tokens` tokens would scan; LimitError when it goes past the server's limits."""
    lim = limits.server_limits()
    if not 1 <= tokens <= lim.index_tokens:
        raise LimitError(f"This server scans at most {lim.index_tokens:,} tokens for an index (GPTVIZ_INDEX_TOKENS).")
    docs = corpus_cut(tokens, tokenizer_of(spec))  # the model's own ids (GPT-1's BPE for a GPT-1 folder)
    need = ix.scan_nbytes(load_model(spec).config, docs)
    if need > lim.index_bytes:
        raise LimitError(
            f"Scanning this model would take about {need / 2**20:,.0f} MiB, more than the "
            f"{lim.index_mb:,} MiB this server allows for an index (GPTVIZ_INDEX_MB); fewer tokens "
            "do not help much: the memory grows with the model's neurons."
        )
    return docs


def build(
    spec: ModelSpec, tokens: int, progress: Callable[[int, int], None], on_wait: Callable[[int], None] | None = None
) -> Loaded:
    """Scan the start of every play with the model (one build per visitor, in turn, bounded), save it to disk
    whole (a crash mid-save leaves the previous index or none, never a torn one), keep at most GPTVIZ_INDEX_KEPT
    built indexes, and load it."""
    docs = check_build(spec, tokens)
    who = (session_id(), client_address())
    guard = build_guard()
    guard.start(*who, on_wait=on_wait)
    try:
        model = load_model(spec)
        with memory.reserve(ix.scan_nbytes(model.config, docs), f"an index scan of {spec.name}"):
            index = ix.build_index(model, docs, model_name=spec.label(), source=spec.source, progress=progress)
        folder = index_dir() / fingerprint(spec)
        with _disk_lock, atomic_folder(folder) as tmp:
            ix.save_index(index, tmp)
        prune_built(limits.server_limits().index_kept, keep=folder)
    finally:
        guard.end(*who)
    return find_index(spec)


# ---------------------------------------------------------------------------------------------------- disk

_disk_lock = threading.Lock()  # one save or prune at a time in this process
STALE_TEMP_S = 3600.0  # a temporary folder this old was left by a server killed mid-save


def _is_fingerprint(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _shipped_folders() -> set[Path]:
    from ..model.weights import bundled_models

    return {ix.index_folder(name).resolve() for name in bundled_models()}


def built_indexes() -> list[Path]:
    """Indexes built on request, oldest built first: the folders of index_dir() named by a model fingerprint
    (anything else there, and a bundled model's shipped index wherever it is, is never listed)."""
    root = index_dir()
    if not root.is_dir():
        return []
    shipped = _shipped_folders()
    found = [p for p in root.iterdir() if p.is_dir() and _is_fingerprint(p.name) and p.resolve() not in shipped]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def prune_built(kept: int, keep: Path | None = None) -> list[Path]:
    """Remove the oldest built indexes past `kept` (never `keep`: the one just built) and temporary folders left
    by a server killed mid-save; returns what was removed."""
    with _disk_lock:
        removed = []
        folders = [p for p in built_indexes() if keep is None or p.resolve() != Path(keep).resolve()]
        for old in folders[: max(0, len(folders) - (kept - (keep is not None)))]:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
        root = index_dir()
        if root.is_dir():
            for tmp in root.glob(TEMP_PREFIX + "*"):
                if time.time() - tmp.stat().st_mtime > STALE_TEMP_S:
                    shutil.rmtree(tmp, ignore_errors=True)
        return removed
