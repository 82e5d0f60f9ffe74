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
    allocator._mallopt.cache_clear()  # the lookup is cached per process; redo it as on macOS
    try:
        assert allocator.keep_freed_memory() is False
        assert allocator.freed_memory_kept() is False
    finally:
        allocator._mallopt.cache_clear()
