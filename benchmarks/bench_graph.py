"""The attribution graph (issue 58) for a 64-token prompt beside one forward + backward pass of the same model, in the
same run: the bundled pre-norm model and gpt2-small (random weights: the time does not depend on them), CPU, float32.
Targets on a 2-core CPU: under 2 s for the bundled model, under 10 s for gpt2-small. Wall time and the thread's CPU
time (with one torch thread, all of the work; the least disturbed by other processes on a shared machine). Each time
is the median of the repeats; the ratio is the median of per-round ratios (graph and pass back to back).

    python -m benchmarks graph
    python -m benchmarks graph -- --tokens 128 --repeats 5 --threads 2
    python -m benchmarks graph -- --memory-sizes 8 32 64 128 256   # memory: the estimate against the peak per size

With --memory-sizes, instead: for each model and each prompt length within its context, what the app reserves for the
graph (gptviz.model.sizes.graph_nbytes, the reservation the Why page makes) beside the most bytes of tensors the graph
held at once (torch's allocation records, benchmarks.memory_peak.torch_peak), and the graph's seconds (profiled, so
slower than above).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

import torch

from gptviz import GPT, PRESETS, get_tokenizer, load_pretrained
from gptviz.methods.graph import attribution_graph
from gptviz.model.sizes import graph_nbytes

TEXT = Path(__file__).resolve().parents[1] / "data" / "tinyshakespeare.txt"
TARGETS = {"shakespeare-pre": 2.0, "gpt2-small": 10.0}


def forward_backward(model, ids: torch.Tensor, target: int) -> None:
    """One training-style pass: every position's logits, then the gradient of one logit for every parameter."""
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        model(ids)[0, -1, target].backward()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(name: str, model, ids: list[int], target: int, repeats: int) -> dict:
    batch = torch.tensor([ids])
    with torch.no_grad():
        model(batch)
    before = peak_rss_mib()  # the first graph before any backward pass: its own peak shows
    graph = attribution_graph(model, ids, target)
    grown = peak_rss_mib() - before
    forward_backward(model, batch, target)  # warm-up
    times = {clock: {"graph": [], "pass": [], "ratio": []} for clock in ("wall", "cpu")}
    for _ in range(repeats):
        marks = [(time.perf_counter(), time.thread_time())]
        attribution_graph(model, ids, target)
        marks.append((time.perf_counter(), time.thread_time()))
        forward_backward(model, batch, target)
        marks.append((time.perf_counter(), time.thread_time()))
        for k, clock in enumerate(("wall", "cpu")):
            graph_s, pass_s = marks[1][k] - marks[0][k], marks[2][k] - marks[1][k]
            for key, value in (("graph", graph_s), ("pass", pass_s), ("ratio", graph_s / pass_s)):
                times[clock][key].append(value)
    median = {clock: {key: statistics.median(v) for key, v in per.items()} for clock, per in times.items()}
    return {
        "name": name,
        "tokens": len(ids),
        **median,
        "nodes": graph.pruning.nodes_kept,
        "edges": graph.pruning.edges_kept,
        "total_nodes": graph.pruning.nodes_total,
        "estimate_mib": graph_nbytes(model.config, len(ids)) / 2**20,
        "rss_growth_mib": grown,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, like a shared server)")
    parser.add_argument("--memory-sizes", type=int, nargs="+", help="prompt lengths: the memory table instead")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    enc = get_tokenizer()
    text = enc.encode(TEXT.read_text(encoding="utf-8")[:40000])
    ids, target = text[: args.tokens], text[args.tokens]
    models = {
        "shakespeare-pre": lambda: load_pretrained("shakespeare-pre"),
        "gpt2-small": lambda: GPT(PRESETS["gpt2-small"], seed=0).eval(),
    }
    if args.memory_sizes:
        memory_table(models, text, args.memory_sizes)
        return
    print(
        f"torch {torch.__version__}, {args.threads} thread(s) on {os.cpu_count()} CPU(s), {args.repeats} repeats; "
        f"load average {os.getloadavg()[0]:.2f} at the start"
    )
    print(
        "| model | tokens | forward+backward, wall / CPU (s) | graph, wall / CPU (s) | graph / pass, wall / CPU "
        "| target | met (wall) | nodes kept / total | edges kept | estimate (MiB) "
        "| peak RSS growth, first graph (MiB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, load in models.items():
        r = measure(name, load(), ids, target, args.repeats)
        wall, cpu, limit = r["wall"], r["cpu"], TARGETS[name]
        print(
            f"| {name} | {r['tokens']} | {wall['pass']:.3f} / {cpu['pass']:.3f} | {wall['graph']:.2f} / "
            f"{cpu['graph']:.2f} | {wall['ratio']:.1f}x / {cpu['ratio']:.1f}x | < {limit:.0f} s | "
            f"{'yes' if wall['graph'] < limit else 'no'} | {r['nodes']} / {r['total_nodes']:,} | {r['edges']} | "
            f"{r['estimate_mib']:.0f} | {r['rss_growth_mib']:.0f} |",
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.2f} at the end (a shared machine: times are noisy)")


def memory_table(models: dict, text: list[int], sizes: list[int]) -> None:
    """Per model and prompt length (within its context): the graph's reservation against its tensors' peak."""
    from benchmarks.memory_peak import torch_peak

    print(f"torch {torch.__version__}, load average {os.getloadavg()[0]:.2f} at the start")
    print("| model | tokens | reserved (MiB) | tensors' peak (MiB) | peak / reserved | within | graph, profiled (s) |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, load in models.items():
        model = load()
        for n in sizes:
            if n > model.config.n_ctx:
                continue
            reserved = graph_nbytes(model.config, n)
            started = time.perf_counter()
            _, peak = torch_peak(lambda n=n, model=model: attribution_graph(model, text[:n], text[n]))
            worst = max(worst, peak / reserved)
            print(
                f"| {name} | {n} | {reserved / 2**20:.1f} | {peak / 2**20:.1f} | {peak / reserved:.2f} | "
                f"{'yes' if peak <= reserved else '**no**'} | {time.perf_counter() - started:.1f} |",
                flush=True,
            )
    print(f"largest peak / reserved {worst:.2f}; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
