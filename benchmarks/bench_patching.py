"""The residual-stream patching sweep on a 128-token pair: time and peak memory of gptviz.attribution's sweep beside
the all-at-once algorithm it replaced (every patched copy in one batch with every position's logits), each in a
fresh process so its peak resident memory is its own.

The pair is the one a hostile visitor used: " a" x 128 and the same with " b" at token 64.

    python benchmarks/bench_patching.py                     # bundled model (both) and gpt2-small (new only)
    python benchmarks/bench_patching.py --old-gpt2-small    # also the old algorithm on gpt2-small (~7 GB, minutes)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T, DIFFER_AT = 128, 64


def one_run(model_name: str, method: str) -> dict:
    """Runs inside the child process: load, measure the baseline RSS, sweep, report."""
    import torch
    from gptviz import GPT, PRESETS, attribution, load_pretrained
    from gptviz.attribution import logit_difference, normalised
    from gptviz.hooks import capture
    from gptviz.interventions import Edit
    from gptviz.tokenizer import encode
    from gptviz.hooks import act_name

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    model = load_pretrained(model_name) if model_name != "gpt2-small" else GPT(PRESETS["gpt2-small"], seed=0).eval()
    a, b = encode(" a")[0], encode(" b")[0]
    clean = [a] * T
    corrupted = list(clean)
    corrupted[DIFFER_AT] = b
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    if method == "new":
        result = attribution.residual_patching(model, clean, corrupted, a, b).scores
    else:  # the previous algorithm: T copies at once, every position's logits
        clean_t, corrupted_t = torch.tensor([clean]), torch.tensor([corrupted])
        names = [act_name("resid_pre", i) for i in range(model.config.n_layers)]
        with torch.no_grad():
            clean_logits, cache = capture(model, clean_t, names)
            corrupted_logits, _ = capture(model, corrupted_t, ())
            base = float(logit_difference(clean_logits, a, b)), float(logit_difference(corrupted_logits, a, b))
            result = torch.empty(len(names), T)
            for layer, name in enumerate(names):
                src = cache[name]

                def fn(value, offset, src=src):
                    value = value.clone()
                    value[range(T), range(T)] = src[0, range(T)]
                    return value
                logits, _ = capture(model, corrupted_t.expand(T, T), (), edits=[Edit(name, fn, "patch")])
                result[layer] = normalised(logit_difference(logits, a, b), *base)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"model": model_name, "method": method, "seconds": seconds, "peak_mb": peak / 2**20,
            "sweep_mb": (peak - before) / 2**20, "scores": result.flatten()[:: max(1, result.numel() // 64)].tolist()}


def run_child(model_name: str, method: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", model_name, method], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--old-gpt2-small", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(*args.child)))
        return
    runs = [("shakespeare-pre", "new"), ("shakespeare-pre", "old"), ("gpt2-small", "new")]
    if args.old_gpt2_small:
        runs.append(("gpt2-small", "old"))
    results = [run_child(*r) for r in runs]
    print(f"residual patching sweep, {T}-token pair, torch threads {os.environ.get('BENCH_THREADS', '2')}")
    print("| model | algorithm | seconds | peak RSS (MB) | of which the sweep (MB) |")
    print("|---|---|---|---|---|")
    for r in results:
        name = "from the layer and first patched position, batched" if r["method"] == "new" else "all at once (before)"
        print(f"| {r['model']} | {name} | {r['seconds']:.2f} | {r['peak_mb']:,.0f} | {r['sweep_mb']:,.0f} |")
    by = {(r["model"], r["method"]): r for r in results}
    for model_name in ("shakespeare-pre", "gpt2-small"):
        new, old = by.get((model_name, "new")), by.get((model_name, "old"))
        if new and old:
            worst = max(abs(x - y) for x, y in zip(new["scores"], old["scores"]))
            print(f"{model_name}: new/old time {new['seconds'] / old['seconds']:.2f}x, sweep memory "
                  f"{new['sweep_mb'] / max(old['sweep_mb'], 1):.3f}x, largest score difference {worst:.1e}")


if __name__ == "__main__":
    main()
