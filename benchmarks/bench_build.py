"""Peak memory of building a preset with random weights (what a visitor's link to `source=preset&preset=gpt2-xl`
makes the server do), each in a fresh process, beside the weights' own size. With the app's allocator setting
(keep_freed_memory), as the server runs.

    python -m benchmarks build                 # gpt2-medium and gpt2-large
    python -m benchmarks build -- gpt2-xl         # about 8 GB at its peak: only on a machine with room
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(preset: str) -> dict:
    from gptviz import GPT, PRESETS
    from gptviz.serve.allocator import keep_freed_memory

    keep_freed_memory()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    model = GPT(PRESETS[preset], seed=0).eval()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"preset": preset, "weights_mb": weights / 2**20, "peak_mb": peak / 2**20, "seconds": seconds}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        return
    presets = sys.argv[1:] or ["gpt2-medium", "gpt2-large"]
    print("| preset | weights (MiB) | build peak above the process's start (MiB) | peak / weights | seconds |")
    print("|---|---|---|---|---|")
    for preset in presets:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_build", "--child", preset],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {r['preset']} | {r['weights_mb']:,.0f} | {r['peak_mb']:,.0f} | {r['peak_mb'] / r['weights_mb']:.2f}x "
            f"| {r['seconds']:.1f} |"
        )


if __name__ == "__main__":
    main()
