"""The most bytes of CPU tensors a call holds at once, from torch's own allocation records (torch.profiler's memory
timeline): every tensor the call creates and frees, in order; tensors made before the call (the weights) are not
counted, and tracemalloc sees none of torch's memory. The memory tests (tests/test_memory_runs.py) and
benchmarks/bench_sizes.py measure with it."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import warnings

from torch.profiler import ProfilerActivity, profile

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
