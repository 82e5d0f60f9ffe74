"""Allocator policy for a process that captures activations again and again (the app, a notebook).

A full capture keeps every intermediate tensor: ~47 MB for a 64-token prompt on GPT-2 small. glibc's default
policy returns freed memory to the kernel as soon as the top of the heap holds more than a small threshold,
so the next capture gets it back as fresh pages, and the kernel zero-fills each 4 KiB page on first touch:
~11,600 page faults and a tenth of the capture's time go to that. Keeping freed memory in the heap lets the
next capture reuse it. This is a process-wide setting, so the library never applies it on import; the app
does at start-up, and a library user may call `keep_freed_memory()` too.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

# mallopt parameters from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Blocks up to 32 MiB come from the heap (glibc's largest dynamic threshold on 64-bit; older releases refuse
# more); larger ones, such as the logits of a long prompt, still come from mmap and return to the kernel.
MMAP_THRESHOLD = 32 * 2**20
# Freed memory the heap may hold before trimming: a few full 64-token captures of GPT-2 small.
TRIM_THRESHOLD = 256 * 2**20

_applied: bool | None = None


def keep_freed_memory(trim_threshold: int = TRIM_THRESHOLD, mmap_threshold: int = MMAP_THRESHOLD) -> bool:
    """Ask glibc to keep up to `trim_threshold` bytes of freed memory for reuse, and to serve blocks up to
    `mmap_threshold` from the heap. Returns True when the setting took effect; False on other C libraries
    (macOS, Windows, musl), where it does nothing."""
    global _applied
    mallopt = _mallopt()
    if mallopt is None:
        _applied = False
        return False
    # mallopt returns 1 on success, 0 on error (e.g. a threshold above glibc's maximum)
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
    return _applied


@functools.cache
def _mallopt():
    """glibc's mallopt, looked up once per process (app.py calls keep_freed_memory on every rerun), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def freed_memory_kept() -> bool | None:
    """Whether keep_freed_memory() took effect in this process (None: never called)."""
    return _applied
