"""What a call allocates, measured, against what it reserved."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import warnings

from torch.profiler import ProfilerActivity, profile

MiB = 2**20


PREEXISTING = 1  # torch.profiler._memory_profiler.Action.PREEXISTING.value: a tensor made before the call


def torch_peak(fn):
    """(fn's result, the most bytes of CPU tensors it held at once): torch's allocation records, in order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        result = fn()
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the timeline's export is deprecated for CUDA's snapshots
        path = os.path.join(folder, "timeline.raw.json.gz")
        prof.export_memory_timeline(path, device="cpu")
        with gzip.open(path, "rt") as f:
            events = json.load(f)  # (time, action, bytes, category): creations +, frees -
    held = peak = 0
    for _, action, nbytes, _ in events:
        if action != PREEXISTING:
            held += nbytes
            peak = max(peak, held)
    return result, peak


def covers(estimate: int, peak: int, within: float = 2.0) -> None:
    """The estimate covers the peak and is not wildly above it (within 2x and 1 MiB by default)."""
    assert peak <= estimate <= within * peak + MiB, (estimate / MiB, peak / MiB)
