"""The "grow an induction head" scenario (Heads forming page, gptviz.serve.training_jobs.induction_growth_spec) run as
the app runs it, a background job with snapshots, over several seeds: the seconds until some head's induction score
on the snapshot probe reaches 0.5 (from the job's start, corpus loading included, and from its first step), the step
it happened at, and what recording the snapshots cost as a share of the training time.

    python -m benchmarks grow                 # seeds 0 1 2, the scenario's settings
    python -m benchmarks grow -- --seeds 0 --set lr=3e-3 batch=64 steps=1500

Prints a Markdown table: each seed's run as the page runs it, to its end (the page's stop rule: the head formed, or the
last step), its wall and CPU seconds, with the load average beside it.

    python -m benchmarks grow -- --busy 2     # beside two busy processes at nice 0 (load 4 with the run's threads)

`--busy N` starts N processes that spin (`while True: pass`) for the whole measurement, `--settle` seconds before the
first seed, and ends them after the last: the "busy machine" of issue 60.

    python -m benchmarks grow -- --memory               # every wiring the page offers, the whole run (800 steps)
    python -m benchmarks grow -- --memory --steps 6     # the first 6 of each (tests/serve/test_training_memory.py)

Memory: what the page's run reserves (gptviz.serve.job_sizes.job_nbytes) against the growth of the resident memory of a
fresh process running it as the server does (peak VmHWM against VmRSS before it starts), one child process per wiring:
`python -m benchmarks.bench_grow_induction --peak WIRING STEPS` prints that growth in bytes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch

from gptviz.app.settings_choices import GROW_WIRINGS
from gptviz.model.unit_id import head_id
from gptviz.serve.training_jobs import GROWTH, JobRegistry, growth_wirings, induction_growth_spec, job_nbytes

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
    """One seed's run as the page starts it (its stop rule included, unless overridden), to its end: its wall time
    from the job's start (corpus loading included) and the first snapshot where some head reached THRESHOLD. A run
    without a stop rule is stopped there (what the first version of this benchmark timed)."""
    registry = JobRegistry(max_running=1)
    started, cpu_started = time.perf_counter(), time.process_time()
    job = registry.start(induction_growth_spec(("pre",), seed=seed, **overrides))
    reached = None
    while not job.wait(1.0):
        snaps = job.snapshots.get("pre")
        if snaps is not None and len(snaps) and reached is None:
            hit = snaps.crossing("induction", THRESHOLD)
            if hit is not None:
                reached = (time.perf_counter() - started, hit)
                if not job.spec.stop_when_formed:
                    job.request_stop()
    job.wait()
    ended, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    snaps = job.snapshots["pre"]
    if reached is None and len(snaps) and snaps.crossing("induction", THRESHOLD):
        reached = (ended, snaps.crossing("induction", THRESHOLD))
    first_step_s = job.started_s - started if job.started_s else float("nan")
    best = float(snaps.score_array()[:, snaps.detector_index("induction")].max()) if len(snaps) else float("nan")
    return {
        "seed": seed,
        "status": job.status,
        "steps": job.snapshot().steps_done,
        "run_s": ended,
        "cpu_s": cpu,
        "reached_s": reached[0] if reached else None,
        "reached_step": reached[1][0] if reached else None,
        "head": head_id(reached[1][1], reached[1][2]) if reached else "",
        "load_s": first_step_s,
        "best": best,
        "share": snaps.share_recording(),
        "error": job.error,
        "why": job.stop_reason or "",
    }


# ---- memory: the page's reservation against what the server's process grows by -----------------------------------

MiB = 2**20
DRAW_EVERY_S = 2.0  # the page's fragment redraws a running job this often (app_pages/timeline.py, grow_tab)


def draw_page(job) -> None:
    """What the page's fragment computes from a running job (app_pages/timeline.py, growth_view): the progress, the
    step each run's head formed, the heads at the newest snapshot, the induction and loss curves, each figure
    serialised as st.plotly_chart serialises it."""
    import numpy as np
    import plotly.io

    from gptviz.figures import timeline as ft
    from gptviz.training.snapshots import FORMED_THRESHOLD, formed_step

    job.snapshot()
    found = {f"{name}-norm": s for name, s in job.snapshots.items() if len(s)}
    if not found:
        return
    step = max(s.steps[-1] for s in found.values())
    figures = [ft.detector_curves(found, "induction", step, FORMED_THRESHOLD), ft.loss_curves(found, step)]
    for snaps in found.values():
        formed_step(snaps, "induction", FORMED_THRESHOLD)
        scores = snaps.score_array()[ft.index_at(snaps, step), snaps.detector_index("induction")]
        layer, head = np.unravel_index(int(scores.argmax()), scores.shape)
        figures.append(ft.heads_at(snaps, step, 0, selected=(int(layer), int(head)), width_px=480))
    for figure in figures:
        plotly.io.to_json(figure, validate=False)


def run_as_server(spec, tokens, registry: JobRegistry, progress=None) -> None:
    """Start the run through a JobRegistry (its own thread, as the app starts it) and draw the page every
    DRAW_EVERY_S seconds from this thread until it ends; `progress(job)` after each drawing."""
    job = registry.start(spec, tokens)
    while not job.wait(DRAW_EVERY_S):
        draw_page(job)
        if progress is not None:
            progress(job)
    draw_page(job)
    if job.status != "done":
        raise RuntimeError(f"the run ended {job.status}: {job.error}")


def status_bytes(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def peak_growth(wiring: str, steps: int) -> int:
    """In this (fresh) process: the page's run for `wiring` cut to `steps` steps (the same shapes), as the server
    runs it (the app's allocator policy, the server's torch threads, the page drawing beside it); the growth of the
    resident memory's peak over the resident memory just before it starts. A tiny run of the same kind first (torch's,
    plotly's and the job's first-use costs), and its freed memory given back, as the accountant does near its budget."""
    from gptviz.serve import allocator, live_generation
    from gptviz.serve.training_jobs import corpus_tokens

    allocator.keep_freed_memory()  # as the app runs (gptviz.app.router)
    # The server lowers the run's thread priority (live_generation.run_in_background), which changes its pace, not its
    # memory; on a shared machine at a load of 10 a niced run took minutes a step, so the measurement keeps its own.
    live_generation.BACKGROUND_NICE = 0
    tokens = corpus_tokens()
    registry = JobRegistry(max_running=1)
    wirings = growth_wirings(wiring)
    run_as_server(
        induction_growth_spec(wirings, steps=2, layers=1, d_model=8, heads=2, batch=2, block=16), tokens, registry
    )
    allocator.release_freed_memory()
    with open("/proc/self/clear_refs", "w") as f:  # VmHWM back to VmRSS (Linux 4.0+): the warm-up's peak is not
        f.write("5")  # the run's
    before = status_bytes("VmRSS")
    shown = [0.0]

    def progress(job) -> None:  # on stderr, each minute: the step, the growth now and its peak so far (MiB)
        if time.monotonic() - shown[0] >= 60:
            shown[0] = time.monotonic()
            print(
                f"step {job.snapshot().steps_done}: +{(status_bytes('VmRSS') - before) / MiB:,.0f} MiB, peak "
                f"+{(status_bytes('VmHWM') - before) / MiB:,.0f}",
                file=sys.stderr,
                flush=True,
            )

    run_as_server(induction_growth_spec(wirings, steps=steps), tokens, registry, progress)
    return status_bytes("VmHWM") - before


def measure_peak(wiring: str, steps: int, threads: int = 0, timeout: float = 7200, stderr=subprocess.PIPE) -> int:
    """peak_growth in a fresh child process (bytes), on `threads` torch threads (0: torch's default, the server's);
    `stderr=None` shows its progress."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_grow_induction",
            "--peak",
            wiring,
            str(steps),
            "--threads",
            str(threads),
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=timeout,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    return int(out.stdout.split()[-1])


def memory_table(wirings: list[str], steps: int, threads: int = 0) -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s) on {os.cpu_count()} CPU(s); {steps} steps "
        f"of the page's run (of {GROWTH['steps']}); load average at the start "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
    )
    print("| wiring | reserved (MiB) | peak growth (MiB) | peak / reserved | covered | run (s) |")
    print("|---|---|---|---|---|---|")
    for wiring in wirings:
        reserved = job_nbytes(induction_growth_spec(growth_wirings(wiring)))  # what the page reserves
        started = time.perf_counter()
        peak = measure_peak(wiring, steps, threads, stderr=None)
        print(
            f"| {wiring} | {reserved / MiB:,.0f} | {peak / MiB:,.0f} | {peak / reserved:.2f} | "
            f"{'yes' if peak <= reserved else 'NO'} | {time.perf_counter() - started:.0f} |",
            flush=True,
        )
    print(f"\nload average at the end {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], help="scenario settings to replace, key=value")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--memory", action="store_true", help="reserved against peak memory, per wiring")
    parser.add_argument("--wirings", nargs="+", default=list(GROW_WIRINGS), choices=GROW_WIRINGS)
    parser.add_argument("--steps", type=int, default=GROWTH["steps"], help="with --memory: steps of each run")
    parser.add_argument("--busy", type=int, default=0, help="busy processes beside the runs (nice 0)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds the busy processes run before the first")
    parser.add_argument("--peak", nargs=2, metavar=("WIRING", "STEPS"), help="(the child of --memory)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.peak:
        print(peak_growth(args.peak[0], int(args.peak[1])))
        return 0
    if args.memory:
        memory_table(args.wirings, args.steps, args.threads)
        return 0
    overrides = parse_sets(args.set)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        if busy:
            time.sleep(args.settle)
        return seeds_table(args.seeds, overrides, len(busy))
    finally:
        for process in busy:
            process.kill()
            process.wait()


def seeds_table(seeds: list[int], overrides: dict, busy: int) -> int:
    settings = {**GROWTH, **overrides}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s) on {os.cpu_count()} CPU(s); scenario "
        f"{settings}; {busy} busy process(es) beside it; load average at the start "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
    )
    print(
        "| seed | the whole run (s) | CPU (s) | steps run | ended | induction >= 0.5 after (s, from the job's start) | "
        "at step | head | corpus loading (s) | best score | recording share of training | load average (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in seeds:
        r = run_seed(seed, overrides)
        reached = f"{r['reached_s']:.0f}" if r["reached_s"] is not None else f"not within {r['steps']} steps"
        print(
            f"| {seed} | {r['run_s']:.0f} | {r['cpu_s']:.0f} | {r['steps']} | {r['status']} {r['why']}"
            f"{' ' + r['error'] if r['error'] else ''} | {reached} | {r['reached_step'] or ''} | {r['head']} | "
            f"{r['load_s']:.1f} | {r['best']:.3f} | {r['share']:.1%} | {os.getloadavg()[0]:.1f} |",
            flush=True,
        )
    print(f"\nload average at the end {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
