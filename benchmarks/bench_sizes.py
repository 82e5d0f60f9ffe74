"""Every job's size estimate (gptviz.model.sizes, gptviz.serve.job_sizes, a scan's gptviz.index.scan_nbytes) beside
what the job measurably held at its peak, on the bundled model: the estimate is what the server reserves before it
admits the job, so it should cover the peak (ratio >= 1) without being far above it.

    python -m benchmarks sizes                     # every job, a prompt of the model's whole context (128 tokens)
    python -m benchmarks sizes -- --tokens 64 --skip-grow

The peaks are the most bytes of CPU tensors each call held at once (torch's allocation records, benchmarks/
memory_peak.py: the weights made before it not counted); Grow's is the growth of the resident memory's peak in a fresh
process as the server runs it (bench_grow_induction.measure_peak: the heap's pages and the allocator's arenas too),
the measure its reservation is meant for. Estimates that add a fixed allowance for the process's own overhead
(Norms: 96 MiB) or a fragmentation share (a capture) stand well above a tensor peak by design."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch

from benchmarks.memory_peak import torch_peak

MiB = 2**20


def _jobs(model, ids: list[int], folder, skip_grow: bool, grow_steps: int) -> list[tuple[str, Callable, Callable]]:
    """(job, its estimate in bytes, the job itself returning its measured peak) for each job a visitor can start."""
    from gptviz import GPT, PRESETS
    from gptviz import index as ix
    from gptviz import methods as analysis
    from gptviz.export import prompt_capture_npz
    from gptviz.methods import attribution, wiring
    from gptviz.methods.graph import attribution_graph
    from gptviz.methods.graph_contributors import top_contributors
    from gptviz.methods.interventions import run_with_edits
    from gptviz.model import sizes
    from gptviz.model.generate import generate, stream
    from gptviz.model.hooks import capture
    from gptviz.model.weights import load_checkpoint, weights_nbytes

    cfg, T = model.config, len(ids)
    batch = torch.tensor([ids])
    corrupted = ids[: T // 2] + [(ids[T // 2] + 1) % cfg.vocab_size] + ids[T // 2 + 1 :]
    target, other = ids[-1], (ids[-1] + 1) % cfg.vocab_size
    lens_cache = capture(model, batch)[1]  # batched, as the Activations page passes its cached capture
    shipped = ix.bundled_index("shakespeare-pre")
    docs = _docs(shipped)
    examples = ix.top_examples(shipped, "L1H1")
    scan_docs = [ix.Document(d.name, d.ids[: 40 * cfg.n_ctx], d.held_out) for d in docs[:1]]
    build = PRESETS["gpt2-small"].replace(n_layers=2)
    jobs = [
        (
            "capture, every hook point",
            lambda: sizes.capture_work_nbytes(cfg, model.hook_names, T),
            peak(lambda: capture(model, batch)),
        ),
        (
            "next token, plain forward",
            lambda: sizes.capture_work_nbytes(cfg, (), T),
            peak(lambda: torch.softmax(run_with_edits(model, batch, [])[0][0, -1], -1)),
        ),
        (
            "live generation, first step",
            lambda: sizes.generation_nbytes(cfg, T, 1),
            peak(lambda: next(stream(model, ids, 1, attention=True))),
        ),
        (
            "continuation, 40 tokens",
            lambda: sizes.sampling_nbytes(cfg, T, 40),
            peak(lambda: generate(model, ids, 40, temperature=0.0)),
        ),
        ("logit lens", lambda: sizes.lens_nbytes(cfg, T), peak(lambda: analysis.logit_lens(model, lens_cache))),
        (
            "direct attribution",
            lambda: sizes.direct_attribution_nbytes(cfg, T),
            peak(lambda: attribution.direct_logit_attribution(model, batch, target, other)),
        ),
        (
            "patching, both sweeps",
            lambda: sizes.patching_nbytes(cfg, T),
            peak(
                lambda: (
                    attribution.residual_patching(model, ids, corrupted, target, other),
                    attribution.head_patching(model, ids, corrupted, target, other),
                )
            ),
        ),
        (
            "integrated gradients",
            lambda: sizes.saliency_nbytes(cfg, T),
            peak(lambda: attribution.integrated_gradients(model, ids, target, other)),
        ),
        ("attribution graph", lambda: sizes.graph_nbytes(cfg, T), peak(lambda: attribution_graph(model, ids, target))),
        (
            "top contributors",
            lambda: sizes.contributors_nbytes(cfg, T),
            peak(lambda: top_contributors(model, ids, target, other)),
        ),
        (
            "Norms: both wirings measured",
            lambda: sizes.measuring_nbytes(cfg, T),
            peak(lambda: wiring.compare_wirings(cfg, ids)),
        ),
        (
            "every unit's value",
            lambda: sizes.units_at_nbytes(cfg, T),
            peak(lambda: ix.units_at(model, ids, T - 1, index=shipped, k=8)),
        ),
        (
            "a head's top examples",
            lambda: sizes.example_contexts_nbytes(cfg, examples[0].unit, *ix.context_batch(shipped, docs, examples)),
            peak(lambda: ix.example_contexts(shipped, docs, examples, model=model)),
        ),
        (".npz export", lambda: sizes.prompt_capture_npz_nbytes(cfg, T), peak(lambda: prompt_capture_npz(model, ids))),
        (
            "index scan, 40 windows",
            lambda: ix.scan_nbytes(cfg, scan_docs),
            peak(lambda: ix.build_index(model, scan_docs)),
        ),
        ("model build, gpt2-small 2 layers", lambda: sizes.model_build_nbytes(build), peak(lambda: GPT(build, seed=0))),
        ("model load, bundled folder", lambda: weights_nbytes(folder), peak(lambda: load_checkpoint(folder))),
    ]
    if not skip_grow:
        from benchmarks.bench_grow_induction import measure_peak
        from gptviz.serve.job_sizes import job_nbytes
        from gptviz.serve.training_jobs import induction_growth_spec

        spec = induction_growth_spec(("pre",))
        jobs.append(
            (
                f"Grow, pre-norm ({grow_steps} steps, RSS)",
                lambda: job_nbytes(spec),
                lambda: measure_peak("pre", grow_steps),
            )
        )
    return jobs


def peak(fn: Callable) -> Callable[[], int]:
    """A job that runs `fn` and returns the most bytes of tensors it held at once."""
    return lambda: torch_peak(fn)[1]


def _docs(index):
    """The bundled index's corpus, as the unit page reads it."""
    from gptviz.app.unit_index import _docs_for

    return _docs_for(index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128, help="the prompt's length (at most the model's context)")
    parser.add_argument("--skip-grow", action="store_true", help="leave out Grow's run (a child process, minutes)")
    parser.add_argument("--grow-steps", type=int, default=6)
    args = parser.parse_args()
    from gptviz.model.weights import bundled_models, load_checkpoint

    folder = bundled_models()["shakespeare-pre"]
    model = load_checkpoint(folder).eval()
    ids = torch.randint(0, 5000, (args.tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    rows = []
    for name, estimate, run in _jobs(model, ids, folder, args.skip_grow, args.grow_steps):
        started = time.perf_counter()
        measured = run()
        rows.append((name, estimate(), measured, time.perf_counter() - started))
        print(f"{name}: estimate {rows[-1][1] / MiB:,.1f} MiB, peak {measured / MiB:,.1f} MiB", flush=True)
    print(f"\nshakespeare-pre, {args.tokens} tokens; load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| job | estimate (MiB) | measured peak (MiB) | estimate / peak | seconds |")
    print("|---|---|---|---|---|")
    for name, est, measured, seconds in rows:
        ratio = f"{est / measured:.2f}x" if measured else "-"
        print(f"| {name} | {est / MiB:,.1f} | {measured / MiB:,.1f} | {ratio} | {seconds:.1f} |")
    under = [name for name, est, measured, _ in rows if est < measured]
    print(f"under the peak: {', '.join(under) if under else 'none'}")


if __name__ == "__main__":
    main()
