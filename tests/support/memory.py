"""What a call allocates, measured, against what it reserved."""

from __future__ import annotations

from benchmarks.memory_peak import torch_peak

__all__ = ["MiB", "covers", "torch_peak"]  # torch_peak: the measure the benchmarks share (benchmarks/memory_peak.py)

MiB = 2**20


def covers(estimate: int, peak: int, within: float = 2.0) -> None:
    """The estimate covers the peak and is not wildly above it (within 2x and 1 MiB by default)."""
    assert peak <= estimate <= within * peak + MiB, (estimate / MiB, peak / MiB)
