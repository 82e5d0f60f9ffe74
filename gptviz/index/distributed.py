"""The scan on Ray: a local instance or a running cluster, each shard a task that loads the model and streams its own
windows, the driver merging the partial scans exactly (see scan.py).

    python -m gptviz index shakespeare-pre --ray                       # a local Ray instance, 2 workers
    python -m gptviz index gpt2 --corpus /data/texts --ray ray://head:10001 --workers 16 --device cuda

On a multi-machine cluster the model must load on every worker (a bundled model's name, a Hub id in the workers'
cache, or a checkpoint folder at the same path on every machine) and gptviz must be installed there; the corpus is
tokenized once by the driver and sent to the workers through Ray's object store. Ray is an optional extra:
`pip install ray` (from a checkout: `pip install '.[ray]'`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .accumulate import PartialScan, merge_scans
from .finish import finish_scan
from .plan import ScanPlan
from .store import NeuronIndex

SHARDS_PER_WORKER = 4  # more shards than workers: a finished shard reports progress, and a slow worker holds less


def _ray():
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install ray (from a checkout: pip install '.[ray]')") from None
    return ray


def _scan_shard(model_source: str, docs, plan: ScanPlan, batches: range, device: str, dtype: str, threads: int) -> dict:
    """One Ray task: load the model where it runs, scan its batches, return the partial scan as numpy arrays."""
    import resource

    import torch

    from ..model.devices import place
    from ..model.weights import load_pretrained
    from .accumulate import scan_batches

    torch.set_num_threads(max(1, threads))
    model = place(load_pretrained(model_source).eval(), device, dtype)
    part = scan_batches(model, docs, plan, batches)
    return {
        "key": part.key,
        "batches": part.batches,
        "tokens": part.tokens,
        "seconds": part.seconds,
        "statistics": part.statistics,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        **{name: getattr(part, name).numpy() for name in PartialScan.ARRAYS},
    }


def _as_partial(result: dict) -> PartialScan:
    import torch

    return PartialScan(
        result["key"],
        [tuple(r) for r in result["batches"]],
        result["tokens"],
        *(torch.from_numpy(np.array(result[name])) for name in PartialScan.ARRAYS),
        seconds=result["seconds"],
        statistics=result["statistics"],
        run={"peak_rss_mb": result["peak_rss_mb"]},
    )


def scan_on_ray(
    model_source: str,
    docs: Sequence,
    plan: ScanPlan,
    *,
    address: str | None = "local",
    workers: int = 2,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int = 1,
    shards: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> NeuronIndex:
    """The index of `plan` scanned by Ray tasks (`shards` of them, default SHARDS_PER_WORKER x workers, at most
    `workers` at once, each one CPU, or one GPU with device "cuda"), merged on the driver. `address`: "local" (or
    None) starts a local instance with `workers` CPUs; anything else is passed to ray.init. An instance started
    here is shut down at the end."""
    import time

    ray = _ray()
    started = time.perf_counter()
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    started_here = not ray.is_initialized()
    if started_here:
        if address in (None, "local"):
            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": {"OMP_NUM_THREADS": str(max(1, threads))}},
            )
        else:
            ray.init(address=address, log_to_driver=False)
    try:
        shards = min(plan.n_batches, shards or SHARDS_PER_WORKER * workers)
        task = ray.remote(num_cpus=1, num_gpus=1 if device == "cuda" else 0)(_scan_shard)
        docs_ref, plan_ref = ray.put(list(docs)), ray.put(plan)
        pending = [
            task.remote(model_source, docs_ref, plan_ref, plan.batches(i, shards), device, dtype, threads)
            for i in range(shards)
        ]
        parts, done = [], 0
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            parts.append(_as_partial(ray.get(finished[0])))
            done += parts[-1].tokens
            if progress is not None:
                progress(done, plan.tokens)
        index = finish_scan(plan, merge_scans(parts))
        index.meta["scan"].update(
            shards=shards,
            seconds=round(time.perf_counter() - started, 2),
            peak_rss_mb=max(p.run["peak_rss_mb"] for p in parts),
        )  # the largest task's
        index.meta["scan"]["tokens_per_s"] = round(plan.tokens / index.meta["scan"]["seconds"])
        return index
    finally:
        if started_here:
            ray.shutdown()
