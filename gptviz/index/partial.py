"""Partial scans on disk: what `python -m gptviz index MODEL --shard I/N` writes and `index merge` reads.

A folder with partial.json (the plan's settings and metadata, the batches covered, the plan's key) and partial.npz
(the plan's arrays and the running statistics). Loaded with allow_pickle=False; the plan's key is recomputed from
the arrays read, so a partial file that was edited or torn is refused rather than merged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .accumulate import PartialScan
from .atomic_write import atomic_file, atomic_write
from .plan import ScanPlan
from .store import IndexFormatError

PARTIAL_JSON, PARTIAL_NPZ = "partial.json", "partial.npz"
PLAN_ARRAYS = ("offsets", "windows", "frequent", "frequent_counts", "hist_range", "zero_bin")


def save_partial(plan: ScanPlan, part: PartialScan, folder) -> Path:
    """Write a partial scan with its plan into `folder` (created); each file written whole, then renamed. `part.run`
    (what scanned it) goes along, for the merged index's metadata."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {f"plan_{name}": getattr(plan, name) for name in PLAN_ARRAYS}
    arrays.update({f"part_{name}": getattr(part, name).numpy() for name in PartialScan.ARRAYS})
    with atomic_file(folder / PARTIAL_NPZ) as f:
        np.savez(f, **arrays)
    info = {
        "key": part.key,
        "batches": part.batches,
        "tokens": part.tokens,
        "seconds": part.seconds,
        "statistics": part.statistics,
        "run": part.run,
        "n_batches": plan.n_batches,
        "settings": plan.settings,
        "meta": plan.meta,
    }
    atomic_write(folder / PARTIAL_JSON, json.dumps(info))
    return folder


def load_partial(folder) -> tuple[ScanPlan, PartialScan]:
    folder = Path(folder)
    try:
        info = json.loads((folder / PARTIAL_JSON).read_text(encoding="utf-8"))
        with np.load(folder / PARTIAL_NPZ, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        plan = ScanPlan(info["settings"], *(arrays[f"plan_{n}"] for n in PLAN_ARRAYS), meta=info["meta"])
        part = PartialScan(
            info["key"],
            [tuple(r) for r in info["batches"]],
            int(info["tokens"]),
            *(torch.from_numpy(arrays[f"part_{n}"]) for n in PartialScan.ARRAYS),
            seconds=float(info["seconds"]),
            statistics=str(info.get("statistics", "")),
            run=dict(info.get("run") or {}),
        )
    except FileNotFoundError as err:
        raise IndexFormatError(f"{folder.name!r} is not a partial index ({Path(err.filename).name} missing)") from None
    except Exception as err:  # JSON, zip, missing keys, wrong types
        raise IndexFormatError(f"the partial index {folder.name!r} is unreadable ({type(err).__name__})") from None
    if plan.key != part.key:
        raise IndexFormatError(f"the partial index {folder.name!r} does not match its own plan (edited or torn)")
    return plan, part
