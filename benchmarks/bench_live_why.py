"""The live text's top contributors (issue 58) against its rate: the app's LiveGeneration (the server's one generation
thread, at the model's own pace) with a page's redraws beside it every LIVE_REDRAW_S taking the snapshot as the page
does, without contributors and with them (`explain=True`: the steps capture what they need and
gptviz.serve.live_contributors finds them in the model's own thread, a batch at a time). Rounds alternate without /
with, so background load hits both alike. Reported: tokens/s of the generation (new tokens over its wall time)
without and with, the median of the rounds' ratios (the target: at least 0.9) and their range; how many tokens had
their contributors at the first redraw that drew them, and by the run's end; the median and largest time from a step
to its contributors. Then the same at the pages' default pace (5 tokens/s). `--hogs N` runs N busy processes beside
it (a loaded server).

    python -m benchmarks live-why
    python -m benchmarks live-why -- --models bundled --rounds 9 --paces free --hogs 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import threading

import torch

from gptviz import GPT, PRESETS, get_tokenizer, load_pretrained
from gptviz.app.live import LIVE_REDRAW_S
from gptviz.serve.live_generation import GenerationSlots, LiveGeneration

PROMPT = (
    "JULIET:\nGood morrow, sweet Romeo, good morrow to thee.\nROMEO:\nGood morrow, sweet Juliet. What light "
    "through yonder window breaks? It is the east, and Juliet is the sun.\nJULIET:\n"
)
MODELS = {
    "bundled": lambda: load_pretrained("shakespeare-pre"),
    "gpt2-small": lambda: GPT(PRESETS["gpt2-small"], seed=0).eval(),
}


def one_run(model, ids: list[int], tokens: int, pace: float | None, explain: bool) -> dict:
    """A live generation with a page's redraws beside it (in this thread): its rate, and with contributors, how many
    steps had them when a redraw first drew them and by the run's end, and their lags."""
    job = LiveGeneration(
        model,
        ids,
        dict(max_new_tokens=tokens, temperature=1.0, top_p=0.9, seed=0),
        threads=1,
        pace=pace,
        explain=explain,
        slots=GenerationSlots(1),  # the app's: a lone generation keeps its priority (without slots it is niced)
    )
    drawn, on_time = 0, 0
    while job.running:
        steps = job.snapshot()  # what a redraw reads
        if explain:
            on_time += sum(1 for i in range(drawn, len(steps)) if i in job.contributors.found)
        drawn = len(steps)
        job.wait(LIVE_REDRAW_S)
    wall = job.finished_at - job.started_at
    out = {"rate": len(job.steps) / wall, "tokens": len(job.steps), "wall": wall}
    if explain:
        lags = sorted(job.contributors.lag.values())
        out |= {
            "on_time": on_time,
            "found": len(job.contributors.found),
            "lag": statistics.median(lags) if lags else float("nan"),
            "lag_max": lags[-1] if lags else float("nan"),
        }
    return out


def hog() -> None:
    while True:
        pass


def measure(name: str, rounds: int, tokens: int, pace: float | None) -> dict:
    model = MODELS[name]()
    ids = get_tokenizer().encode(PROMPT)
    one_run(model, ids, 5, None, True)  # warm-up: the first calls of each path
    runs = {False: [], True: []}
    for r in range(rounds):
        for explain in (False, True) if r % 2 == 0 else (True, False):
            runs[explain].append(one_run(model, ids, tokens, pace, explain))
    ratios = [w["rate"] / o["rate"] for w, o in zip(runs[True], runs[False], strict=True)]
    explained = runs[True]
    return {
        "without": statistics.median(x["rate"] for x in runs[False]),
        "with": statistics.median(x["rate"] for x in explained),
        "ratio": statistics.median(ratios),
        "spread": (min(ratios), max(ratios)),
        "on_time": statistics.median(x["on_time"] for x in explained),
        "found": statistics.median(x["found"] for x in explained),
        "tokens": explained[0]["tokens"],
        "lag": statistics.median(x["lag"] for x in explained),
        "lag_max": max(x["lag_max"] for x in explained),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--hogs", type=int, default=0, help="busy processes beside it (a loaded server)")
    ap.add_argument(
        "--paces",
        nargs="+",
        default=["free", "5"],
        choices=["free", "5"],
        help="free: as fast as it writes; 5: 5 tokens/s, the pages' default",
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch threads 1 (the page's script thread beside a one-thread generation); "
        f"load average {os.getloadavg()[0]:.2f} at the start; {threading.active_count()} threads"
    )
    hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(args.hogs)]
    for p in hogs:
        p.start()
    print(f"{args.hogs} busy processes beside it")
    print(
        "| model | pace | without: tokens/s | with contributors: tokens/s | ratio (target >= 0.9) | rounds' ratios | "
        "tokens with them at their first redraw | by the run's end | step to contributors: median, largest |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for name in args.models:
            for pace, label in [(None, "as fast as it writes"), (5.0, "5 tokens/s")][
                0 if "free" in args.paces else 1 : 2 if "5" in args.paces else 1
            ]:
                r = measure(name, args.rounds, args.tokens, pace)
                print(
                    f"| {name} | {label} | {r['without']:.1f} | {r['with']:.1f} | {r['ratio']:.2f} | "
                    f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f} | {r['on_time']:.0f} of {r['tokens']} | "
                    f"{r['found']:.0f} of {r['tokens']} | {r['lag'] * 1000:.0f} ms, {r['lag_max'] * 1000:.0f} ms |",
                    flush=True,
                )
    finally:
        for p in hogs:
            p.terminate()
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end (a shared machine: rates are noisy; the ratio is the median "
        "of rounds run back to back)"
    )


if __name__ == "__main__":
    main()
