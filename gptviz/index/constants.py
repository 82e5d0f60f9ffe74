"""The neuron index's settings and the definitions written into every index."""

from __future__ import annotations

FORMAT = "gptviz-index"
VERSION = 3  # 3: band examples (bands.py); 2: active share counted directly, sign-exact bins, exact extremes
#              (version 1 misbinned -0.0)
INDEX_JSON, INDEX_NPZ = "index.json", "index.npz"
TOP_K = 20  # top activations kept per unit
BINS = 128  # histogram bins per unit
QUANTILES = (0.01, 0.5, 0.99)
BANDS = 5  # bands of a unit's positive values, between these quantiles of them (bands.py)
BAND_LEVELS = (0.2, 0.4, 0.6, 0.8)
BAND_EXAMPLES = 5  # examples shown per band
SAMPLE = 64  # positive values sampled per unit while scanning, to choose the bands' examples from
TOP_TOKENS = 10  # tokens listed per unit
MIN_COUNT = 20  # a token needs this many occurrences to be ranked by its mean
MAX_RANKED_TOKENS = 8192  # and at most this many tokens are (the most frequent): their sums per unit stay bounded
TOKEN_UNITS = 10  # neurons (and up to this many heads) listed per token
SAMPLE_WINDOWS = 256  # windows of the first pass that fixes the histogram range
DEAD_PEAK = 1e-3  # units_at skips a unit whose corpus peak is at most this (a dead neuron)
BATCH_VALUES = 9_000_000  # default batch: about this many unit values (36 MB of float32) per forward pass
MAX_BATCH = 64  # and at most this many windows

NEURON_SCORE = (
    "activation after the MLP's nonlinearity (blocks.{layer}.mlp.hook_post), at each position; active means > 0"
)
HEAD_SCORE = (
    "L2 norm of the head's write into the residual stream at each query position: "
    "||z_h @ W_O^h||, z_h = blocks.{layer}.attn.hook_z[..., h, :], W_O^h = the head's d_head rows of "
    "c_proj's [in, out] weight; c_proj's bias (shared by all heads) left out"
)
BAND_RULE = (
    "per unit: the positive values (> 0) sampled uniformly while scanning (the `sample` values whose corpus "
    "position has the smallest key, key = splitmix64(position) as a signed int64); bands between 0, the "
    "positive values' quantiles at `levels` (read from the histogram's bins above the 0 edge, linear within "
    "a bin) and the unit's largest value, each band (lo, hi]; a band's examples: the `examples` sampled "
    "values in it with the smallest keys, shown highest first; band_sampled: how many sampled values fell "
    "in each band"
)
TOKEN_RANK = (
    "per unit: token ids by the unit's mean activation over their occurrences, among tokens occurring at "
    "least min_count times (the MAX_RANKED_TOKENS most frequent of them at most); per token: units by "
    "z-scored mean ((mean on token - unit mean) / unit std)"
)
