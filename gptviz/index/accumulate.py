"""Step 2 of a scan (scan.py), and the merge of step 3: the running statistics of some of a plan's batches
(`PartialScan`), folded in block by block while the forward pass runs, and partial scans of disjoint batches merged
into one. A shard scans whole batches of the single pass, so each token's values are computed in the same batch, bit
for bit; parts combine by sums (histogram counts, active counts), minima and a top-k merge under one total order
(value descending, then corpus position ascending), so any grouping of shards merges to the single pass's statistics
(float sums up to rounding)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch

from .bands import empty_sample, keep_sample, merge_samples, sample_keys
from .constants import SAMPLE
from .corpus import _as_documents
from .forward import _batch_inputs, _stream_unit_blocks, head_factors
from .histograms import _Binner
from .native import block_stats
from .plan import ScanPlan
from .top_k import keep_top, top_merge


@dataclass
class PartialScan:
    """Running statistics over some batches of a plan (torch tensors, one row per unit)."""

    key: str
    batches: list[tuple[int, int]]  # [start, stop) runs of the plan's batches covered
    tokens: int
    best_v: torch.Tensor  # [U, K] float32, in the total order (value desc, location asc)
    best_loc: torch.Tensor  # [U, K] int64 global positions (-1: none yet)
    counts: torch.Tensor  # [U, bins] int64; bins from zero_bin on hold exactly the values > 0
    vmin: torch.Tensor  # [U] float32
    vsq: torch.Tensor  # [U] float64
    token_sums: torch.Tensor  # [U, frequent + 1] float32; the last slot gathers the rare tokens
    samp_key: torch.Tensor  # [U, SAMPLE] int64: each unit's sample of its positive values (bands.py), by key
    samp_v: torch.Tensor  # [U, SAMPLE] float32 (0 in an empty slot)
    samp_loc: torch.Tensor  # [U, SAMPLE] int64 global positions (-1: empty)
    seconds: float = 0.0
    statistics: str = ""  # what computed them: "C" (native.py) or "torch"; "C+torch" when merged from both
    run: dict = field(default_factory=dict)  # what scanned them (device, dtype, threads, torch, peak_rss_mb), if said

    ARRAYS = ("best_v", "best_loc", "counts", "vmin", "vsq", "token_sums", "samp_key", "samp_v", "samp_loc")


def _empty_partial(plan: ScanPlan, U: int) -> PartialScan:
    K, bins, size = plan.settings["top_k"], plan.settings["bins"], plan.settings.get("sample", SAMPLE)
    return PartialScan(
        plan.key,
        [],
        0,
        torch.full((U, K), -math.inf),
        torch.full((U, K), -1, dtype=torch.long),
        torch.zeros(U, bins, dtype=torch.long),
        torch.full((U,), math.inf),
        torch.zeros(U, dtype=torch.float64),
        torch.zeros(U, len(plan.frequent) + 1),
        *empty_sample(U, size),
    )


def scan_batches(
    model,
    docs,
    plan: ScanPlan,
    batches: Sequence[int] | range | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PartialScan:
    """The running statistics of `batches` of the plan (default: all). `progress(tokens_done, tokens_in_these)`."""
    started = time.perf_counter()
    model.eval()
    docs = _as_documents(docs)
    batches = range(plan.n_batches) if batches is None else batches
    cfg = model.config
    U = cfg.n_layers * (cfg.d_ff + cfg.n_heads)
    bins, K = plan.settings["bins"], plan.settings["top_k"]
    part = _empty_partial(plan, U)
    binner = _Binner(plan.hist_range, plan.zero_bin, bins)
    native = block_stats(binner)  # one pass of C per block, or None: torch ops
    slot_of = torch.full((cfg.vocab_size,), len(plan.frequent), dtype=torch.long)
    slot_of[torch.from_numpy(plan.frequent)] = torch.arange(len(plan.frequent))
    token_sums = part.token_sums.t().contiguous()  # [slots, U] while scanning: rows of tokens add as rows
    factors = head_factors(model)  # the heads' write factors, once for every batch
    todo = sum(int(plan.batch_windows(b)[:, 2].sum() - plan.batch_windows(b)[:, 3].sum()) for b in batches)
    for b in batches:
        ids, sel, run, loc, tok = _batch_inputs(docs, plan.offsets, plan.batch_windows(b))
        slots, keys = slot_of[tok], sample_keys(loc)
        in_order = bool((loc[1:] > loc[:-1]).all())

        # fold(first, values, rows): a block's values [n, w] (or its rows `rows`), units first .. first + w - 1, folded
        # in while the forward pass runs, with this batch's slots, locations and keys bound now (not read when called)
        fold = partial(_fold, part, native, binner, token_sums, slots, loc, keys, in_order, K)
        _stream_unit_blocks(model, ids, sel, run, fold, in_place=native is not None, factors=factors)
        part.tokens += len(loc)
        if progress is not None:
            progress(part.tokens, todo)
    part.token_sums = token_sums.t().contiguous()
    part.batches = _runs(list(batches))
    part.seconds = time.perf_counter() - started
    part.statistics = "torch" if native is None else "C"
    return part


def _fold(
    part: PartialScan,
    native,
    binner: _Binner,
    token_sums: torch.Tensor,
    slots: torch.Tensor,
    loc: torch.Tensor,
    keys: torch.Tensor,
    in_order: bool,
    K: int,
    first: int,
    values: torch.Tensor,
    rows: torch.Tensor | None,
) -> None:
    """One block's values (the rows `rows` of `values`, or all of them) into the running statistics: one compiled
    pass (native.py), or torch ops. `in_order`: the block's locations increase; `keys`: their sampling keys."""
    if native is not None:
        # the top K too, in the same pass, where a new value can only go after the entries at or above it: every
        # entry held (none in a shard's first batch) comes before this block (a scan in corpus order)
        insert = in_order and len(loc) > 0 and int(part.best_loc[first : first + values.shape[1]].max()) < int(loc[0])
        high = native.update(part, token_sums, slots, loc, first, values, rows, insert, keys)
        if insert:
            return
        values = values if rows is None else values.index_select(0, rows)
    else:
        cols = slice(first, first + values.shape[1])
        low, high = values.amin(0), values.amax(0)  # (aminmax over dim 0 takes a slow path: 25x slower)
        part.vmin[cols] = torch.minimum(part.vmin[cols], low)  # the maximum is the top value
        part.counts[cols] += binner.counts(values, cols)
        part.vsq[cols] += torch.linalg.vecdot(values, values, dim=0).double()
        token_sums[:, cols].index_add_(0, slots, values)
        keep_sample(part, first, values, high, keys, loc)
    keep_top(part, first, values, high, loc, K)


def _runs(batches: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for b in sorted(batches):
        if runs and runs[-1][1] == b:
            runs[-1] = (runs[-1][0], b + 1)
        else:
            runs.append((b, b + 1))
    return runs


def merge_scans(parts: Sequence[PartialScan]) -> PartialScan:
    """One partial scan from several of the same plan over disjoint batches. ValueError when their plans differ or
    their batches overlap."""
    if not parts:
        raise ValueError("nothing to merge")
    if len({p.key for p in parts}) != 1:
        raise ValueError("these partial scans come from different plans (model, corpus or settings differ)")
    covered = sorted(r for p in parts for r in p.batches)
    for (_, stop), (start, _) in zip(covered, covered[1:], strict=False):
        if start < stop:
            raise ValueError(f"partial scans overlap at batch {start}")
    first = parts[0]
    K = first.best_v.shape[1]
    best_v, best_loc = top_merge(torch.cat([p.best_v for p in parts], 1), torch.cat([p.best_loc for p in parts], 1), K)
    return PartialScan(
        first.key,
        _runs([b for p in parts for start, stop in p.batches for b in range(start, stop)]),
        sum(p.tokens for p in parts),
        best_v,
        best_loc,
        sum(p.counts for p in parts),
        torch.stack([p.vmin for p in parts]).amin(0),
        sum(p.vsq for p in parts),
        sum(p.token_sums for p in parts),
        *merge_samples(parts),
        sum(p.seconds for p in parts),
        "+".join(sorted({p.statistics for p in parts} - {""})),
    )
