"""The corpus scan of gptviz.index: seconds, tokens/s and peak resident memory, each run in a fresh process so its
peak RSS (ru_maxrss, which includes torch's own ~220 MB and the model) is its own.

    python benchmarks/bench_index.py                  # shakespeare-pre over the complete works; gpt2-small, 100K tokens
    python benchmarks/bench_index.py --only bundled   # or --only gpt2-small

gpt2-small has random weights (its scan costs the same as with trained ones) and scans the first 100K tokens of the
complete works, cut into the same plays.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2_TOKENS = 100_000


def one_run(which: str) -> dict:
    """Runs inside the child process: load, scan, report."""
    import resource
    import time

    import torch
    from gptviz import GPT, PRESETS, load_pretrained
    from gptviz import index as ix

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    docs = ix.corpus_documents()
    if which == "bundled":
        model, name = load_pretrained("shakespeare-pre"), "shakespeare-pre, complete works"
    else:
        model, name = GPT(PRESETS["gpt2-small"], seed=0).eval(), f"gpt2-small (random weights), {GPT2_TOKENS:,} tokens"
        kept, left = [], GPT2_TOKENS
        for d in docs:
            if left <= 0:
                break
            kept.append(ix.Document(d.name, d.ids[:left], d.held_out))
            left -= len(kept[-1].ids)
        docs = kept
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    index = ix.build_index(model, docs, model_name=name)
    seconds = time.perf_counter() - start
    cfg = model.config
    return {"run": name, "tokens": index.tokens, "units": index.n_units,
            "layers_x_d_ff": f"{cfg.n_layers} x {cfg.d_ff}", "heads": cfg.n_layers * cfg.n_heads,
            "n_ctx": cfg.n_ctx, "stride": index.meta["windows"]["stride"], "batch": index.meta["scan"]["batch"],
            "seconds": round(seconds, 1), "tokens_per_s": round(index.tokens / seconds),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "rss_before_scan_mb": round(before), "threads": torch.get_num_threads(), "torch": torch.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("bundled", "gpt2-small"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child)))
        return
    rows = []
    for which in [args.only] if args.only else ["bundled", "gpt2-small"]:
        out = subprocess.run([sys.executable, __file__, "--child", which], capture_output=True, text=True,
                             cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(f"torch {rows[0]['torch']}, {rows[0]['threads']} thread(s) on {os.cpu_count()} CPU(s); "
          f"load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}\n")
    print("| scan | tokens | units (neurons + heads) | n_ctx / stride / batch | seconds | tokens/s | peak RSS (fresh process) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['tokens']:,} | {r['units']:,} ({r['layers_x_d_ff']} + {r['heads']}) | "
              f"{r['n_ctx']} / {r['stride']} / {r['batch']} | {r['seconds']} | {r['tokens_per_s']:,} | "
              f"{r['peak_rss_mb']:,} MB (before the scan {r['rss_before_scan_mb']:,}) |")


if __name__ == "__main__":
    main()
