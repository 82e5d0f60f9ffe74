"""The Train page's warmup scenario (gptviz.training.warmup), run once from the command line: each arm's loss over the
last steps, mean ± sd over the seeds, and whether post-norm needed warmup and pre-norm did without, by the rule
stated.

    python -m benchmarks warmup -- [--lr 3e-3] [--steps 300] [--warmup 60] [--beta2 0.98] [--layers 12] [--seeds 3]
                                      [--threads 1] [--full-vocab] [--json out.json]

With no flags it runs the Train page's scenario (gptviz.training.warmup.PAGE_SCENARIO, the Scenario defaults).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import torch

from gptviz.serve.training_jobs import corpus_tokens
from gptviz.training import warmup


def progress(scenario: warmup.Scenario):
    """An on_step callback printing (to stderr) the step and CPU seconds so far, every tenth of the run."""
    last = scenario.run_names()[-1]
    every = max(1, scenario.steps // 10)

    def on_step(name: str, record: dict) -> None:
        if name == last and record["step"] % every == 0:
            print(
                f"step {record['step']}/{scenario.steps}, {time.process_time():.0f} s CPU", file=sys.stderr, flush=True
            )

    return on_step


def main() -> None:
    defaults = warmup.Scenario()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(warmup.Scenario):
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            type=type(getattr(defaults, field.name)),
            default=getattr(defaults, field.name),
        )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: the Train page's warmup job uses "
        "one; two on a shared 2-core CPU made each step about 3x slower)",
    )
    parser.add_argument(
        "--full-vocab",
        action="store_true",
        help="train the whole 50,257-row embedding (the same "
        "losses, slower) instead of the rows the training text uses",
    )
    parser.add_argument("--json", default=None, help="write the outcome and the per-step losses here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    scenario = warmup.Scenario(**{f.name: getattr(args, f.name) for f in dataclasses.fields(warmup.Scenario)})
    tokens = corpus_tokens()
    started, cpu_started = time.perf_counter(), time.process_time()
    logs = warmup.run_scenario(scenario, tokens, on_step=progress(scenario), cut_vocab=not args.full_vocab)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    baseline = warmup.frequency_baseline(tokens)
    out = warmup.outcome(logs, baseline)
    print(scenario.label)
    steps = min(len(r) for r in logs.values())
    model_steps = max(1, steps * len(logs))
    print(
        f"{seconds:.0f} s wall, {cpu:.0f} s CPU on {args.threads} thread(s): {seconds / model_steps:.3f} s wall and "
        f"{cpu / model_steps:.3f} s CPU per model step; load average "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} at the end"
    )
    print(out.sentence)
    print(warmup.baseline_line(out, baseline))
    print(out.verdict)
    print(
        f"post-norm needs warmup: {out.post_needs_warmup}; pre-norm fine without: {out.pre_fine_without} ({out.rule})"
    )
    for arm in warmup.ARMS:
        mean, sd = warmup.mean_band(logs, arm)
        marks = [round(len(mean) * k / 6) for k in range(1, 7)]  # six points along the run
        print(f"  {arm:22s} " + "  ".join(f"@{s}: {mean[s - 1]:.2f}±{sd[s - 1]:.2f}" for s in marks))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "scenario": dataclasses.asdict(scenario),
                    "seconds": seconds,
                    "cpu_seconds": cpu,
                    "sentence": out.sentence,
                    "frequency_baseline": baseline,
                    "verdict": out.verdict,
                    "post_needs_warmup": out.post_needs_warmup,
                    "pre_fine_without": out.pre_fine_without,
                    "logs": logs,
                },
                f,
            )


if __name__ == "__main__":
    main()
