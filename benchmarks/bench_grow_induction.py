"""The "grow an induction head" scenario (Heads forming page, gptviz.serve.training_jobs.induction_growth_spec) run as the
app runs it, a background job with snapshots, over several seeds: the seconds until some head's induction score on
the snapshot probe reaches 0.5 (from the job's start, corpus loading included, and from its first step), the step
it happened at, and what recording the snapshots cost as a share of the training time.

    python -m benchmarks grow                 # seeds 0 1 2, the scenario's settings
    python -m benchmarks grow -- --seeds 0 --set lr=3e-3 batch=64 steps=1500

Prints a Markdown table; each seed stops at the threshold or at the scenario's last step.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


import torch

from gptviz.serve.training_jobs import GROWTH, JobRegistry, induction_growth_spec
from gptviz.model.unit_id import head_id

THRESHOLD = 0.5


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in GROWTH:
            raise SystemExit(f"unknown setting {key!r}; one of {', '.join(GROWTH)}")
        out[key] = type(GROWTH[key])(float(value)) if isinstance(GROWTH[key], int) else float(value)
    return out


def run_seed(seed: int, overrides: dict) -> dict:
    registry = JobRegistry(max_running=1)
    started = time.perf_counter()
    job = registry.start(induction_growth_spec(("pre",), seed=seed, **overrides))
    reached = None
    while not job.wait(1.0):
        snaps = job.snapshots.get("pre")
        if snaps is not None and len(snaps) and reached is None:
            hit = snaps.crossing("induction", THRESHOLD)
            if hit is not None:
                reached = (time.perf_counter() - started, hit)
                job.request_stop()
    job.wait()
    snaps = job.snapshots["pre"]
    first_step_s = job.started_s - started if job.started_s else float("nan")
    best = float(snaps.score_array()[:, snaps.detector_index("induction")].max()) if len(snaps) else float("nan")
    return {"seed": seed, "status": job.status, "steps": job.snapshot().steps_done,
            "reached_s": reached[0] if reached else None, "reached_step": reached[1][0] if reached else None,
            "head": head_id(reached[1][1], reached[1][2]) if reached else "", "load_s": first_step_s,
            "best": best, "share": snaps.share_recording(), "error": job.error}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], help="scenario settings to replace, key=value")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = parse_sets(args.set)
    settings = {**GROWTH, **overrides}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s) on {os.cpu_count()} CPU(s); scenario "
          f"{settings}; load average at the start {' / '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| seed | induction >= 0.5 after (s, from the job's start) | at step | head | corpus loading (s) | "
          "best score | recording share of training | status |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        r = run_seed(seed, overrides)
        reached = f"{r['reached_s']:.0f}" if r["reached_s"] is not None else f"not within {r['steps']} steps"
        print(f"| {seed} | {reached} | {r['reached_step'] or ''} | {r['head']} | {r['load_s']:.1f} | {r['best']:.3f} | "
              f"{r['share']:.1%} | {r['status']}{' ' + r['error'] if r['error'] else ''} |", flush=True)
    print(f"\nload average at the end {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
