"""Allocator policy for a process that captures activations again and again (the app, a notebook).

A full capture keeps every intermediate tensor: ~47 MB for a 64-token prompt on GPT-2 small. glibc's default
policy returns freed memory to the kernel as soon as the top of the heap holds more than a small threshold,
so the next capture gets it back as fresh pages, and the kernel zero-fills each 4 KiB page on first touch: a
page fault per page, a visible share of the capture's time (`python -m benchmarks engine` reports both, with and
without this setting). Keeping freed memory in the heap lets the
next capture reuse it. This is a process-wide setting, so the library never applies it on import; the app
does at start-up, and a library user may call `keep_freed_memory()` too.

What the heap keeps is resident memory the server's budget does not count, and each thread that runs work has an
arena of its own (one visitor's long capture of gpt2-small left hundreds of MiB free, issue 43). So before it
admits work, the memory accountant compares the process's resident size with what it counts (`resident_bytes`) and,
when the work would not fit beside the difference, gives the freed memory back to the kernel first
(`release_freed_memory`; gptviz.serve.memory).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
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
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


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


def resident_bytes() -> int | None:
    """The process's resident memory (RSS), or None where /proc cannot tell it (not Linux)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def release_freed_memory() -> bool:
    """Give the freed memory of every arena back to the kernel (glibc's malloc_trim(0), whose time grows with what it
    releases). True when something was released; False when nothing was, or not on glibc."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(0))


@functools.cache
def _libc():
    """The C library when it is glibc (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018 (an AttributeError where there is none)
    except (OSError, AttributeError):
        return None
    return libc


@functools.cache
def _mallopt():
    """glibc's mallopt, looked up once per process (app.py calls keep_freed_memory on every rerun), or None."""
    libc = _libc()
    if libc is None:
        return None
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def freed_memory_kept() -> bool | None:
    """Whether keep_freed_memory() took effect in this process (None: never called)."""
    return _applied
