"""The corpus scan, in three steps so that it can be split over processes, machines or a GPU and merged exactly.

1. `plan_scan` (plan.py): what every part of a scan must share. The windows, their batches, the histogram range (a
   first pass over a spread sample of the windows) and the tokens ranked by their mean. Deterministic: every shard
   that plans the same model, corpus and settings gets the same plan (`ScanPlan.key`).
2. `scan_batches` (accumulate.py): the running statistics of some of the plan's batches (`PartialScan`). A shard
   scans whole batches of the single pass, so each token's values are computed in the same batch, bit for bit.
3. `merge_scans` (accumulate.py), then `finish_scan` (finish.py): partial scans combine by sums (histogram counts,
   active counts), minima and maxima, and a top-k merge under one total order (value descending, then corpus
   position ascending), so shards merged in any grouping give the single pass's top examples, histograms, counts and
   quantiles exactly; means and standard deviations are float sums, equal up to rounding.

`build_index`, here, runs all three in one process (`scan_nbytes`: about the memory it takes).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..model import sizes
from .accumulate import scan_batches
from .constants import BINS, MIN_COUNT, SAMPLE, TOP_K
from .corpus import _as_documents, token_counts
from .finish import finish_scan
from .plan import default_batch, plan_scan
from .store import NeuronIndex


def scan_nbytes(
    config, docs, *, batch: int | None = None, top_k: int = TOP_K, bins: int = BINS, min_count: int = MIN_COUNT
) -> int:
    """About the most memory build_index takes beyond the model for `docs` (an estimate to check before a scan:
    the running sums per unit and frequent token, the histograms, one batch's activations and unit values)."""
    docs = _as_documents(docs)
    batch = default_batch(config) if batch is None else batch
    frequent = int((token_counts(docs, config.vocab_size) >= min_count).sum()) if docs else 0
    return sizes.index_scan_nbytes(config, frequent, batch, top_k=top_k, bins=bins, sample=SAMPLE)


def build_index(model, docs, *, progress: Callable[[int, int], None] | None = None, **settings) -> NeuronIndex:
    """Scan `docs` (Documents, or token-id sequences) with `model` once and return the index. `settings`: plan_scan's
    keywords (model_name, source, corpus, stride, batch: windows per forward pass (default_batch), top_k, bins,
    min_count, sample); `progress(tokens_done, tokens_total)` is called after each batch."""
    started = time.perf_counter()
    plan = plan_scan(model, docs, **settings)
    part = scan_batches(model, docs, plan, progress=progress)
    part.seconds = time.perf_counter() - started
    return finish_scan(plan, part)
