"""Examples from the whole range of a unit's positive values, not only its peak: BANDS bands between the quantiles
of its positive values, BAND_EXAMPLES examples in each, chosen in the same scan as the top K.

The problem: the bands' edges are quantiles of every positive value of the unit, known only once the scan has
seen them all, yet the examples must be picked while the values stream by. The choice:

1. While scanning, each unit keeps a uniform sample of its positive values: the SAMPLE of them whose corpus
   position has the smallest key, key = splitmix64(position) (a bijection of the 64-bit position, read as a signed
   integer, so no two positions tie). A bottom-k sample by a hash of the position is a uniform sample without
   replacement that needs no random state and depends on nothing but the set of (position, value) pairs offered:
   the same in the C pass and the torch ops, in any batch order, and shards merge exactly (the SAMPLE smallest keys
   of the union are among the SAMPLE smallest of each part). The key is one per row (one hash per token, not per
   value), and a unit needs a look at a 32-row tile only when the tile holds one of its positive values and the
   tile's smallest key is under the unit's threshold (block_stats.c), so
   after its first few hundred positive values a unit is rarely looked at: the sample costs a few per cent of the
   scan (docs/neuron-index.md).
2. When the scan ends, the bands' edges are the quantiles of the positive values at 20, 40, 60 and 80% read from
   the unit's histogram as the index's other quantiles are (the bins above the 0 edge hold exactly the values > 0;
   linear within a bin), and each band's examples are the BAND_EXAMPLES sampled values inside it with the smallest
   keys: a uniform sample of the band's values (its smallest keys over the whole corpus, whenever the sample holds
   at least BAND_EXAMPLES of them).

Why not per-bin reservoirs (the histogram's fixed bins, a few examples each, grouped into bands afterwards): 128 bins
x a few examples x every unit is 10 times the memory (gpt2-small: about 300 MB), and a band edge inside a bin
would still cut its examples in two. Why not a second pass over the corpus once the quantiles are known: it costs
a second forward pass, most of a scan. With SAMPLE = 64 a band of a fifth of the values holds 12.8 sampled values
on average; fewer than BAND_EXAMPLES in a band happens for about 1 band in 250 (and where a unit has fewer than 25
positive values at all, the sample holds every one of them): the index records how many each band's sample held
(`band_sampled`), and the page says so where a band shows fewer.
"""

from __future__ import annotations

import numpy as np
import torch

from .constants import BAND_EXAMPLES, BAND_LEVELS, BANDS, SAMPLE  # noqa: F401 (re-exported)
from .histograms import _quantiles

EMPTY_KEY = torch.iinfo(torch.long).max  # an empty slot: key EMPTY_KEY, location -1, value 0

_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def sample_keys(loc: torch.Tensor) -> torch.Tensor:
    """Each global position's sampling key: splitmix64's finalizer (a bijection of 64-bit integers), as int64."""
    with np.errstate(over="ignore"):
        z = loc.numpy().astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return torch.from_numpy(z.view(np.int64))


def empty_sample(units: int, size: int = SAMPLE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(keys, values, locations) [units, size] with every slot empty."""
    return (
        torch.full((units, size), EMPTY_KEY),
        torch.zeros(units, size),
        torch.full((units, size), -1, dtype=torch.long),
    )


def thresholds(keys: torch.Tensor, locs: torch.Tensor) -> torch.Tensor:
    """Per unit the largest key a new value can enter with: the last held key when the sample is full, else any."""
    return torch.where(locs[:, -1] >= 0, keys[:, -1], torch.tensor(EMPTY_KEY))


def _smallest(
    unit: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, locs: torch.Tensor, units: int, size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entries (unit, key, value, location), each unit's with at least `size` of them (empty slots included) -> each
    unit's first `size` by key, empty slots last: [units, size] arrays."""
    order = keys.argsort(stable=True)
    order = order[(locs[order] < 0).argsort(stable=True)]  # empty slots after every held value, whatever its key
    order = order[unit[order].argsort(stable=True)]
    unit, keys, values, locs = unit[order], keys[order], values[order], locs[order]
    start = torch.searchsorted(unit, torch.arange(units))
    rank = torch.arange(len(unit)) - start[unit]
    keep = rank < size
    out_k, out_v, out_l = empty_sample(units, size)
    out_k[unit[keep], rank[keep]] = keys[keep]
    out_v[unit[keep], rank[keep]] = values[keep]
    out_l[unit[keep], rank[keep]] = locs[keep]
    return out_k, out_v, out_l


def keep_sample(
    part, first: int, values: torch.Tensor, high: torch.Tensor, key: torch.Tensor, loc: torch.Tensor
) -> None:
    """The torch ops' side of block_stats.c's sample: a block's positive values [n, units first..] whose row key
    is under their unit's threshold join the unit's sample, which keeps its SAMPLE smallest keys (in key order).
    `high`: the block's maximum per unit (a unit with no value > 0 in it is skipped).

    A unit whose sample is not full yet takes the block's first `size` positive values by key (no later one can
    stay); the others only values on rows whose key is under their threshold, so those rows are picked first (the
    keys under the largest threshold: a few per cent of a block once the samples have filled) and only they are
    read: masking the whole block cost the torch ops' scan a third more."""
    size = part.samp_key.shape[1]
    if not len(loc) or not size:
        return
    held = slice(first, first + values.shape[1])
    full = part.samp_loc[held, -1] >= 0
    limit = thresholds(part.samp_key[held], part.samp_loc[held])
    positive = high > 0
    cols, rows, picked = [], [], []
    hungry = (positive & ~full).nonzero().squeeze(1)
    if len(hungry):  # of the block's positive values at most the first `size` by key can stay: only they are taken
        order = key.argsort()
        block = values.index_select(1, hungry).index_select(0, order)
        take = block > 0
        take &= take.cumsum(0, dtype=torch.int32) <= size
        r, c = take.nonzero(as_tuple=True)
        cols.append(hungry[c]), rows.append(order[r]), picked.append(block[r, c])
    filled = (positive & full).nonzero().squeeze(1)
    if len(filled):
        under = (key <= limit[filled].max()).nonzero().squeeze(1)
        if len(under):
            block = values.index_select(0, under).index_select(1, filled)
            r, c = ((block > 0) & (key[under][:, None] <= limit[filled][None])).nonzero(as_tuple=True)
            cols.append(filled[c]), rows.append(under[r]), picked.append(block[r, c])
    if not cols or not sum(len(c) for c in cols):
        return
    col, row = torch.cat(cols), torch.cat(rows)
    present = torch.bincount(col, minlength=values.shape[1]) > 0
    units = present.nonzero().squeeze(1)
    col = (present.cumsum(0) - 1)[col]  # each candidate's unit among `units`
    units = units + first
    part.samp_key[units], part.samp_v[units], part.samp_loc[units] = _merge_rows(
        part.samp_key[units], part.samp_v[units], part.samp_loc[units], col, key[row], torch.cat(picked), loc[row]
    )


def _merge_rows(
    keys: torch.Tensor,
    values: torch.Tensor,
    locs: torch.Tensor,
    col: torch.Tensor,
    new_k: torch.Tensor,
    new_v: torch.Tensor,
    new_l: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Samples [units, size] (each in key order, empty slots last) and new entries (`col`: each one's row) -> each
    row's `size` smallest keys, in order. Each row is laid out as its held entries, its new ones after them (over its
    empty slots) and empty slots after those, then sorted by key once: an empty slot comes after every held value,
    whatever its key. (One row sort of a [units, size + most new] matrix: a flat sort of every entry by unit and
    key cost the torch ops' scan a quarter more.)"""
    units, size = keys.shape
    counts = torch.bincount(col, minlength=units)
    widest = int(counts.max())
    by_row = col.argsort(stable=True)
    col = col[by_row]
    slot = (locs >= 0).sum(1)[col] + torch.arange(len(col)) - (counts.cumsum(0) - counts)[col]
    out_k, out_v, out_l = empty_sample(units, size + widest)
    out_k[:, :size], out_v[:, :size], out_l[:, :size] = keys, values, locs
    out_k[col, slot], out_v[col, slot], out_l[col, slot] = new_k[by_row], new_v[by_row], new_l[by_row]
    order = out_k.argsort(dim=1, stable=True)[:, :size]
    return out_k.gather(1, order), out_v.gather(1, order), out_l.gather(1, order)


def merge_samples(parts) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The samples of partial scans over disjoint batches as one: each unit's SAMPLE smallest keys of them all."""
    keys = torch.cat([p.samp_key for p in parts], 1)
    units, width = keys.shape
    size = parts[0].samp_key.shape[1]
    unit = torch.arange(units).repeat_interleave(width)
    return _smallest(
        unit,
        keys.reshape(-1),
        torch.cat([p.samp_v for p in parts], 1).reshape(-1),
        torch.cat([p.samp_loc for p in parts], 1).reshape(-1),
        units,
        size,
    )


def band_edges(edges: np.ndarray, counts: np.ndarray, zero_bin: np.ndarray, top: np.ndarray) -> np.ndarray:
    """[units, BANDS + 1]: 0, the positive values' quantiles at BAND_LEVELS (from the bins above the 0 edge, linear
    within a bin, clipped to (0, top]) and `top` (each unit's largest value); NaN for a unit never > 0."""
    positive = np.where(np.arange(counts.shape[1])[None] >= zero_bin[:, None], counts, 0)
    inner = _quantiles(edges, positive, BAND_LEVELS)
    inner = np.clip(inner, 0.0, top[:, None])
    out = np.concatenate([np.zeros((len(counts), 1)), inner, top[:, None].astype(np.float64)], 1)
    out[positive.sum(1) == 0] = np.nan
    return out


def band_arrays(edges6: np.ndarray, samp_v: np.ndarray, samp_loc: np.ndarray) -> dict[str, np.ndarray]:
    """Each band's BAND_EXAMPLES examples from the sample (held in key order): the first in each band by key, then
    shown highest first (ties: earlier position first). -> band_values [U, BANDS, BAND_EXAMPLES] (NaN: none),
    band_loc (global positions, -1: none) and band_sampled [U, BANDS] (the sampled values in each band)."""
    U, size = samp_v.shape
    held = samp_loc >= 0
    inner = edges6[:, 1:BANDS]  # [U, BANDS - 1]
    band = (samp_v[:, :, None] > inner[:, None, :]).sum(-1)  # (lo, hi]: value <= q1 is band 0
    onehot = (band[:, :, None] == np.arange(BANDS)[None, None]) & held[:, :, None]
    rank = np.cumsum(onehot, axis=1) - 1  # place among the band's, by key
    mine = np.take_along_axis(rank, band[:, :, None], 2)[:, :, 0]
    keep = held & (mine < BAND_EXAMPLES)
    values = np.full((U, BANDS, BAND_EXAMPLES), np.nan, dtype=np.float32)
    locs = np.full((U, BANDS, BAND_EXAMPLES), -1, dtype=np.int64)
    u, j = np.nonzero(keep)
    values[u, band[u, j], mine[u, j]] = samp_v[u, j]
    locs[u, band[u, j], mine[u, j]] = samp_loc[u, j]
    # highest first within a band, then earlier position: sort by (-value, location), empty slots last
    order = np.lexsort(
        (np.where(locs < 0, np.iinfo(np.int64).max, locs), np.where(locs < 0, np.inf, -values.astype(np.float64))),
        axis=-1,
    )
    return {
        "band_values": np.take_along_axis(values, order, -1),
        "band_loc": np.take_along_axis(locs, order, -1),
        "band_sampled": onehot.sum(1).astype(np.int32),
    }
