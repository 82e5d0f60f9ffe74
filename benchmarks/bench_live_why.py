"""The live text's top contributors (issue 58) against its rate: the app's LiveGeneration (the server's one generation
thread, at the model's own pace: where the contributors' budget is tightest) with a page's redraws beside it every
LIVE_REDRAW_S, each taking the snapshot as the page does and, in the "with" runs, computing contributors as
gptviz.app.live_why does (its budget, its cost estimate, the service's one-thread work; no Streamlit, no cache).
Rounds alternate without / with, so background load hits both alike. Reported: tokens/s of the generation (new tokens
over its wall time) without and with, the median of the rounds' ratios (the target: at least 0.9) and their range,
and how many tokens got contributors live. Then the same at the pages' default pace (5 tokens/s), where the model
waits and the budget is larger.

    python -m benchmarks live-why
    python -m benchmarks live-why -- --models bundled --rounds 9 --paces free
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading

import torch

from gptviz import GPT, PRESETS, get_tokenizer, load_pretrained
from gptviz.app import live_why
from gptviz.app.live import LIVE_REDRAW_S
from gptviz.app.services.why_graph import one_thread, step_ids
from gptviz.methods.graph_contributors import top_contributors
from gptviz.serve.live_generation import LiveGeneration

PROMPT = (
    "JULIET:\nGood morrow, sweet Romeo, good morrow to thee.\nROMEO:\nGood morrow, sweet Juliet. What light "
    "through yonder window breaks? It is the east, and Juliet is the sun.\nJULIET:\n"
)
MODELS = {
    "bundled": lambda: load_pretrained("shakespeare-pre"),
    "gpt2-small": lambda: GPT(PRESETS["gpt2-small"], seed=0).eval(),
}


def one_run(model, name: str, ids: list[int], tokens: int, pace: float | None, explain: bool) -> dict:
    """A live generation with a page's redraws beside it (in this thread); its rate and the tokens explained. The
    cost estimates are live_why's own, kept process-wide by model (`name` stands for the app's model spec)."""
    job = LiveGeneration(
        model, ids, dict(max_new_tokens=tokens, temperature=1.0, top_p=0.9, seed=0), threads=1, pace=pace
    )
    explained = live_why.Explained(job)

    def compute(i: int):
        with one_thread():
            return top_contributors(model, list(step_ids(job.prompt, steps, i)[0]), steps[i].token_id)

    while job.running:
        steps = job.snapshot()  # what a redraw reads
        if explain and steps:
            expected, on_cost = live_why.cost_keeper(name, model.config, steps, job.prompt)
            live_why.explain_new(job, len(steps), explained, compute, expected, on_cost=on_cost)
        job.wait(LIVE_REDRAW_S)
    wall = job.finished_at - job.started_at
    return {
        "rate": len(job.steps) / wall,
        "explained": len(explained.done),
        "tokens": len(job.steps),
        "spent": explained.spent,
        "wall": wall,
    }


def measure(name: str, rounds: int, tokens: int, pace: float | None) -> dict:
    model = MODELS[name]()
    ids = get_tokenizer().encode(PROMPT)
    one_run(model, name, ids, 5, None, True)  # warm-up: the first calls of each path
    runs = {False: [], True: []}
    for r in range(rounds):
        for explain in (False, True) if r % 2 == 0 else (True, False):
            runs[explain].append(one_run(model, name, ids, tokens, pace, explain))
    without = statistics.median(x["rate"] for x in runs[False])
    with_ = statistics.median(x["rate"] for x in runs[True])
    ratios = [w["rate"] / o["rate"] for w, o in zip(runs[True], runs[False], strict=True)]
    return {
        "without": without,
        "with": with_,
        "ratio": statistics.median(ratios),
        "spread": (min(ratios), max(ratios)),
        "explained": statistics.median(x["explained"] for x in runs[True]),
        "tokens": runs[True][0]["tokens"],
        "spent": statistics.median(x["spent"] for x in runs[True]),
        "wall": statistics.median(x["wall"] for x in runs[True]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=100)
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
    print(
        "| model | pace | without: tokens/s | with contributors: tokens/s | ratio (target >= 0.9) | rounds' ratios | "
        "tokens explained live | contributors' seconds / run's wall seconds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        for pace, label in [(None, "as fast as it writes"), (5.0, "5 tokens/s")][
            0 if "free" in args.paces else 1 : 2 if "5" in args.paces else 1
        ]:
            r = measure(name, args.rounds, args.tokens, pace)
            print(
                f"| {name} | {label} | {r['without']:.1f} | {r['with']:.1f} | {r['ratio']:.2f} | "
                f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f} | "
                f"{r['explained']:.0f} of {r['tokens']} | {r['spent']:.2f} / {r['wall']:.1f} |",
                flush=True,
            )
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end (a shared machine: rates are noisy; the ratio is the median "
        "of rounds run back to back)"
    )


if __name__ == "__main__":
    main()
