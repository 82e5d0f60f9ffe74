"""Step 1 of a scan (scan.py): its plan, what every part of it must share. The windows and their batches, the
histogram range (a first pass over a spread sample of the windows) and the tokens ranked by their mean, with the
index's metadata apart from the scan's own figures. Deterministic: every shard that plans the same model, corpus and
settings gets the same plan (`ScanPlan.key`)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..model.tokenizer import tokenizer_for
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
    TOP_K,
    TOP_TOKENS,
    VERSION,
)
from .corpus import _as_documents, _checksum, _windows, default_stride, token_counts
from .forward import _unit_blocks
from .store import _config_dict, model_fingerprint
from .tokens import index_tokenizer, tokenizer_meta


def default_batch(config) -> int:
    """Windows per forward pass: as many as keep a batch's unit values near BATCH_VALUES floats (34 windows for the
    bundled models, 1 for gpt2-small), and at most MAX_BATCH (a tiny model's attention patterns, heads x n_ctx^2
    floats a window and layer, would otherwise outgrow its unit values)."""
    return max(1, min(MAX_BATCH, BATCH_VALUES // (config.n_ctx * config.n_layers * (config.d_ff + config.n_heads))))


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
