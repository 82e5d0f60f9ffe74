"""A unit's running top K under the index's one total order (value descending, then corpus position ascending), so
that however the values are grouped into blocks, batches or shards, the kept entries are the same. `part` is anything
with `best_v` [units, K] float32 (-inf: empty) and `best_loc` [units, K] int64 (-1: empty), updated in place."""
from __future__ import annotations

import math

import torch


def top_merge(v: torch.Tensor, loc: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first K of each row under one total order: value descending, then location ascending (ties between equal
    values, such as a dead neuron's zeros, fall the same way however the candidates were grouped)."""
    by_loc = loc.masked_fill(loc < 0, torch.iinfo(torch.long).max).argsort(dim=1, stable=True)
    v, loc = v.gather(1, by_loc), loc.gather(1, by_loc)
    order = v.argsort(dim=1, descending=True, stable=True)[:, :K]
    return v.gather(1, order), loc.gather(1, order)


def keep_top(part, first: int, values: torch.Tensor, high: torch.Tensor, loc: torch.Tensor, K: int) -> None:
    """Merge a block's top values into the running top K of its units. Only units whose batch maximum reaches their
    K-th value so far can gain an entry, so after the first batches most units skip this, the scan's second largest
    cost, entirely. A unit that can gains only from its values at or above a threshold: its K-th so far, or, while
    it has fewer than K entries, the block's own K-th largest value (a top-k of its column); above its K-th when the
    block comes after that entry. Those few candidates, ties included, are merged in the one total order
    (merge_candidates)."""
    units = torch.arange(first, first + values.shape[1])
    kth = part.best_v[units, -1]
    full = torch.isfinite(kth)
    # A value equal to a unit's K-th enters only if it comes before that entry in location. A block wholly after it
    # (a scan in corpus order) can only gain values above it: the threshold moves one float up, so a dead unit's
    # zeros, tied with its K-th, stop being candidates once it has K of them.
    after = loc.min() > part.best_loc[units, -1] if len(loc) else torch.ones_like(full)
    threshold = torch.where(full & after, torch.nextafter(kth, torch.tensor(math.inf)), kth)
    hit = (high >= threshold).nonzero().squeeze(1)
    if not len(hit):
        return
    threshold = threshold[hit]
    filling = (~full[hit]).nonzero().squeeze(1)
    if len(filling):
        cols = hit[filling]
        # each unit's values as one contiguous row (topk along a strided column is about twice as slow)
        own = values.t().contiguous() if len(cols) == values.shape[1] else values.index_select(1, cols).t().contiguous()
        threshold[filling] = own.topk(min(K, values.shape[0]), dim=1).values[:, -1]
    merge_candidates(part, first, values, hit, threshold, loc, K)


def merge_candidates(part, first: int, values: torch.Tensor, cols: torch.Tensor, threshold: torch.Tensor,
                     loc: torch.Tensor, K: int) -> None:
    """For the units of block columns `cols`: their values at or above `threshold` (one per column) and their K
    entries so far, in one total order (unit, then value descending, then location ascending); the first K of each
    unit are its new entries. Ties fall by location, whichever batch or shard they came from."""
    block = values if len(cols) == values.shape[1] else values.index_select(1, cols)
    row, col = (block >= threshold[None]).nonzero(as_tuple=True)
    v = block[row, col]
    held = cols + first
    per_unit = torch.bincount(col, minlength=len(cols))
    widest = int(per_unit.max()) if len(col) else 0
    if len(cols) * (K + widest) <= 2 * (len(cols) * K + len(col)):
        merge_rows(part, held, v, loc[row], col, per_unit, widest, K)
        return
    # many candidates for some unit (a dead unit's tied zeros while it fills): three stable sorts of the flat lists
    v = torch.cat([part.best_v[held].reshape(-1), v])
    at = torch.cat([part.best_loc[held].reshape(-1), loc[row]])
    unit = torch.cat([held.repeat_interleave(K), held[col]])
    order = at.masked_fill(at < 0, torch.iinfo(torch.long).max).argsort(stable=True)  # an empty slot sorts last
    order = order[v[order].argsort(descending=True, stable=True)]
    order = order[unit[order].argsort(stable=True)]
    unit, v, at = unit[order], v[order], at[order]
    counts = torch.bincount(unit - held[0], minlength=int(held[-1] - held[0]) + 1)[held - held[0]]
    rank = torch.arange(len(unit)) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    keep = rank < K
    part.best_v[unit[keep], rank[keep]] = v[keep]
    part.best_loc[unit[keep], rank[keep]] = at[keep]


def merge_rows(part, held: torch.Tensor, v: torch.Tensor, at: torch.Tensor, col: torch.Tensor,
               per_unit: torch.Tensor, widest: int, K: int) -> None:
    """merge_candidates when every unit has few candidates (the usual case once the scan is under way): each unit's
    K entries and its candidates as one row of a [units, K + widest] matrix, padded with empty slots, ordered by
    top_merge's two row sorts. The same order as the flat sorts, at a fraction of their cost; a unit with many
    candidates (a dead unit's tied zeros while it fills) would make the matrix mostly padding, so the caller keeps
    the flat sorts then."""
    by_unit = col.argsort(stable=True)
    col, v, at = col[by_unit], v[by_unit], at[by_unit]
    slot = K + torch.arange(len(col)) - torch.repeat_interleave(torch.cumsum(per_unit, 0) - per_unit, per_unit)
    values = torch.full((len(held), K + widest), -math.inf)
    where = torch.full((len(held), K + widest), -1, dtype=torch.long)
    values[:, :K], where[:, :K] = part.best_v[held], part.best_loc[held]
    values[col, slot], where[col, slot] = v, at
    part.best_v[held], part.best_loc[held] = top_merge(values, where, K)
