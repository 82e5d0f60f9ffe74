"""`python -m gptviz index ...`: build an index on one machine, one shard of it, on a Ray cluster or a GPU, and
`python -m gptviz index merge OUT PART...` to combine shards.

Threads: one torch thread per process by default. A scan's work is many small matrix products; on a 2-core machine that
had other work, two threads took several times as long as one for the same CPU time (OpenMP threads wait on each other),
and on an idle one two threads gained little (docs/benchmarks-history.md, "Neuron index: the corpus scan";
`python -m benchmarks index` times the scan). To use more cores, run shards (`--shard`, or `--ray` with a worker per
core), each on one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
from pathlib import Path

RAY_HELP = (
    "scan on Ray: alone for a local Ray instance started here, or the address of a running cluster "
    "(ray://HOST:10001 or HOST:6379); shards become Ray tasks, each streaming its own windows"
)


def add_arguments(x: argparse.ArgumentParser) -> None:
    x.add_argument("model", help="a bundled model's name, a checkpoint folder or a Hub id")
    x.add_argument(
        "--corpus",
        default=None,
        help="your corpus: a text file, a folder of text files (one document each), or a Parquet or "
        "JSON-lines file with a text column (default: the bundled complete works of Shakespeare)",
    )
    x.add_argument("--text-column", default="text", help="the text column of a Parquet or JSON-lines corpus")
    x.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="stop reading the corpus (yours or the bundled works) after this many tokens",
    )
    x.add_argument(
        "--out",
        default=None,
        help="output folder (default: ./<model>-index, or ./<model>-shard-I-of-N "
        "with --shard); the shipped index of a bundled model is "
        "gptviz/bundled/<name>/index",
    )
    x.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="scan shard I of N (0 <= I < N) and write a partial index; combine the N partial indexes "
        "with `index merge`",
    )
    x.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS", help=RAY_HELP)
    x.add_argument("--workers", type=int, default=2, help="Ray tasks at once, each one CPU (default 2)")
    x.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda or mps: where the model runs; the statistics are kept in float32 either way",
    )
    x.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "float16", "bfloat16"),
        help="the model's precision on the device (half precision on a GPU)",
    )
    x.add_argument(
        "--batch",
        type=int,
        default=None,
        help="windows per forward pass (default: about 9M unit values a batch: 34 windows for the "
        "bundled models, 1 for gpt2-small)",
    )
    x.add_argument(
        "--stride", type=int, default=None, help="tokens between window starts (default: n_ctx - n_ctx // 4)"
    )
    x.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads per process (default 1; more cores: shards or --ray, see above)",
    )


def add_merge_arguments(m: argparse.ArgumentParser) -> None:
    m.add_argument("out", help="folder for the merged index")
    m.add_argument("parts", nargs="+", help="the partial index folders written by --shard")


def _documents(args, store_dir: Path, enc=None):
    """(documents, source, corpus metadata): --max-tokens holds for every source, and the metadata records it (the
    tokens read are the index's corpus.tokens). `enc`: the model's tokenizer (tokenizer_for)."""
    from .corpus import corpus_documents, tokenize_corpus

    if args.corpus is None:
        return (
            corpus_documents(limit_tokens=args.max_tokens, enc=enc),
            "shakespeare-works",
            {"max_tokens": args.max_tokens},
        )
    path = Path(args.corpus).expanduser().resolve()

    shown = []

    def report(tokens: int, name: str) -> None:
        shown.append(True)
        print(f"\rtokenizing {path.name}: {tokens:,} tokens", end="", file=sys.stderr, flush=True)

    def skipped(name: str, why: str) -> None:  # a folder's links out of it, FIFOs: listed before the first document
        print(f"skipped {name}: {why}", file=sys.stderr, flush=True)

    try:
        docs = tokenize_corpus(
            path,
            store_dir / "corpus.ids",
            text_column=args.text_column,
            limit_tokens=args.max_tokens,
            progress=report,
            on_skip=skipped,
            enc=enc,
        )
    finally:
        if shown:
            print(file=sys.stderr)  # end the progress line, also before an error
    return docs, path.name, {"path": str(path), "text_column": args.text_column, "max_tokens": args.max_tokens}


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes I/N, e.g. 0/4; got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard I/N needs 0 <= I < N, got {text!r}")
    return i, n


def run(args) -> int:
    import torch

    from ..model.devices import place
    from ..model.tokenizer import tokenizer_for
    from ..model.weights import bundled_models, load_pretrained
    from .accumulate import scan_batches
    from .finish import finish_scan
    from .plan import plan_scan
    from .progress import text_progress
    from .store import save_index

    torch.set_num_threads(max(1, args.threads))
    shard = _shard(args.shard) if args.shard else None
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    if shard and args.ray:
        raise ValueError("--shard and --ray do not go together: --ray runs every shard")
    model = place(load_pretrained(args.model).eval(), args.device, args.dtype)
    name = args.model if args.model in bundled_models() else Path(args.model).name
    with tempfile.TemporaryDirectory(prefix="gptviz-index-") as tmp:
        docs, source, corpus = _documents(args, Path(tmp), tokenizer_for(model))  # the model's own ids
        tokens = sum(len(d.ids) for d in docs)
        print(
            f"indexing {name} over {len(docs):,} documents, {tokens:,} tokens of {source}", file=sys.stderr, flush=True
        )
        plan = plan_scan(
            model, docs, model_name=name, source=source, corpus=corpus, stride=args.stride, batch=args.batch
        )
        if args.ray:
            from .distributed import scan_on_ray

            index = scan_on_ray(
                args.model,
                docs,
                plan,
                address=args.ray,
                workers=args.workers,
                device=args.device,
                dtype=args.dtype,
                threads=args.threads,
                progress=text_progress(f"index {name} on Ray"),
            )
        else:
            batches = plan.batches(*shard) if shard else range(plan.n_batches)
            label = f"index {name}" + (f" shard {shard[0]}/{shard[1]}" if shard else "")
            part = scan_batches(model, docs, plan, batches, progress=text_progress(label))
            if shard:
                from .partial import save_partial

                part.run = _this_run(args)
                out = save_partial(plan, part, args.out or f"{name}-shard-{shard[0]}-of-{shard[1]}")
                print(
                    json.dumps(
                        {
                            "out": str(out),
                            "batches": part.batches,
                            "tokens": part.tokens,
                            "seconds": round(part.seconds, 2),
                        }
                    )
                )
                return 0
            index = finish_scan(plan, part)
        run = _this_run(args)
        run["peak_rss_mb"] = max(run["peak_rss_mb"], index.meta["scan"].get("peak_rss_mb", 0))  # Ray's tasks'
        index.meta["scan"].update(run, workers=args.workers if args.ray else 1)
        out = save_index(index, args.out or f"{name}-index")
    scan = index.meta["scan"]
    print(
        json.dumps(
            {
                "out": str(out),
                "seconds": scan["seconds"],
                "tokens_per_s": scan["tokens_per_s"],
                "peak_rss_mb": scan["peak_rss_mb"],
                "bytes_on_disk": sum(p.stat().st_size for p in out.iterdir()),
            }
        )
    )
    return 0


def _this_run(args) -> dict:
    """What ran a scan, for meta.scan (a shard keeps it in its partial index for the merge): one set of keys from
    every path (tests/index/test_index_cli.py)."""
    import torch

    return {
        "device": args.device,
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def _merged_runs(runs: list[dict]) -> dict:
    """The shards' runs as one: values that differ joined with "+" (as the statistics' "C+torch"), the most threads,
    the largest peak memory (this process's included); None where no shard said (a partial index of older gptviz)."""

    def joined(key):
        values = sorted({str(r[key]) for r in runs if r.get(key) is not None})
        return "+".join(values) or None

    threads = [r["threads"] for r in runs if r.get("threads") is not None]
    peaks = [r["peak_rss_mb"] for r in runs if r.get("peak_rss_mb") is not None]
    own = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {
        "device": joined("device"),
        "dtype": joined("dtype"),
        "threads": max(threads, default=None),
        "torch": joined("torch"),
        "peak_rss_mb": max(peaks + [own]),
    }


def merge_target(out, parts) -> Path:
    """Where `index merge` may write: a new path or an empty folder, neither one of its input shards nor inside one.
    ValueError otherwise, before anything is read or written."""
    target = Path(out).expanduser().resolve()
    for part in parts:
        shard = Path(part).expanduser().resolve()
        if target == shard or shard in target.parents:
            raise ValueError(
                f"the merge's output {out!r} is {'' if target == shard else 'inside '}its input shard "
                f"{part!r}: nothing written"
            )
    if target.exists() and not target.is_dir():
        raise ValueError(f"{out!r} exists and is not a folder: nothing written")
    if target.is_dir() and any(target.iterdir()):
        raise ValueError(f"the folder {out!r} is not empty: the merge writes only into a new or an empty folder")
    return target


def _save_new(index, target: Path) -> Path:
    """Write the index into a temporary folder beside `target`, then rename it into place: a merge that fails leaves
    nothing, and the rename itself refuses a folder that filled up meanwhile (ENOTEMPTY)."""
    from .atomic_write import TEMP_PREFIX
    from .store import save_index

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{target.name}.", dir=target.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # a folder as mkdir makes it (mkdtemp's is private)
        save_index(index, tmp)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def run_merge(args) -> int:
    from .accumulate import merge_scans
    from .finish import finish_scan
    from .partial import load_partial

    target = merge_target(args.out, args.parts)
    loaded = [load_partial(p) for p in args.parts]
    plan = loaded[0][0]
    index = finish_scan(plan, merge_scans([part for _, part in loaded]))
    # seconds stays the shards' summed time (they may have run anywhere, at any time); workers: one per shard
    index.meta["scan"].update(_merged_runs([part.run for _, part in loaded]), shards=len(loaded), workers=len(loaded))
    _save_new(index, target)
    print(
        json.dumps(
            {
                "out": str(Path(args.out)),
                "shards": len(loaded),
                "tokens": index.tokens,
                "scan_seconds_summed": index.meta["scan"]["seconds"],
            }
        )
    )
    return 0


def add_export_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument(
        "model", help="the model the index was built with: a bundled model's name, a checkpoint folder or a Hub id"
    )
    e.add_argument("--out", required=True, help="a new or empty folder for the batch files")
    e.add_argument("--index", default=None, help="the index folder (default: a bundled model's shipped index)")
    e.add_argument("--units", default=None, help="only these units, e.g. L2N26,L1H3 (default: every one)")
    e.add_argument("--per-batch", type=int, default=128, help="features per batch file (default 128)")
    e.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")


def run_export(args) -> int:
    """`python -m gptviz index export MODEL --out FOLDER`: every unit's page in Neuronpedia's feature-dashboard
    shape (gptviz.index.dashboard), the contexts of its top and band examples read by the model."""
    import torch

    from ..model.tokenizer import tokenizer_for
    from ..model.weights import load_pretrained
    from .dashboard import export_index
    from .progress import text_progress
    from .read import index_documents
    from .store import bundled_index, index_mismatch, load_index

    torch.set_num_threads(max(1, args.threads))
    if args.per_batch < 1:
        raise ValueError(f"--per-batch must be at least 1, got {args.per_batch}")
    index = load_index(args.index) if args.index else bundled_index(args.model)
    if index is None:
        raise ValueError(f"{args.model!r} has no shipped index: name its folder with --index")
    model = load_pretrained(args.model).eval()
    why = index_mismatch(index, model, weights=True)
    if why:
        raise ValueError(why)
    units = [u.strip() for u in args.units.split(",") if u.strip()] if args.units else None
    docs = index_documents(index, enc=tokenizer_for(model))  # the corpus read again in the model's own tokenizer
    out = export_index(
        index,
        docs,
        model,
        args.out,
        units=units,
        per_batch=args.per_batch,
        progress=text_progress(f"export {index.meta['model']['name'] or args.model}"),
    )
    listed = json.loads((out / "export.json").read_text(encoding="utf-8"))
    print(
        json.dumps(
            {
                "out": str(out),
                "units": listed["units"],
                "batches": len(listed["batches"]),
                "bytes": sum(p.stat().st_size for p in out.rglob("*.json")),
            }
        )
    )
    return 0
