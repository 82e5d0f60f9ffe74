"""The scan's per-block statistics in one pass of C: the extension module gptviz.index._block_stats (block_stats.c,
block_stats_module.c), built with the package at install by setup.py; accumulate.py's torch ops where it is not there
(an install without a C compiler, a checkout where it was not built: `python setup.py build_ext --inplace`) or
GPTVIZ_NATIVE=0 turns it off. Nothing is compiled at run time. The two give the same top-k, histograms, counts,
extremes and token sums, bit for bit; the sums of squares (the std) differ by rounding (here in double throughout,
there a float32 dot per block).

Why C: the torch ops take about fifteen passes over each block (scale, ceil, shift, clamp, index, scatter, minimum,
maximum, squares, row sums, the top-k's candidates); the C pass reads each value once. What that saves is measured in
benchmarks/bench_index.py (docs/neuron-index.md).

The extension takes the scan's tensors as numpy views of the same memory (no copy) and checks every dtype, shape,
index and size before the pass runs (ValueError otherwise), so no call from Python can make it write outside them.
"""

from __future__ import annotations

import importlib
import os

import torch

from .bands import sample_keys
from .histograms import _Binner

try:  # (`from . import` would read, to the structure test's import graph, as importing gptviz.index: a cycle)
    _extension = importlib.import_module("._block_stats", __package__)
except ImportError:  # not built: the torch ops
    _extension = None


def enabled() -> bool:
    """False where GPTVIZ_NATIVE says 0 (or false, no, off)."""
    return os.environ.get("GPTVIZ_NATIVE", "").strip().lower() not in ("0", "false", "no", "off")


def _library():
    """The extension module where it is built and turned on, else None."""
    return _extension if enabled() else None


def available() -> bool:
    """Whether the C statistics can run here."""
    return _library() is not None


def _host(name: str, t: torch.Tensor):
    """A numpy view of the CPU tensor `t` (its memory, not a copy), which the extension reads as a buffer."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
        raise ValueError(f"block_stats: {name} must be a CPU tensor")
    try:
        return t.detach().numpy()
    except TypeError as e:  # a dtype numpy lacks (bfloat16)
        raise ValueError(f"block_stats: {name}: {e}") from None


class BlockStats:
    """The compiled statistics for one scan: per-unit constants prepared once, then `update` per block."""

    def __init__(self, lib, binner: _Binner):
        # _Binner's own float32 inverse widths, so that v * inv_width rounds the same way in both paths
        self.inv_width = binner.inv_width.contiguous()
        self.zero_bin = (binner.shift + 1).to(torch.int32).contiguous()  # shift = zero_bin - 1, exact in float32
        self.bins, self.lib = binner.bins, lib
        # the pass's scratch (counters [bins, w] and per-unit thresholds), grown to the widest block, not allocated
        # per block; 64 bytes spare to start it on a 64-byte boundary
        self.workspace = torch.empty(0, dtype=torch.uint8)

    def _scratch(self, w: int):
        size = self.lib.workspace_bytes(w, self.bins)
        if self.workspace.numel() < size + 64:
            self.workspace = torch.empty(size + 64, dtype=torch.uint8)
        start = -self.workspace.data_ptr() % 64
        return self.workspace[start : start + size].numpy()

    def update(
        self,
        part,
        token_sums: torch.Tensor,
        slots: torch.Tensor,
        loc: torch.Tensor,
        first: int,
        values: torch.Tensor,
        rows: torch.Tensor | None,
        insert: bool,
        keys: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Fold `values` [tokens, units first..] (its rows `rows`, or all) into part's vmin, counts, vsq and sample
        (`keys`: each row's sampling key, bands.sample_keys(loc) when None) and into `token_sums` ([slots, U]), in
        place; with `insert`, into its top K as well, empty slots included (the caller has checked the conditions
        block_stats.c states). -> the block's maximum per unit. ValueError when a value is NaN, or when the arrays'
        dtypes, shapes or indices do not fit together (the extension's checks)."""
        keys = sample_keys(loc) if keys is None else keys
        w = values.shape[1] if values.dim() == 2 else 0
        vmax = torch.empty(w)
        self.lib.update(
            values=_host("values", values),
            rows=None if rows is None else _host("rows", rows),
            slots=_host("slots", slots),
            loc=_host("loc", loc),
            keys=_host("keys", keys),
            first=first,
            insert=insert,
            token_sums=_host("token_sums", token_sums),
            zero_bin=_host("zero_bin", self.zero_bin),
            inv_width=_host("inv_width", self.inv_width),
            counts=_host("counts", part.counts),
            vmin=_host("vmin", part.vmin),
            vmax=_host("vmax", vmax),
            vsq=_host("vsq", part.vsq),
            best_v=_host("best_v", part.best_v),
            best_loc=_host("best_loc", part.best_loc),
            samp_key=_host("samp_key", part.samp_key),
            samp_v=_host("samp_v", part.samp_v),
            samp_loc=_host("samp_loc", part.samp_loc),
            workspace=self._scratch(w),
        )
        if torch.isnan(part.vsq[first : first + w]).any():
            raise ValueError("a unit's value is NaN: the model gives non-finite activations on this corpus")
        return vmax


def block_stats(binner: _Binner) -> BlockStats | None:
    """The compiled statistics for a scan binned by `binner`, or None where they cannot run."""
    lib = _library()
    return None if lib is None else BlockStats(lib, binner)
