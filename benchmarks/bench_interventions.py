"""What asking "why" costs: patching sweeps and edited forward passes against plain forward passes, in one run.

On GPT-2 small (random weights, CPU, float32) with a 32-token clean/corrupted pair that differs in one name:
  - residual patching sweep (gptviz.methods.attribution.residual_patching, every layer x position) against
    (layers + 1) plain forward passes of the batch it runs (32 rows of the 32-token corrupted prompt);
  - head patching sweep (every layer x head, one batched pass) against one plain pass of its batch (144 rows);
  - one forward pass with an edit (a head zero-ablated; a residual-stream patch) against a plain one.
Contenders run interleaved (benchmarks/run.py's `interleaved`: rotating order, medians of per-round ratios), and
the thread's CPU time is the primary clock (wall time beside it).

    python -m benchmarks interventions                 # 3 rounds of the sweeps, 25 of the single passes
    python -m benchmarks interventions -- --repeats 5 --threads 2
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from benchmarks.run import build_ours, interleaved  # the engine benchmark's model and timing method
from gptviz import capture, get_tokenizer
from gptviz.methods.attribution import head_patching, residual_patching
from gptviz.methods.interventions import ablate_heads, patch_from

CLEAN = (
    "When Mary and John went to the store, John gave a drink to Mary. Afterwards the two of them walked "
    "home along the river bank, and then she said to him"
)
N_TOKENS = 32


def pair() -> tuple[torch.Tensor, torch.Tensor]:
    """32-token clean and corrupted prompts, the same length, differing in one name (John -> Paul)."""
    tok = get_tokenizer()
    clean = tok.encode(CLEAN)[:N_TOKENS]
    corrupted = tok.encode(CLEAN.replace("John gave", "Paul gave"))[:N_TOKENS]
    if (
        len(clean) != N_TOKENS
        or len(corrupted) != N_TOKENS
        or sum(a != b for a, b in zip(clean, corrupted, strict=True)) != 1
    ):
        raise ValueError("the pair must be 32 tokens each and differ in exactly one")
    return torch.tensor([clean]), torch.tensor([corrupted])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the sweep comparisons")
    parser.add_argument("--single-repeats", type=int, default=25, help="rounds of the single-pass comparisons")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model = build_ours()
    clean, corrupted = pair()
    tok = get_tokenizer()
    target, other = tok.encode(" Mary")[0], tok.encode(" John")[0]
    L, H, T = model.config.n_layers, model.config.n_heads, N_TOKENS
    rows, batch_heads = corrupted.expand(T, T), corrupted.expand(L * H, T)

    def plain_forwards():
        for _ in range(L + 1):
            model(rows)

    print("residual patching sweep ...", flush=True)
    resid = interleaved(
        {"sweep": lambda: residual_patching(model, clean, corrupted, target, other), "plain": plain_forwards},
        args.repeats,
        warmup=1,
    )
    print("head patching sweep ...", flush=True)
    heads = interleaved(
        {"sweep": lambda: head_patching(model, clean, corrupted, target, other), "plain": lambda: model(batch_heads)},
        args.repeats,
        warmup=1,
    )
    print("edited forward passes ...", flush=True)
    _, source = capture(model, clean, ["blocks.6.hook_resid_pre"])
    ablate = [ablate_heads(5, [1, 7])]
    patch = patch_from(source, "blocks.6.hook_resid_pre", positions=[9])
    single = interleaved(
        {
            "plain": lambda: model(corrupted),
            "plain_capture": lambda: capture(model, corrupted, ()),
            "ablated": lambda: capture(model, corrupted, (), edits=ablate),
            "patched": lambda: capture(model, corrupted, (), edits=patch),
        },
        args.single_repeats,
    )

    ms = lambda s: f"{s * 1e3:,.1f} ms"  # noqa: E731
    out = [
        "| benchmark | CPU time | CPU ratio | wall time | wall ratio | target | met (CPU) |",
        "|---|---|---|---|---|---|---|",
    ]

    def line(label, t, a, b, target):
        r, rw = t.ratio(a, b), t.ratio(a, b, "wall")
        met = "—" if target is None else ("yes" if r <= target else "**no**")
        out.append(
            f"| {label} | {ms(t.median(a))} vs {ms(t.median(b))} | {r:.3f}x | "
            f"{ms(t.median(a, 'wall'))} vs {ms(t.median(b, 'wall'))} | {rw:.3f}x | "
            f"{'≤ ' + str(target) + 'x' if target else '(for comparison)'} | {met} |"
        )

    line(
        f"Residual patching sweep ({L} layers x {T} positions) vs {L + 1} plain forwards of its {T}-row batch",
        resid,
        "sweep",
        "plain",
        2.0,
    )
    line(
        f"Head patching sweep ({L} x {H} heads, one batched pass) vs one plain forward of its {L * H}-row batch",
        heads,
        "sweep",
        "plain",
        None,
    )
    line("Forward with heads 5.1 and 5.7 zero-ablated vs plain forward, 32 tokens", single, "ablated", "plain", 1.1)
    line(
        "Forward with the residual stream patched at layer 6, position 9 vs plain forward, 32 tokens",
        single,
        "patched",
        "plain",
        1.1,
    )
    line(
        "capture() with no hook points kept and no edits vs plain forward, 32 tokens (the path's own cost)",
        single,
        "plain_capture",
        "plain",
        None,
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\nGPT-2 small (random weights), CPU, float32, torch {torch.__version__}, {args.threads} thread(s) on "
        f"{os.cpu_count()} CPU(s), Python {platform.python_version()}; {args.repeats} rounds of the sweeps, "
        f"{args.single_repeats} of the single passes; load average at the end {load}; "
        f"the run took {time.perf_counter() - started:.0f} s.\n"
    )
    print("\n".join(out))


if __name__ == "__main__":
    main()
