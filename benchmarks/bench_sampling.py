"""Top-p sampling: the nucleus by a growing topk prefix (gptviz.model.generate.nucleus_mask) against a full sort of the
vocabulary (what it replaced), side by side in one run, one torch thread.

  1. the mask alone, on the distributions the bundled model and gpt2-small (random weights) produce while they
     generate (temperature 1, top-p 0.9), with the two masks checked equal on every one;
  2. stream(attention=True) with top-p 0.9, tokens/s, with each nucleus (the sort swapped in for the second).
Rounds interleave the contenders, order rotated; values are medians, ratios medians of per-round ratios.

    python -m benchmarks sampling            # about a minute
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from benchmarks.bench_browser import prompt_of  # the browser benchmark's 64-token prompt
from gptviz import GPT, PRESETS, load_pretrained, stream
from gptviz.model.tokenizer import encode

GEN = sys.modules["gptviz.model.generate"]  # the module (gptviz.model.generate is also the name of the function)
TOP_P = 0.9


def sorted_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus by a full descending sort (gptviz before nucleus_mask)."""
    sorted_probs, order = torch.sort(probs, descending=True)
    before = torch.cumsum(sorted_probs, dim=0) - sorted_probs
    out = torch.zeros_like(probs, dtype=torch.bool)
    out[order[before < top_p]] = True
    return out


def per_call_ms(fn, items) -> float:
    started = time.thread_time()
    for item in items:
        fn(item, TOP_P)
    return (time.thread_time() - started) / len(items) * 1000


def stream_tps(model, ids, nucleus, n: int = 64) -> float:
    GEN.nucleus_mask, saved = nucleus, GEN.nucleus_mask
    try:
        started = time.thread_time()
        count = sum(1 for _ in stream(model, ids, n, temperature=1.0, top_p=TOP_P, seed=0, attention=True))
        return count / (time.thread_time() - started)
    finally:
        GEN.nucleus_mask = saved


def main() -> int:
    torch.set_num_threads(1)
    ids = encode(prompt_of(64))
    rows, ok = [], True
    for name, model in (
        ("shakespeare-pre (bundled)", load_pretrained("shakespeare-pre")),
        ("gpt2-small (random weights)", GPT(PRESETS["gpt2-small"], seed=0).eval()),
    ):
        dists = [r.probs for r in stream(model, ids, 120, temperature=1.0, top_p=TOP_P, seed=0)]
        same = all(torch.equal(GEN.nucleus_mask(p, TOP_P), sorted_nucleus(p, TOP_P)) for p in dists)
        ok &= same
        sizes = sorted(int(GEN.nucleus_mask(p, TOP_P).sum()) for p in dists)
        contenders = {"prefix": GEN.nucleus_mask, "sort": sorted_nucleus}
        mask_ms, mask_ratio, tps, tps_ratio = {k: [] for k in contenders}, [], {k: [] for k in contenders}, []
        for r in range(7):
            order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
            got = {k: per_call_ms(contenders[k], dists) for k in order}
            rate = {k: stream_tps(model, ids, contenders[k]) for k in order}
            for k in contenders:
                mask_ms[k].append(got[k])
                tps[k].append(rate[k])
            mask_ratio.append(got["prefix"] / got["sort"])
            tps_ratio.append(rate["prefix"] / rate["sort"])
        med = statistics.median
        rows.append(
            (
                name,
                len(dists),
                sizes[len(sizes) // 2],
                sizes[-1],
                same,
                med(mask_ms["prefix"]),
                med(mask_ms["sort"]),
                med(mask_ratio),
                med(tps["prefix"]),
                med(tps["sort"]),
                med(tps_ratio),
            )
        )
    print(
        f"\n{torch.__version__}, 1 torch thread, top-p {TOP_P}, temperature 1, 64-token prompt; the thread's CPU time;"
        " 7 rounds\n"
    )
    print(
        "| model | distributions (steps) | nucleus size, median / max | masks equal | mask: prefix | mask: full sort "
        "| ratio | stream(attention=True), 64 tokens: prefix | with the full sort | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r[0]} | {r[1]} | {r[2]:,} / {r[3]:,} | {r[4]} | {r[5]:.2f} ms | {r[6]:.2f} ms | {r[7]:.2f}x | "
            f"{r[8]:.1f} tok/s | {r[9]:.1f} tok/s | {r[10]:.2f}x |"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
