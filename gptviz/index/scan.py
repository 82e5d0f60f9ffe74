"""The corpus scan, in three steps so that it can be split over processes, machines or a GPU and merged exactly.

1. `plan_scan`: what every part of a scan must share. The windows, their batches, the histogram range (a first pass
   over a spread sample of the windows) and the tokens ranked by their mean. Deterministic: every shard that plans
   the same model, corpus and settings gets the same plan (`ScanPlan.key`).
2. `scan_batches`: the running statistics of some of the plan's batches (`PartialScan`). A shard scans whole
   batches of the single pass, so each token's values are computed in the same batch, bit for bit.
3. `merge_scans`, then `finish_scan`: partial scans combine by sums (histogram counts, active counts), minima and
   maxima, and a top-k merge under one total order (value descending, then corpus position ascending), so shards
   merged in any grouping give the single pass's top examples, histograms, counts and quantiles exactly; means and
   standard deviations are float sums, equal up to rounding.

`build_index` runs all three in one process.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..model.tokenizer import tokenizer_for
from .bands import band_arrays, band_edges, empty_sample, keep_sample, merge_samples, sample_keys
from .constants import (
    BAND_EXAMPLES,
    BAND_LEVELS,
    BAND_RULE,
    BATCH_VALUES,
    BINS,
    FORMAT,
    HEAD_SCORE,
    MAX_BATCH,
    MAX_RANKED_TOKENS,
    MIN_COUNT,
    NEURON_SCORE,
    QUANTILES,
    SAMPLE,
    SAMPLE_WINDOWS,
    TOKEN_RANK,
    TOKEN_UNITS,
    TOP_K,
    TOP_TOKENS,
    VERSION,
)
from .corpus import _as_documents, _checksum, _windows, default_stride, token_counts
from .forward import _batch_inputs, _stream_unit_blocks, _unit_blocks, head_factors
from .histograms import _Binner, _edges, _quantiles
from .native import block_stats
from .store import NeuronIndex, _config_dict, model_fingerprint
from .tokens import index_tokenizer, tokenizer_meta
from .top_k import keep_top, top_merge


def default_batch(config) -> int:
    """Windows per forward pass: as many as keep a batch's unit values near BATCH_VALUES floats (34 windows for the
    bundled models, 1 for gpt2-small), and at most MAX_BATCH (a tiny model's attention patterns, heads x n_ctx^2
    floats a window and layer, would otherwise outgrow its unit values)."""
    return max(1, min(MAX_BATCH, BATCH_VALUES // (config.n_ctx * config.n_layers * (config.d_ff + config.n_heads))))


# ---------------------------------------------------------------------------------------------------- 1. plan


@dataclass(frozen=True)
class ScanPlan:
    """What every part of one scan shares. Arrays are per unit unless said otherwise."""

    settings: dict  # n_ctx, stride, batch, top_k, bins, min_count, sample
    offsets: np.ndarray  # [documents + 1] int64: each document's first global position
    windows: np.ndarray  # [n, 4] int64: document, start, length, first scored offset
    frequent: np.ndarray  # token ids ranked by their mean (occurring at least min_count times)
    frequent_counts: np.ndarray
    hist_range: np.ndarray  # [U, 2] float32: lo, hi (0 an edge)
    zero_bin: np.ndarray  # [U] int64: the bin whose lower edge is 0
    meta: dict = field(default_factory=dict)  # the index's metadata apart from the scan's own figures

    @property
    def tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def n_batches(self) -> int:
        return math.ceil(len(self.windows) / self.settings["batch"])

    def batches(self, shard: int = 0, shards: int = 1) -> range:
        """Shard `shard` of `shards`: a contiguous run of whole batches (about an equal share of them)."""
        if not (shards >= 1 and 0 <= shard < shards):
            raise ValueError(f"shard must be I/N with 0 <= I < N, got {shard}/{shards}")
        n = self.n_batches
        return range(shard * n // shards, (shard + 1) * n // shards)

    def batch_windows(self, b: int) -> np.ndarray:
        size = self.settings["batch"]
        return self.windows[b * size : (b + 1) * size]

    @property
    def key(self) -> str:
        """A digest of everything that must agree for partial scans to merge."""
        h = hashlib.sha256(repr(sorted(self.settings.items())).encode())
        h.update(self.meta["model"]["fingerprint"].encode())
        for a in (self.offsets, self.windows, self.frequent, self.hist_range):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(repr([(d["name"], d["tokens"], d["crc32"]) for d in self.meta["corpus"]["documents"]]).encode())
        h.update(b"" if (t := index_tokenizer(self.meta))["name"] == "gpt2" else t["fingerprint"].encode())
        return h.hexdigest()


def plan_scan(
    model,
    docs,
    *,
    model_name: str = "",
    source: str = "",
    corpus: dict | None = None,
    stride: int | None = None,
    batch: int | None = None,
    top_k: int = TOP_K,
    bins: int = BINS,
    min_count: int = MIN_COUNT,
    sample: int = SAMPLE,
) -> ScanPlan:
    """The plan of a scan of `docs` with `model`: validates the corpus, cuts the windows and runs the first pass
    that fixes each unit's histogram range. `corpus`: extra metadata on where the documents came from; `sample`:
    positive values sampled per unit for the bands' examples (0: none, the bands have no examples)."""
    model.eval()
    cfg = model.config
    docs = _as_documents(docs)
    if not docs or any(len(d.ids) == 0 for d in docs):
        raise ValueError("every document needs at least one token")
    n_ctx = cfg.n_ctx
    stride = default_stride(n_ctx) if stride is None else int(stride)
    if not 1 <= stride <= n_ctx:
        raise ValueError(f"stride must be in 1..{n_ctx}, got {stride}")
    batch = default_batch(cfg) if batch is None else int(batch)
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if sample < 0:
        raise ValueError(f"sample must be at least 0, got {sample}")
    lengths = [len(d.ids) for d in docs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    counts = token_counts(docs, cfg.vocab_size)
    frequent = np.flatnonzero(counts >= min_count)
    if len(frequent) > MAX_RANKED_TOKENS:  # per-token sums are units x tokens: keep the most frequent, in id order
        frequent = np.sort(frequent[np.argsort(-counts[frequent], kind="stable")[:MAX_RANKED_TOKENS]])
    windows = _windows(lengths, n_ctx, stride)
    L, F, H = cfg.n_layers, cfg.d_ff, cfg.n_heads
    U = L * (F + H)

    # The histogram range from windows spread over the corpus, in batches of the same size as the scan's.
    spread = windows[np.unique(np.linspace(0, len(windows) - 1, min(len(windows), SAMPLE_WINDOWS)).astype(int))]
    lo, hi = torch.full((U,), math.inf), torch.full((U,), -math.inf)
    for i in range(0, len(spread), batch):
        blocks, _, _ = _unit_blocks(model, docs, offsets, spread[i : i + batch])
        for first, values, _ in blocks:
            low, high = values.amin(0), values.amax(0)  # (aminmax over dim 0 takes a slow path: 25x slower)
            cols = slice(first, first + values.shape[1])
            lo[cols], hi[cols] = torch.minimum(lo[cols], low), torch.maximum(hi[cols], high)
    # Uniform bins with 0 on an edge (bin `zero_bin` starts at 0), at least one bin below 0, the sample covered.
    lo, hi = lo.clamp(max=0).double(), hi.clamp(min=0).double()
    width = ((hi - lo) / (bins - 1)).clamp(min=1e-6)
    zero_bin = torch.clamp(torch.ceil(-lo / width - 1e-9), min=1, max=bins - 1)
    lo = -zero_bin * width
    hist_range = torch.stack([lo, lo + bins * width], 1).float().numpy()

    K = min(top_k, int(offsets[-1]))
    settings = {
        "n_ctx": n_ctx,
        "stride": stride,
        "batch": batch,
        "top_k": K,
        "bins": bins,
        "min_count": min_count,
        "sample": int(sample),
    }
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "model": {"name": model_name or getattr(cfg, "name", ""), "fingerprint": model_fingerprint(model)},
        "config": _config_dict(cfg),
        "tokenizer": tokenizer_meta(tokenizer_for(model)),  # the ids' tokenizer: a reader checks it (tokens.py)
        "corpus": {
            "source": source,
            "tokens": int(offsets[-1]),
            **(corpus or {}),
            "documents": [
                {"name": d.name, "tokens": len(d.ids), "held_out": bool(d.held_out), "crc32": _checksum(d.ids)}
                for d in docs
            ],
        },
        "windows": {
            "n_ctx": n_ctx,
            "stride": stride,
            "min_left_context": n_ctx - stride,
            "count": len(windows),
            "rule": "windows of n_ctx tokens every `stride` tokens of a document; the first window scores "
            "all its positions, each later one its last `stride`; position t is scored in the "
            "window starting at 0 if t < n_ctx else ((t - n_ctx) // stride + 1) * stride",
        },
        "scores": {"neuron": NEURON_SCORE, "head": HEAD_SCORE},
        "units": {
            "neurons": L * F,
            "heads": L * H,
            "order": "flat index: neurons layer by layer (layer * d_ff + neuron), then heads "
            "(n_layers * d_ff + layer * n_heads + head)",
        },
        "top_k": K,
        "bins": bins,
        "quantile_levels": list(QUANTILES),
        "bands": {"levels": list(BAND_LEVELS), "examples": BAND_EXAMPLES, "sample": int(sample), "rule": BAND_RULE},
        "histogram": "bins uniform over hist_range (a first pass over a sample of windows), 0 an edge, each bin "
        "left-open (a, b] so 0 and -0.0 fall below the 0 edge; the outer edges moved to min_max to "
        "cover the scan's exact extremes (value_range); quantiles read from the histogram (linear "
        "within a bin) and clipped to value_range; active_share: the count of values > 0 (the bins above the 0 "
        "edge, which hold exactly those)",
        "top_tokens": {
            "k": min(TOP_TOKENS, len(frequent)),
            "min_count": min_count,
            "rank": TOKEN_RANK,
            "frequent_tokens": len(frequent),
            "most_ranked": MAX_RANKED_TOKENS,
        },
    }
    return ScanPlan(settings, offsets, windows, frequent, counts[frequent], hist_range, zero_bin.long().numpy(), meta)


# ---------------------------------------------------------------------------------------------------- 2. scan


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

        def fold(first: int, values: torch.Tensor, rows: torch.Tensor | None) -> None:
            # values [n, w] (or its rows `rows`): units first .. first + w - 1, folded in while the forward pass runs
            _fold(part, native, binner, token_sums, slots, loc, keys, in_order, K, first, values, rows)

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


# ---------------------------------------------------------------------------------------------------- 3. merge


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


def finish_scan(plan: ScanPlan, part: PartialScan) -> NeuronIndex:
    """The index from a partial scan that covers every batch of the plan."""
    if part.key != plan.key:
        raise ValueError("this partial scan comes from another plan")
    if part.batches != [(0, plan.n_batches)] or part.tokens != plan.tokens:
        raise ValueError(
            f"the partial scans cover batches {part.batches} of 0..{plan.n_batches - 1}: "
            f"{part.tokens:,} of {plan.tokens:,} tokens"
        )
    meta = dict(plan.meta)
    c = meta["config"]
    L, F, H = c["n_layers"], c["d_ff"], c["n_heads"]
    U, total, bins = L * (F + H), plan.tokens, plan.settings["bins"]
    mean = part.token_sums.double().sum(1) / total
    std = (part.vsq / total - mean * mean).clamp(min=0).sqrt()
    vmin, vmax = part.vmin, part.best_v[:, 0]
    # active (> 0): the bins from the 0 edge on, which hold exactly the values > 0 (_bin_of decides by the sign)
    zero_bin = torch.from_numpy(plan.zero_bin)
    active = part.counts.masked_fill(torch.arange(bins)[None] < zero_bin[:, None], 0).sum(1)
    lo, hi = torch.from_numpy(plan.hist_range[:, 0]), torch.from_numpy(plan.hist_range[:, 1])
    arrays = {
        "top_values": part.best_v.numpy().astype(np.float32),
        "hist_counts": part.counts.numpy().astype(np.int32),
        "hist_range": plan.hist_range.astype(np.float32),
        "min_max": torch.stack([torch.minimum(lo, vmin), torch.maximum(hi, vmax)], 1).numpy().astype(np.float32),
        "value_range": torch.stack([vmin, vmax], 1).numpy().astype(np.float32),
        "mean": mean.numpy().astype(np.float32),
        "std": std.numpy().astype(np.float32),
        "active_share": np.where(np.arange(U) < L * F, active.numpy() / total, np.nan).astype(np.float32),
    }
    arrays["top_doc"], arrays["top_pos"] = _doc_pos(plan.offsets, part.best_loc.numpy())
    arrays["quantiles"] = np.clip(
        _quantiles(_edges(arrays["hist_range"], arrays["min_max"], bins), arrays["hist_counts"], QUANTILES),
        arrays["value_range"][:, :1],
        arrays["value_range"][:, 1:],
    ).astype(np.float32)
    arrays.update(_token_arrays(plan, part, mean, std, L * F, L * H))
    edges = band_edges(
        _edges(arrays["hist_range"], arrays["min_max"], bins),
        arrays["hist_counts"],
        plan.zero_bin,
        arrays["value_range"][:, 1],
    )
    bands = band_arrays(edges, part.samp_v.numpy(), part.samp_loc.numpy())
    arrays["band_edges"], arrays["band_values"] = edges.astype(np.float32), bands["band_values"]
    arrays["band_doc"], arrays["band_pos"] = _doc_pos(plan.offsets, bands["band_loc"])
    arrays["band_sampled"] = bands["band_sampled"]
    # seconds: the scan's wall clock where one process saw it (Ray's driver sets its own); task_seconds: the parts'
    # scan times summed; shards: how many parts (a merge or Ray sets it)
    meta["scan"] = {
        "seconds": round(part.seconds, 2),
        "tokens_per_s": round(total / max(part.seconds, 1e-9)),
        "task_seconds": round(part.seconds, 2),
        "shards": 1,
        "batch": plan.settings["batch"],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "statistics": part.statistics,
    }
    return NeuronIndex(meta, arrays)


def _doc_pos(offsets: np.ndarray, loc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global positions (-1: none) as (document, position in it), int32, -1 where none."""
    doc = np.searchsorted(offsets, loc, side="right") - 1
    return (
        np.where(loc >= 0, doc, -1).astype(np.int32),
        np.where(loc >= 0, loc - offsets[np.clip(doc, 0, None)], -1).astype(np.int32),
    )


def _token_arrays(plan: ScanPlan, part: PartialScan, mean, std, n_neurons: int, n_heads: int) -> dict:
    """Per unit the tokens with the highest means; per token the units with the highest z-scored means."""
    frequent = plan.frequent
    means = (part.token_sums[:, : len(frequent)] / torch.from_numpy(plan.frequent_counts).float()[None]).t()  # (V', U)
    kt = min(TOP_TOKENS, len(frequent))
    if kt:
        top_tok = means.topk(kt, dim=0)
        ids, tok_mean = frequent[top_tok.indices.t().numpy()], top_tok.values.t().numpy()
    else:
        ids, tok_mean = np.zeros((means.shape[1], 0)), np.zeros((means.shape[1], 0))
    z = (means - mean.float()) / std.float().clamp(min=1e-12)
    zn = z[:, :n_neurons].topk(min(TOKEN_UNITS, n_neurons), dim=1)
    zh = z[:, n_neurons:].topk(min(TOKEN_UNITS, n_heads), dim=1)
    return {
        "top_token_ids": ids.astype(np.int32),
        "top_token_mean": tok_mean.astype(np.float32),
        "token_ids": frequent.astype(np.int32),
        "token_counts": plan.frequent_counts.astype(np.int32),
        "token_neurons": zn.indices.numpy().astype(np.int32),
        "token_neuron_z": zn.values.numpy().astype(np.float32),
        "token_heads": (zh.indices + n_neurons).numpy().astype(np.int32),
        "token_head_z": zh.values.numpy().astype(np.float32),
    }


def scan_nbytes(
    config, docs, *, batch: int | None = None, top_k: int = TOP_K, bins: int = BINS, min_count: int = MIN_COUNT
) -> int:
    """About the most memory build_index takes beyond the model for `docs` (an estimate to check before a scan:
    the running sums per unit and frequent token, the histograms, one batch's activations and unit values)."""
    docs = _as_documents(docs)
    L, F, H, n_ctx = config.n_layers, config.d_ff, config.n_heads, config.n_ctx
    U = L * (F + H)
    batch = default_batch(config) if batch is None else batch
    frequent = int((token_counts(docs, config.vocab_size) >= min_count).sum()) if docs else 0
    per_unit = U * ((frequent + 1) * 4 * 3 + bins * 8 * 2 + top_k * 12 * 3 + SAMPLE * 20 * 2 + 96)  # sums, means
    # and z; counts; the top K and the sample, and their copies while merging
    tokens = batch * n_ctx
    activations = tokens * 4 * L * (F + config.d_model * 8 + H * n_ctx)  # captured post and z, the forward's
    return int(per_unit + tokens * U * 4 * 4 + activations)


def build_index(
    model,
    docs,
    *,
    model_name: str = "",
    source: str = "",
    corpus: dict | None = None,
    stride: int | None = None,
    batch: int | None = None,
    top_k: int = TOP_K,
    bins: int = BINS,
    min_count: int = MIN_COUNT,
    sample: int = SAMPLE,
    progress: Callable[[int, int], None] | None = None,
) -> NeuronIndex:
    """Scan `docs` (Documents, or token-id sequences) with `model` once and return the index. `batch`: windows per
    forward pass (default_batch); `progress(tokens_done, tokens_total)` is called after each batch."""
    started = time.perf_counter()
    plan = plan_scan(
        model,
        docs,
        model_name=model_name,
        source=source,
        corpus=corpus,
        stride=stride,
        batch=batch,
        top_k=top_k,
        bins=bins,
        min_count=min_count,
        sample=sample,
    )
    part = scan_batches(model, docs, plan, progress=progress)
    part.seconds = time.perf_counter() - started
    return finish_scan(plan, part)
