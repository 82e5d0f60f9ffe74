"""What does this neuron do? Corpus-wide top activations for every MLP neuron and attention head.

One scan of a corpus (token ids split into documents, e.g. one per play) keeps, for every unit, its top activations
with their locations, a histogram of all its values, quantiles, the share of positions where it is active, and the
tokens it fires on most. Nothing is held for all positions at once: windows stream through the model in batches and
every statistic is a running one (top-k merges, histograms by counting (index_add_), sums per token).

Units. Neurons are `blocks.{l}.mlp.hook_post` (after the activation function), every layer x d_ff. Heads are scored
per query position by HEAD_SCORE: the L2 norm of what the head writes into the residual stream at that position,
||z_h W_O^h|| (its attention-weighted values through its slice of c_proj's weight; c_proj's bias, shared by all
heads, is left out). It is always >= 0; a head that parks its attention on a sink with small values scores low,
and a head that moves a large vector scores high. Units are numbered flat: neurons layer by layer, then heads.

Windows. A document is cut into windows of the model's n_ctx tokens that start every `stride` tokens
(default n_ctx - n_ctx // 4, so windows overlap by a quarter). Each token is scored once, in the window where it
has left context: the first window of a document scores all its positions; each later one only its last `stride`
positions, so every token has at least n_ctx - stride tokens of left context, or the whole document before it.
Position t of a document is scored in window k = 0 if t < n_ctx, else (t - n_ctx) // stride + 1, which starts at
k * stride (`scoring_window`).

Histograms have BINS bins per unit: uniform over the range (widened to include 0) that a first pass over a spread sample
of the windows saw, shifted so that 0 is a bin edge; a value outside falls into the outer bin, whose outer edge is then
moved to the scan's exact minimum or maximum, so every value lies within the edges and the counts add up to the tokens
scanned. Bins are left-open, (a, b], and a value's side of the 0 edge is decided by its sign alone, so 0 and -0.0 (GELU
far below 0) fall below it and the bins above it hold exactly the values > 0: a neuron's share of active positions (> 0)
is their count, the count of values > 0. Quantiles are read from the histogram (linear within a bin, then clipped to the
unit's exact extremes: off by at most one bin's width). Mean and standard deviation are running sums.

Bands: beside its top K, each unit's positive values in BANDS bands between their quantiles (the weakest fifth to
the strongest), with BAND_EXAMPLES examples each from a uniform sample of SAMPLE positive values kept in the same scan
(`band_examples`; bands.py says how they are chosen).

Top tokens: for each unit, the TOP_TOKENS token ids with the highest mean activation over their occurrences, among
tokens that occur at least `min_count` times in the corpus. For each such token, the units with the highest
z-scored mean on it ((mean on the token - the unit's mean) / the unit's standard deviation), for units_for_token.

Scale: a scan is planned once (`plan_scan`), its batches scanned in any number of parts (`scan_batches`, `--shard
I/N`, Ray tasks in `gptviz.index.distributed`) and merged exactly (`merge_scans`, `finish_scan`); see scan.py.

On disk (`save_index` / `load_index`): a folder with index.json (metadata: format and version, model name, config
and weights fingerprint, the corpus's documents with their lengths, checksums and which are held-out plays,
windows, score definitions, scan time and memory) and index.npz (arrays; loaded with allow_pickle=False).

Modules: units (ids and scores), corpus (documents, windows, your corpus tokenized), texts (your corpus's texts,
read a bounded piece at a time), histograms, top_k (the running top K in one total order), bands (the sample and
the bands' examples), plan (the windows, batches and histogram range a scan's parts share), accumulate (a part's
running statistics; merging parts), finish (the index from them), scan (the three in one process), partial (partial
scans on disk), store (NeuronIndex, save and load), read (examples, contexts, summaries), effects (what a unit
writes, read by the unembedding), progress (the CLI's progress line), distributed (Ray).
"""

from __future__ import annotations

from .accumulate import PartialScan, merge_scans, scan_batches
from .constants import (
    BAND_EXAMPLES,
    BAND_LEVELS,
    BANDS,
    BATCH_VALUES,
    BINS,
    DEAD_PEAK,
    FORMAT,
    HEAD_SCORE,
    INDEX_JSON,
    INDEX_NPZ,
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
from .corpus import Document, corpus_documents, default_stride, scoring_window, token_counts, tokenize_corpus
from .effects import DirectEffect, direct_effect, head_direct_effect
from .finish import finish_scan
from .partial import load_partial, save_partial
from .plan import ScanPlan, default_batch, plan_scan
from .progress import text_progress
from .read import (
    Attended,
    Band,
    Context,
    Example,
    TokenUnit,
    UnitScore,
    active_phrase,
    attended,
    band_examples,
    check_documents,
    context_batch,
    example_context,
    example_contexts,
    histogram,
    index_documents,
    positive_count,
    quantiles,
    summary,
    top_examples,
    top_tokens,
    units_at,
    units_for_token,
)
from .scan import build_index, scan_nbytes
from .store import (
    IndexFormatError,
    NeuronIndex,
    bundled_index,
    config_record,
    index_folder,
    index_matches,
    index_mismatch,
    load_index,
    model_fingerprint,
    save_index,
)
from .texts import corpus_pieces, corpus_texts
from .tokens import index_tokenizer, tokenizer_meta, tokenizer_mismatch
from .unit_ids import Unit, UnitLike, head_write_norms, unit_values

__all__ = [
    "Attended",
    "BANDS",
    "BAND_EXAMPLES",
    "BAND_LEVELS",
    "BATCH_VALUES",
    "BINS",
    "Band",
    "Context",
    "DEAD_PEAK",
    "DirectEffect",
    "Document",
    "Example",
    "FORMAT",
    "HEAD_SCORE",
    "INDEX_JSON",
    "INDEX_NPZ",
    "IndexFormatError",
    "MIN_COUNT",
    "NEURON_SCORE",
    "NeuronIndex",
    "PartialScan",
    "QUANTILES",
    "SAMPLE",
    "SAMPLE_WINDOWS",
    "ScanPlan",
    "TOKEN_RANK",
    "TOKEN_UNITS",
    "TOP_K",
    "TOP_TOKENS",
    "TokenUnit",
    "Unit",
    "UnitLike",
    "UnitScore",
    "VERSION",
    "active_phrase",
    "attended",
    "band_examples",
    "build_index",
    "bundled_index",
    "config_record",
    "check_documents",
    "context_batch",
    "corpus_documents",
    "corpus_pieces",
    "corpus_texts",
    "default_batch",
    "default_stride",
    "direct_effect",
    "example_context",
    "example_contexts",
    "finish_scan",
    "head_direct_effect",
    "head_write_norms",
    "histogram",
    "index_documents",
    "index_folder",
    "index_matches",
    "index_mismatch",
    "index_tokenizer",
    "load_index",
    "load_partial",
    "merge_scans",
    "model_fingerprint",
    "plan_scan",
    "positive_count",
    "quantiles",
    "save_index",
    "save_partial",
    "scan_batches",
    "scan_nbytes",
    "scoring_window",
    "summary",
    "text_progress",
    "token_counts",
    "tokenize_corpus",
    "tokenizer_meta",
    "tokenizer_mismatch",
    "top_examples",
    "top_tokens",
    "unit_values",
    "units_at",
    "units_for_token",
]
