"""The neuron index's settings and the definitions written into every index."""
from __future__ import annotations

FORMAT = "gptviz-index"
VERSION = 2  # 2: active share counted directly, sign-exact bins, exact extremes (version 1 misbinned -0.0)
INDEX_JSON, INDEX_NPZ = "index.json", "index.npz"
TOP_K = 20              # top activations kept per unit
BINS = 128              # histogram bins per unit
QUANTILES = (0.01, 0.5, 0.99)
TOP_TOKENS = 10         # tokens listed per unit
MIN_COUNT = 20          # a token needs this many occurrences to be ranked by its mean
MAX_RANKED_TOKENS = 8192  # and at most this many tokens are (the most frequent): their sums per unit stay bounded
TOKEN_UNITS = 10        # neurons (and up to this many heads) listed per token
SAMPLE_WINDOWS = 256    # windows of the first pass that fixes the histogram range
DEAD_PEAK = 1e-3        # units_at skips a unit whose corpus peak is at most this (a dead neuron)
BATCH_VALUES = 9_000_000  # default batch: about this many unit values (36 MB of float32) per forward pass
MAX_BATCH = 64          # and at most this many windows

NEURON_SCORE = ("activation after the MLP's nonlinearity (blocks.{layer}.mlp.hook_post), at each position; "
                "active means > 0")
HEAD_SCORE = ("L2 norm of the head's write into the residual stream at each query position: "
              "||z_h @ W_O^h||, z_h = blocks.{layer}.attn.hook_z[..., h, :], W_O^h = the head's d_head rows of "
              "c_proj's [in, out] weight; c_proj's bias (shared by all heads) left out")
TOKEN_RANK = ("per unit: token ids by the unit's mean activation over their occurrences, among tokens occurring at "
              "least min_count times (the MAX_RANKED_TOKENS most frequent of them at most); per token: units by "
              "z-scored mean ((mean on token - unit mean) / unit std)")
