"""What a visitor can make the server hold, in one place: the operator sets these through environment variables
(docs/deploying.md); every cache, job and export checks them before it allocates.

GPTVIZ_MEMORY_MB          everything held for visitors at once: stored models, captures and trained models, and
                          work in flight (builds, captures, generations, training, sweeps), reserved before it
                          allocates (gptviz.serve.memory; default 8192)
GPTVIZ_CAPTURE_CACHE_MB   cached activations of recent prompts (default: a quarter of GPTVIZ_MEMORY_MB, 2048 of 8192,
                          or what GPTVIZ_MODEL_CACHE_MB leaves where that is less); one larger capture is refused
GPTVIZ_MODEL_CACHE_MB     loaded models (default: what the capture cache leaves of GPTVIZ_MEMORY_MB, 6144 of 8192); the
                          least recently used model is dropped past it. The two must fit in GPTVIZ_MEMORY_MB together
GPTVIZ_RESULTS_CACHE_MB   the pages' derived results (attributions, sweeps, measurements, samples; default 512), counted
                          in GPTVIZ_MEMORY_MB like the captures; the least recently used go first
GPTVIZ_MAX_PARAMS         the largest model a visitor may build or load (default 1,600,000,000: GPT-2 XL)
GPTVIZ_EXPORT_MB          the largest download the app builds (default 512)
GPTVIZ_GENERATIONS        live generations running at once on the server (default 4; one per browser session)
GPTVIZ_GENERATION_THREADS torch CPU threads each live generation uses (default 1: the cores are shared)
GPTVIZ_GENERATIONS_PER_ADDRESS  generations one client address may run or wait for at once (default 2; behind a
                          proxy that hides visitors' addresses, raise it to GPTVIZ_GENERATIONS)
GPTVIZ_GENERATION_QUEUE   generations that may wait in line for a slot when all are busy (default 8)
GPTVIZ_TRAINING           1 or 0: the Train page may start runs (default 1)
GPTVIZ_TRAINING_JOBS      training runs at once on the server (default 2)
GPTVIZ_JOBS_PER_SESSION   training runs at once for one browser session (default 1)
GPTVIZ_JOBS_PER_ADDRESS   training runs at once from one client address, whatever its tabs (default 1; behind a proxy
                          that hides visitors' addresses, raise it to GPTVIZ_TRAINING_JOBS)
GPTVIZ_TRAINING_TOKENS    tokens one training run may train on, steps x batch x block x models (default 20,000,000)
GPTVIZ_TRAINING_SECONDS   wall time one training run may take (default 1800)
GPTVIZ_TRAINED_KEPT       trained models kept for the sessions that trained them (default 8; the oldest go first)
GPTVIZ_MAX_LOAD_PARAMS    the most parameters a checkpoint's config.json may describe before anything is allocated
                          (default 2,000,000,000); read by the library, which loads (gptviz.model.load_limits)
GPTVIZ_MAX_LOAD_CTX       the longest context a checkpoint's config.json may ask for (default 8192); the same
GPTVIZ_MODEL_DIRS         folders, separated by os.pathsep, that the "folder or Hub id" field may load from besides
                          the bundled models and the Hugging Face cache (default none); each must be an absolute path
GPTVIZ_INDEX_TOKENS       corpus tokens one neuron index built on request in the app may scan (default 200,000)
GPTVIZ_INDEX_MB           memory one such scan may use, estimated before it starts (default 1024)
GPTVIZ_INDEX_BUILDS       index scans running at once on the server (default 1; one per visitor address at most)
GPTVIZ_INDEX_CACHE_MB     neuron indexes held in memory, shipped or built (default 128)
GPTVIZ_SWEEP_SECONDS      wall time one long measurement on the Why this token? page (a patching sweep, integrated
                          gradients) may take before it is stopped; one whose estimate is longer is refused before
                          it starts (default 120)
GPTVIZ_INDEX_QUEUE        index builds that may wait in line, first come first served, for a scan to end (default 8)
GPTVIZ_INDEX_KEPT         neuron indexes built on request kept on disk (default 16; the oldest built is removed
                          first; a bundled model's shipped index is never counted or removed)
GPTVIZ_UPLOAD_MB          the largest checkpoint file a visitor may upload in the sidebar, in MB (default 200,
                          Streamlit's own upload cap); 0 turns uploads off. Each upload sits in the server's memory
                          while it arrives, then in a private folder of its visitor's until that session ends

Fixed, not settings: a box that takes one token (the unit page's "A word" and "Source token") takes
fewer than TOKEN_BOX_CHARS characters, checked where the value is used (session state skips the widget's max_chars).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields

from ..model.load_limits import load_limits

MiB = 2**20
# GPT-2's longest token is 66 characters; a box meant for one token needs no more than this (with spaces around)
TOKEN_BOX_CHARS = 100


# the limits whose 0 turns a feature off rather than being refused
OFF_AT_ZERO = frozenset({"upload_mb"})


class LimitError(ValueError):
    """A request would go past a limit the server's operator set; the message says which and what to do."""


def _bytes_of(field_mb: str) -> property:
    """A read-only property: the limit `field_mb`, given in MiB, in bytes."""
    return property(lambda self: getattr(self, field_mb) * MiB)


@dataclass(frozen=True)
class ServerLimits:
    memory_mb: int = 8192
    capture_cache_mb: int | None = None  # None: derived from memory_mb (cache_defaults)
    model_cache_mb: int | None = None  # None: derived from memory_mb (cache_defaults)
    results_cache_mb: int = 512
    max_params: int = 1_600_000_000
    export_mb: int = 512
    generations: int = 4
    generation_threads: int = 1
    generations_per_address: int = 2
    generation_queue: int = 8
    training: bool = True
    training_jobs: int = 2
    jobs_per_session: int = 1
    jobs_per_address: int = 1
    training_tokens: int = 20_000_000
    training_seconds: int = 1800
    trained_kept: int = 8
    model_dirs: tuple[str, ...] = ()
    index_tokens: int = 200_000
    index_mb: int = 1024
    index_builds: int = 1
    index_cache_mb: int = 128
    sweep_seconds: int = 120
    index_queue: int = 8
    index_kept: int = 16
    upload_mb: int = 200  # 0: no uploads

    def __post_init__(self):
        for f in fields(self):
            value, least = getattr(self, f.name), 0 if f.name in OFF_AT_ZERO else 1
            if f.type in (int, "int") and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"the server limit {f.name} must be a whole number of at least {least}, got {value!r}")
        if not isinstance(self.model_dirs, tuple) or not all(isinstance(d, str) for d in self.model_dirs):
            raise ValueError(f"the server limit model_dirs must be a tuple of folder paths, got {self.model_dirs!r}")
        for folder in self.model_dirs:
            # relative to what? The server's working directory is no promise, and `~` is not expanded
            if "\x00" in folder or not os.path.isabs(folder):
                raise ValueError(f"model_dirs must hold absolute folder paths, got {folder!r}")
        capture, model = cache_defaults(self.memory_mb, self.capture_cache_mb, self.model_cache_mb)
        object.__setattr__(self, "capture_cache_mb", capture)
        object.__setattr__(self, "model_cache_mb", model)

    # each limit given in MiB, in bytes
    capture_bytes = _bytes_of("capture_cache_mb")
    model_bytes = _bytes_of("model_cache_mb")
    results_bytes = _bytes_of("results_cache_mb")
    index_bytes = _bytes_of("index_mb")
    index_cache_bytes = _bytes_of("index_cache_mb")
    export_bytes = _bytes_of("export_mb")
    upload_bytes = _bytes_of("upload_mb")  # 0: uploads are off. MB as Streamlit counts an upload's cap: 2**20 bytes

    @classmethod
    def from_env(cls, environ=None) -> ServerLimits:
        """The limits the GPTVIZ_* variables set (the defaults for those unset); a malformed value is an error
        that names the variable, raised at start-up rather than ignored."""
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            name = "GPTVIZ_" + {
                "memory_mb": "MEMORY_MB",
                "training": "TRAINING",
                "training_jobs": "TRAINING_JOBS",
                "trained_kept": "TRAINED_KEPT",
            }.get(f.name, f.name.upper())
            raw = environ.get(name)
            if raw is None or raw.strip() == "":
                continue
            if f.name == "model_dirs":  # a path list: os.pathsep-separated, blank entries skipped
                folders = tuple(p.strip() for p in raw.split(os.pathsep) if p.strip())
                bad = [p for p in folders if "\x00" in p or not os.path.isabs(p)]
                if bad:
                    raise ValueError(
                        f"{name} must list absolute folder paths separated by {os.pathsep!r}, got {bad[0]!r}"
                    )
                values[f.name] = folders
                continue
            raw = raw.strip().replace("_", "").replace(",", "")
            if f.type in (bool, "bool"):
                if raw not in ("0", "1"):
                    raise ValueError(f"{name} must be 0 or 1, got {environ.get(name)!r}")
                values[f.name] = raw == "1"
            else:
                try:
                    values[f.name] = int(raw)
                except ValueError:
                    raise ValueError(f"{name} must be a whole number, got {environ.get(name)!r}") from None
                if values[f.name] < (0 if f.name in OFF_AT_ZERO else 1):
                    raise ValueError(
                        f"{name}: the server limit {f.name} must be a whole number of at least "
                        f"{0 if f.name in OFF_AT_ZERO else 1}, got {environ.get(name)!r}"
                    )
        return cls(**values)


CAPTURE_SHARE = 4  # the capture cache's default: a quarter of GPTVIZ_MEMORY_MB; the model cache's, the rest


def cache_defaults(memory_mb: int, capture_mb: int | None, model_mb: int | None) -> tuple[int, int]:
    """(capture cache, model cache) in MiB: those given, and each one not given (None) derived from `memory_mb`: a
    quarter for captures, or what the model cache leaves where that is less, and for models what the captures leave
    (8192: 2048 and 6144; 1024: 256 and 768). ValueError, naming the variables, when they cannot both fit: with only
    GPTVIZ_MEMORY_MB=1024 set the app refused to start, its fixed defaults being 2048 + 6144 (issue 57)."""
    for name, value in (("capture_cache_mb", capture_mb), ("model_cache_mb", model_mb)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"the server limit {name} must be a whole number of at least 1, got {value!r}")
    given = {"GPTVIZ_CAPTURE_CACHE_MB": capture_mb, "GPTVIZ_MODEL_CACHE_MB": model_mb}
    share = max(1, memory_mb // CAPTURE_SHARE)
    if capture_mb is None:
        capture_mb = min(share, memory_mb - (model_mb if model_mb is not None else share))
    if model_mb is None:
        model_mb = memory_mb - capture_mb
    if capture_mb >= 1 and model_mb >= 1 and capture_mb + model_mb <= memory_mb:
        return capture_mb, model_mb
    set_ = {name: value for name, value in given.items() if value is not None}
    if len(set_) == 2:
        raise ValueError(
            f"GPTVIZ_CAPTURE_CACHE_MB + GPTVIZ_MODEL_CACHE_MB ({capture_mb} + {model_mb}) must fit in "
            f"GPTVIZ_MEMORY_MB ({memory_mb}): set smaller caches or a larger GPTVIZ_MEMORY_MB"
        )
    if set_:
        ((name, value),) = set_.items()
        other = "model" if name == "GPTVIZ_CAPTURE_CACHE_MB" else "capture"
        raise ValueError(
            f"{name} ({value}) leaves no room for the {other} cache in GPTVIZ_MEMORY_MB ({memory_mb}): "
            f"set a smaller {name} or a larger GPTVIZ_MEMORY_MB"
        )
    raise ValueError(
        f"GPTVIZ_MEMORY_MB ({memory_mb}) leaves no room for the capture and model caches (at least 1 MiB each)"
    )


@functools.lru_cache(maxsize=1)
def server_limits() -> ServerLimits:
    """The process's limits, read from the environment once. The load caps are read too, so that a malformed one
    stops the server at start-up as its own limits do."""
    load_limits()
    return ServerLimits.from_env()
