"""The app's allocator policy: glibc keeps freed memory so repeated captures reuse it. Its effect (page faults
and time per capture) is measured in benchmarks/run.py; app.py applying it is checked in test_page_attention."""

import platform
import sys

import pytest

from gptviz.serve import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_memory_takes_effect_on_glibc():
    assert allocator.keep_freed_memory() is True
    assert allocator.freed_memory_kept() is True


def test_other_platforms_are_a_no_op(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    allocator._mallopt.cache_clear()  # the lookups are cached per process; redo them as on macOS
    allocator._libc.cache_clear()
    try:
        assert allocator.keep_freed_memory() is False
        assert allocator.freed_memory_kept() is False
        assert allocator.release_freed_memory() is False
    finally:
        allocator._mallopt.cache_clear()
        allocator._libc.cache_clear()


def resident_mib() -> float:
    return allocator.resident_bytes() / 2**20


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_freed_memory_kept_goes_back_to_the_kernel():
    """What a capture leaves behind: 48 MiB in 4 MiB blocks (under the 32 MiB mmap threshold, so from the heap),
    freed. With keep_freed_memory the heap keeps it resident; released, the resident size falls by about as much.
    (Whether the server's peak then stays in its budget is measured end to end: benchmarks/hostile_load.py,
    scenario 4.)"""
    import torch

    assert allocator.keep_freed_memory() is True
    allocator.release_freed_memory()
    before = resident_mib()
    blocks = [torch.ones(2**20) for _ in range(12)]  # 12 x 4 MiB, touched
    del blocks
    kept = resident_mib()
    assert kept - before >= 40
    assert allocator.release_freed_memory() is True
    assert kept - resident_mib() >= 40
