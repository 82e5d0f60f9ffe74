"""The scan's per-block statistics in one pass of C (block_stats.c), compiled with the machine's C compiler on first
use, loaded with ctypes; scan.py's torch ops where that cannot be done (no compiler, a failed build, or
GPTVIZ_NATIVE=0). The two give the same top-k, histograms, counts, extremes and token sums, bit for bit; the sums of
squares (the std) differ by rounding (here in double throughout, there a float32 dot per block).

Why C: the torch ops take about fifteen passes over each block (scale, ceil, shift, clamp, index, scatter, minimum,
maximum, squares, row sums, the top-k's candidates); on the bundled model, whose forward pass is cheap next to its
2,064 units a token, they cost about as much as the forward pass itself (the scan +90% over the forward pass alone).
With one pass, and each layer read as the forward pass makes it (forward.py), the statistics cost +19-28% of the
forward pass the scan runs (the ratio moves between processes), gpt2-small's +13% against +29%
(benchmarks/bench_index.py, docs/neuron-index.md).

The library is cached per user (0700 directory, a name from the digest of the source, compiler, flags and CPU),
written under a temporary name and renamed into place, so processes and shards that build it at once do not clash.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from .bands import sample_keys
from .histograms import _Binner

SOURCE = Path(__file__).with_name("block_stats.c")
# -ffp-contract=off: no fused multiply-adds, so the float32 bin arithmetic rounds as torch's does
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c99", "-ffp-contract=off")
# this CPU's vector instructions (the pass takes a third less time on an AVX-512 Xeon); the library's name carries the
# CPU's identity, so a cache shared by machines with other CPUs never loads one built for another
NATIVE = ("-march=native",)
COMPILE_TIMEOUT_S = 120

_P, _I = ctypes.c_void_p, ctypes.c_int64


def enabled() -> bool:
    """False where GPTVIZ_NATIVE says 0 (or false, no, off)."""
    return os.environ.get("GPTVIZ_NATIVE", "").strip().lower() not in ("0", "false", "no", "off")


def _cache_dir() -> Path:
    """A private directory for the built library: the user's cache, or a fresh temporary one when that is shared
    with other users or cannot be made."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gptviz"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = base.stat()
        if st.st_uid == os.getuid() and not st.st_mode & 0o022:
            return base
    except (OSError, RuntimeError, AttributeError):  # RuntimeError: no home directory; AttributeError: no os.getuid
        pass
    return Path(tempfile.mkdtemp(prefix="gptviz-native-"))


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _cpu_identity() -> str:
    """The CPU's model and feature flags (Linux), or what the platform says."""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
        return "\n".join(sorted({l for l in lines if l.split(":")[0].strip() in ("model name", "flags", "Features",
                                                                                  "CPU implementer", "CPU part")}))
    except OSError:
        return platform.processor() + platform.machine()


def _build(cc: str, version: str, flags: tuple[str, ...]) -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes() + repr((version, flags, _cpu_identity())).encode()).hexdigest()
    target = _cache_dir() / f"block_stats-{digest[:16]}.so"
    if not target.exists():
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
            partial = Path(tmp.name)
        try:
            subprocess.run([cc, *flags, "-o", str(partial), str(SOURCE)], check=True, capture_output=True,
                           timeout=COMPILE_TIMEOUT_S)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


@functools.cache
def _library():
    """The loaded library, or None. Built at most once per process."""
    if not enabled() or sys.platform == "win32":
        return None
    cc = _compiler()
    if cc is None:
        return None
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        try:
            target = _build(cc, version, FLAGS + NATIVE)
        except subprocess.CalledProcessError:  # a compiler without -march=native
            target = _build(cc, version, FLAGS)
        lib = ctypes.CDLL(str(target))  # CDLL: the call releases the GIL
    except (OSError, subprocess.SubprocessError):
        return None
    lib.block_stats.restype = _I
    lib.block_stats.argtypes = [_P, _P, _I, _I, _I, _P, _P, _I, _P, _P, _P, _P, _I, _P, _P, _P, _P, _P, _P, _P, _P,
                                _I, _I, _P, _P, _P, _P, _I, _P, _P, _P, _P]
    return lib


def available() -> bool:
    """Whether the compiled statistics can run here (compiling them now if need be)."""
    return _library() is not None


class BlockStats:
    """The compiled statistics for one scan: per-unit constants prepared once, then `update` per block."""

    def __init__(self, lib, binner: _Binner):
        # _Binner's own float32 inverse widths, so that v * inv_width rounds the same way in both paths
        self.inv_width = binner.inv_width.contiguous()
        self.zero_bin = (binner.shift + 1).to(torch.int32).contiguous()  # shift = zero_bin - 1, exact in float32
        bins = binner.bins
        self.lo, self.hi = (1 - self.zero_bin).float().contiguous(), (bins - self.zero_bin).float().contiguous()
        self.bins, self.lib = bins, lib
        # the C pass's working memory, grown to the widest block: counters [bins, w], bin indices [w], tile maxima [w],
        # the sample's thresholds [w]
        self.local, self.scratch, self.tile_max = (torch.empty(0, dtype=torch.int32), torch.empty(0, dtype=torch.int32),
                                                   torch.empty(0))
        self.sthr = torch.empty(0, dtype=torch.long)

    def update(self, part, token_sums: torch.Tensor, slots: torch.Tensor, loc: torch.Tensor, first: int,
               values: torch.Tensor, rows: torch.Tensor | None, insert: bool, keys: torch.Tensor | None = None
               ) -> torch.Tensor:
        """Fold `values` [tokens, units first..] (its rows `rows`, or all) into part's vmin, counts, vsq and sample
        (`keys`: each row's sampling key, bands.sample_keys(loc) when None) and into `token_sums` ([slots, U]), in
        place; with `insert`, into its top K as well, empty slots included (the caller has checked the conditions
        block_stats.c states). -> the block's maximum per unit. ValueError when a value is NaN."""
        n, w = values.shape if rows is None else (len(rows), values.shape[1])
        keys = sample_keys(loc) if keys is None else keys
        U, K, R = len(self.zero_bin), part.best_v.shape[1], part.samp_key.shape[1]
        # what the C code assumes: float32 rows of unit-stride columns on the CPU, in-bounds indices, the running
        # arrays contiguous and of their dtypes
        if rows is not None and not (rows.dtype == torch.long and rows.is_contiguous()
                                     and (n == 0 or 0 <= int(rows.min()) <= int(rows.max()) < values.shape[0])):
            raise ValueError("block_stats: unexpected rows")
        if not (values.dtype == torch.float32 and values.device.type == "cpu" and (w <= 1 or values.stride(1) == 1)
                and slots.dtype == torch.long and len(slots) == n and loc.dtype == torch.long and len(loc) == n
                and loc.is_contiguous() and keys.dtype == torch.long and len(keys) == n and keys.is_contiguous()
                and n < 2 ** 31 and w * self.bins < 2 ** 31 and 0 <= first
                and first + w <= U and token_sums.is_contiguous() and token_sums.dtype == torch.float32
                and token_sums.shape[1] == U and (n == 0 or 0 <= int(slots.min()) <= int(slots.max())
                                                  < token_sums.shape[0])
                and all(t.is_contiguous() and t.dtype == dtype and t.shape[0] == U for t, dtype in (
                    (part.counts, torch.long), (part.vmin, torch.float32), (part.vsq, torch.float64),
                    (part.best_v, torch.float32), (part.best_loc, torch.long), (part.samp_key, torch.long),
                    (part.samp_v, torch.float32), (part.samp_loc, torch.long)))):
            raise ValueError("block_stats: unexpected layout")
        if self.scratch.numel() < w:
            self.local = torch.empty(w * self.bins, dtype=torch.int32)
            self.scratch, self.tile_max = torch.empty(w, dtype=torch.int32), torch.empty(w)
            self.sthr = torch.empty(w, dtype=torch.long)
        vmax = torch.full((w,), -torch.inf)
        thr = part.best_v[first:first + w, -1].clone()
        top = 0 if not insert else 2 if bool((part.best_loc[first:first + w, -1] < 0).any()) else 1
        f4, f8 = 4 * first, 8 * first
        self.lib.block_stats(
            values.data_ptr(), None if rows is None else rows.data_ptr(), n, w, values.stride(0), slots.data_ptr(),
            token_sums.data_ptr() + f4, token_sums.stride(0), self.inv_width.data_ptr() + f4,
            self.lo.data_ptr() + f4, self.hi.data_ptr() + f4, self.zero_bin.data_ptr() + f4, self.bins,
            part.counts.data_ptr() + f8 * self.bins, part.vmin.data_ptr() + f4, vmax.data_ptr(),
            part.vsq.data_ptr() + f8, thr.data_ptr(), part.best_v.data_ptr() + f4 * K,
            part.best_loc.data_ptr() + f8 * K, loc.data_ptr(), K, top, self.local.data_ptr(),
            self.scratch.data_ptr(), self.tile_max.data_ptr(), keys.data_ptr(), R, self.sthr.data_ptr(),
            part.samp_key.data_ptr() + f8 * R, part.samp_v.data_ptr() + f4 * R, part.samp_loc.data_ptr() + f8 * R)
        if torch.isnan(part.vsq[first:first + w]).any():
            raise ValueError("a unit's value is NaN: the model gives non-finite activations on this corpus")
        return vmax


def block_stats(binner: _Binner) -> BlockStats | None:
    """The compiled statistics for a scan binned by `binner`, or None where they cannot run."""
    lib = _library()
    return None if lib is None else BlockStats(lib, binner)
