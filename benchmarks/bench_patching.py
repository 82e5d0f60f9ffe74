"""Patching on gpt2-small (random weights: the time does not depend on them): the page's estimate before the sweeps
(attribution.patching_work x attribution.block_pass_rate, measured now) against their measured time, for the audit's
pairs (" a" x T, and the same with " b" at token T/2). One torch thread, like a server whose cores are shared.

    python -m benchmarks patching            # T = 128
    python -m benchmarks patching -- 64 128 256
"""

from __future__ import annotations

import sys
import time

import torch

from gptviz import GPT, PRESETS
from gptviz.methods import attribution
from gptviz.model.tokenizer import encode


def main(lengths: list[int]) -> None:
    torch.set_num_threads(1)
    model = GPT(PRESETS["gpt2-small"], seed=0).eval()
    print("| tokens | estimate (s) | residual sweep (s) | head sweep (s) | both (s) | measured / estimate |")
    print("|---|---|---|---|---|---|")
    for T in lengths:
        clean = encode(" a" * T)
        corrupted = clean[: T // 2] + encode(" b") + clean[T // 2 + 1 :]
        estimate = attribution.patching_work(model.config, clean, corrupted) / attribution.block_pass_rate(model, T)
        t0 = time.perf_counter()
        attribution.residual_patching(model, clean, corrupted, 5, 6)
        t1 = time.perf_counter()
        attribution.head_patching(model, clean, corrupted, 5, 6)
        t2 = time.perf_counter()
        print(
            f"| {T} | {estimate:.1f} | {t1 - t0:.1f} | {t2 - t1:.1f} | {t2 - t0:.1f} | {(t2 - t0) / estimate:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [128])
