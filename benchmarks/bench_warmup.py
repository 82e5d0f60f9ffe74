"""The Train page's warmup scenario (gptviz.warmup), run once from the command line: each arm's loss over the last
steps, mean ± sd over the seeds, and whether post-norm needed warmup and pre-norm did without, by the rule stated.

    python benchmarks/bench_warmup.py [--lr 0.01] [--steps 60] [--seeds 3] [--threads 1] [--json out.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import torch

from gptviz import warmup
from gptviz.training_jobs import corpus_tokens


def main() -> None:
    defaults = warmup.Scenario()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(warmup.Scenario):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(getattr(defaults, field.name)),
                            default=getattr(defaults, field.name))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the Train page's warmup job uses "
                        "one; two on a shared 2-core CPU made each step about 3x slower)")
    parser.add_argument("--json", default=None, help="write the outcome and the per-step losses here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    scenario = warmup.Scenario(**{f.name: getattr(args, f.name) for f in dataclasses.fields(warmup.Scenario)})
    tokens = corpus_tokens()
    started = time.perf_counter()
    logs = warmup.run_scenario(scenario, tokens)
    seconds = time.perf_counter() - started
    out = warmup.outcome(logs)
    print(scenario.label)
    steps = min(len(r) for r in logs.values())
    print(f"{seconds:.0f} s on {args.threads} thread(s), {seconds / max(1, steps * len(logs)):.2f} s per model step; "
          f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")
    print(out.sentence)
    print(out.verdict)
    print(f"post-norm needs warmup: {out.post_needs_warmup}; pre-norm fine without: {out.pre_fine_without} "
          f"({out.rule})")
    for arm in warmup.ARMS:
        mean, sd = warmup.mean_band(logs, arm)
        marks = [s for s in (10, 20, 30, 40, 50, 60) if s <= len(mean)]
        print(f"  {arm:22s} " + "  ".join(f"@{s}: {mean[s - 1]:.2f}±{sd[s - 1]:.2f}" for s in marks))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scenario": dataclasses.asdict(scenario), "seconds": seconds, "sentence": out.sentence,
                       "verdict": out.verdict,
                       "post_needs_warmup": out.post_needs_warmup, "pre_fine_without": out.pre_fine_without,
                       "logs": logs}, f)


if __name__ == "__main__":
    main()
