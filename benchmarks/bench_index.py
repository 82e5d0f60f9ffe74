"""The corpus scan of gptviz.index, side by side with the model's forward pass alone over the same windows, on Ray,
and its memory on a corpus and on one ten times as large. Each measurement runs in a fresh process so its peak RSS
(ru_maxrss, which includes torch's own ~220 MB and the model) is its own.

    python -m benchmarks index                         # every part below
    python -m benchmarks index -- --only overhead         # scan vs forward: shakespeare-pre and gpt2-small
    python -m benchmarks index -- --only ray              # the bundled model on Ray, 1 and 2 workers
    python -m benchmarks index -- --only memory           # peak RSS for a JSON-lines corpus at 1x and 10x
    python -m benchmarks index -- --tokens 200000 --gpt2-tokens 20000

overhead: the full scan (statistics included) against `model.final_hidden` on the very batches the scan runs (the
fused attention path, nothing captured), interleaved in one process, the median of `--repeats`; the statistics'
overhead is scan / forward - 1 (target: at most 25%). The scan ends its forward pass after the last activation it
reads (gptviz.index.forward.forward_through_units); that shorter pass alone is measured too (`units_forward_*`), and
scan / it - 1 is what the statistics alone cost (`statistics_pct`). The scan also runs without the bands' sample
(`scan_no_bands_*`, a plan with sample=0): scan / it - 1 is what the bands cost (`bands_pct`, target: under 5%;
`bands_cpu_pct` from the process's CPU time, which a busy machine disturbs less than the wall clock). The scan runs
twice: with its statistics compiled from C (the extension gptviz.index._block_stats, built at install or by
`python setup.py build_ext --inplace`; gptviz/index/native.py; `scan_*`) and with the torch ops it falls back to
(`torch_*`, GPTVIZ_NATIVE=0).
gpt2-small has random weights (its scan costs the same as with trained ones). One torch thread (the index CLI's
default) unless BENCH_THREADS says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _docs(tokens: int):
    from gptviz import index as ix

    kept, left = [], tokens
    for d in ix.corpus_documents():
        if left <= 0:
            break
        kept.append(ix.Document(d.name, d.ids[:left], d.held_out))
        left -= len(kept[-1].ids)
    return kept


def _model(which: str):
    from gptviz import GPT, PRESETS, load_pretrained

    return load_pretrained("shakespeare-pre").eval() if which == "bundled" else GPT(PRESETS["gpt2-small"]).eval()


def overhead(which: str, tokens: int, repeats: int) -> dict:
    import torch

    from gptviz import index as ix
    from gptviz.index import native
    from gptviz.index.forward import forward_through_units

    torch.manual_seed(0)
    model, docs = _model(which), _docs(tokens)
    plan = ix.plan_scan(model, docs)

    def forward_only(run=model.final_hidden) -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for b in range(plan.n_batches):
                w = plan.batch_windows(b)
                ids = torch.zeros(len(w), int(w[:, 2].max()), dtype=torch.long)
                for i, (d, start, length, _) in enumerate(w):
                    ids[i, :length] = torch.from_numpy(docs[d].ids[start : start + length])
                run(ids)
        return time.perf_counter() - started

    compiled_here = native.available()  # (GPTVIZ_NATIVE=0 measures the torch ops alone)

    without_bands = ix.plan_scan(model, docs, sample=0)  # the same scan without the bands' sample (bands.py)

    def scan(compiled: bool = True, plan=plan) -> float:
        if compiled_here:
            os.environ["GPTVIZ_NATIVE"] = "1" if compiled else "0"
        started = time.perf_counter()
        ix.finish_scan(plan, ix.scan_batches(model, docs, plan))
        return time.perf_counter() - started

    runs = {
        "scan": scan,
        "scan_no_bands": lambda: scan(plan=without_bands),
        "forward": forward_only,
        "units_forward": lambda: forward_only(lambda ids: forward_through_units(model, ids)),
    }
    if compiled_here:
        runs["torch"] = lambda: scan(compiled=False)
    forward_only()  # warm-up
    times = {name: [] for name in runs}
    cpu = {name: [] for name in runs}  # this process's CPU seconds: steadier than the wall clock on a busy machine
    for r in range(repeats):  # interleaved, the order turned each time, so background load hits all alike
        names = list(runs)[r % len(runs) :] + list(runs)[: r % len(runs)]
        for name in names:
            started = time.process_time()
            times[name].append(runs[name]())
            cpu[name].append(time.process_time() - started)
    median = {name: statistics.median(t) for name, t in times.items()}
    median_cpu = {name: statistics.median(t) for name, t in cpu.items()}
    out = {
        "part": "overhead",
        "model": which,
        "tokens": plan.tokens,
        "batch": plan.settings["batch"],
        "statistics": "C" if compiled_here else "torch",
        "scan_tok_s": round(plan.tokens / median["scan"]),
        "forward_tok_s": round(plan.tokens / median["forward"]),
        "overhead_pct": round(100 * (median["scan"] / median["forward"] - 1), 1),
        "statistics_pct": round(100 * (median["scan"] / median["units_forward"] - 1), 1),
        "bands_pct": round(100 * (median["scan"] / median["scan_no_bands"] - 1), 1),
        "bands_cpu_pct": round(100 * (median_cpu["scan"] / median_cpu["scan_no_bands"] - 1), 1),
    }
    if "torch" in median:
        out["torch_overhead_pct"] = round(100 * (median["torch"] / median["forward"] - 1), 1)
        # the same from the process's CPU time, which a busy machine disturbs less than the wall clock
        out["overhead_cpu_pct"] = round(100 * (median_cpu["scan"] / median_cpu["forward"] - 1), 1)
        out["torch_overhead_cpu_pct"] = round(100 * (median_cpu["torch"] / median_cpu["forward"] - 1), 1)
    return (
        out
        | {f"{name}_s": [round(t, 2) for t in ts] for name, ts in times.items()}
        | {f"{name}_cpu_s": [round(t, 2) for t in ts] for name, ts in cpu.items()}
    )


def on_ray(workers: int, tokens: int) -> dict:
    import torch

    from gptviz import index as ix
    from gptviz.index.distributed import scan_on_ray

    model, docs = _model("bundled"), _docs(tokens)
    plan = ix.plan_scan(model, docs)
    started = time.perf_counter()
    single = ix.finish_scan(plan, ix.scan_batches(model, docs, plan))
    single_s = time.perf_counter() - started
    started = time.perf_counter()
    index = scan_on_ray("shakespeare-pre", docs, plan, workers=workers)
    ray_s = time.perf_counter() - started
    same = all(
        __import__("numpy").array_equal(single.arrays[k], index.arrays[k], equal_nan=True)
        for k in ("top_values", "top_pos", "hist_counts", "quantiles")
    )
    return {
        "part": "ray",
        "workers": workers,
        "tokens": plan.tokens,
        "single_process_s": round(single_s, 1),
        "ray_s": round(ray_s, 1),
        "ray_start_included": True,
        "speedup": round(single_s / ray_s, 2),
        "equal_to_single_pass": same,
        "threads": torch.get_num_threads(),
    }


def peak_memory(copies: int) -> dict:
    import json as _json
    import resource
    import tempfile
    from pathlib import Path

    from gptviz import index as ix

    folder = Path(tempfile.mkdtemp())
    lines = [
        _json.dumps({"text": p.read_text(encoding="utf-8")})
        for p in __import__("gptviz.training.corpus", fromlist=["x"]).play_files()[:6]
    ]
    (folder / "c.jsonl").write_text(("\n".join(lines) + "\n") * copies)
    model = _model("bundled")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    docs = ix.tokenize_corpus(folder / "c.jsonl", folder / "ids")
    index = ix.build_index(model, docs)
    return {
        "part": "memory",
        "copies": copies,
        "tokens": index.tokens,
        "seconds": round(time.perf_counter() - started),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "rss_before_mb": round(before),
    }


def child(spec: str, args) -> dict:
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    part, value = spec.split(":")
    if part == "overhead":
        return overhead(value, args.tokens if value == "bundled" else args.gpt2_tokens, args.repeats)
    if part == "ray":
        return on_ray(int(value), args.tokens)
    return peak_memory(int(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("overhead", "ray", "memory"))
    parser.add_argument("--tokens", type=int, default=300_000, help="bundled model's tokens (overhead, ray)")
    parser.add_argument("--gpt2-tokens", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    plan = {
        "overhead": ["overhead:bundled", "overhead:gpt2-small"],
        "ray": ["ray:1", "ray:2"],
        "memory": ["memory:1", "memory:10"],
    }
    rows = []
    for part in [args.only] if args.only else list(plan):
        for spec in plan[part]:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_index",
                    "--child",
                    spec,
                    "--tokens",
                    str(args.tokens),
                    "--gpt2-tokens",
                    str(args.gpt2_tokens),
                    "--repeats",
                    str(args.repeats),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if out.returncode:
                raise SystemExit(f"{spec} failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    print(f"\n{os.cpu_count()} CPU(s); load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")


if __name__ == "__main__":
    main()
