"""A unit's running top K under the index's one total order (value descending, then corpus position ascending), so
that however the values are grouped into blocks, batches or shards, the kept entries are the same. `part` is anything
with `best_v` [units, K] float32 (-inf: empty) and `best_loc` [units, K] int64 (-1: empty), updated in place."""

from __future__ import annotations

import math

import torch


def top_merge(
    v: torch.Tensor, loc: torch.Tensor, K: int, in_location_order: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first K of each row under one total order: value descending, then location ascending (ties between equal
    values, such as a dead neuron's zeros, fall the same way however the candidates were grouped).
    `in_location_order`: equal values already stand in location order in every row, so one stable sort by value
    gives the order."""
    if not in_location_order:
        by_loc = loc.masked_fill(loc < 0, torch.iinfo(torch.long).max).argsort(dim=1, stable=True)
        v, loc = v.gather(1, by_loc), loc.gather(1, by_loc)
    order = v.argsort(dim=1, descending=True, stable=True)[:, :K]
    return v.gather(1, order), loc.gather(1, order)


def keep_top(part, first: int, values: torch.Tensor, high: torch.Tensor, loc: torch.Tensor, K: int) -> None:
    """Merge a block's top values into the running top K of its units. Only units whose batch maximum reaches their
    K-th value so far can gain an entry, so after the first batches most units skip this, the scan's second largest
    cost, entirely. A unit that can gains only from its values at or above a threshold: its K-th so far, or, while
    it has fewer than K entries, a lower bound of the block's own K-th largest value; above its K-th when the
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
        threshold[filling] = kth_lower_bound(values, K)[hit[filling]]
    merge_candidates(part, first, values, hit, threshold, loc, K)


def kth_lower_bound(values: torch.Tensor, K: int) -> torch.Tensor:
    """Per column of `values` [n, units], a value at most its K-th largest (-inf when n < K), close to it: the K-th
    largest of the maxima of 4K disjoint groups of rows. K of those maxima are K distinct values at least as large,
    so every value that can enter a top K is at or above it. One pass over the block and a top-k of 4K rows; an
    exact top-k of every column (transposed: along a strided column it is twice as slow) cost gpt2-small's first
    batch as much as its next three."""
    n = values.shape[0]
    if n < K:
        return torch.full((values.shape[1],), -math.inf)
    groups = min(n, 4 * K)
    maxima = values[: n // groups * groups].view(groups, n // groups, -1).amax(1)  # the last n % groups rows: left out
    return maxima.topk(K, dim=0).values[-1]


def merge_candidates(
    part, first: int, values: torch.Tensor, cols: torch.Tensor, threshold: torch.Tensor, loc: torch.Tensor, K: int
) -> None:
    """For the units of block columns `cols`: their values at or above `threshold` (one per column) and their K
    entries so far, in one total order (unit, then value descending, then location ascending); the first K of each
    unit are its new entries. Ties fall by location, whichever batch or shard they came from.

    Each unit's K entries and its candidates form one row of a padded matrix (merge_rows). Units are grouped by their
    row's width, K + candidates, in powers of two, so that a few units with many candidates (a dead unit's tied zeros
    while it fills, or a unit whose K-th is still low) do not pad every other unit's row to their width: each group's
    rows are at most twice their entries (flat sorts of every candidate, which this replaced, cost the gpt2-small
    scan several per cent of its forward pass; `python -m benchmarks index` measures the scan against it)."""
    block = values if len(cols) == values.shape[1] else values.index_select(1, cols)
    row, col = (block >= threshold[None]).nonzero(as_tuple=True)
    v, at, held = block[row, col], loc[row], cols + first
    per_unit = torch.bincount(col, minlength=len(cols))
    group = torch.log2((per_unit + K).double()).long()  # rows of width 2**g .. 2**(g + 1) - 1
    if int(group.min()) == int(group.max()):
        merge_rows(part, held, v, at, col, per_unit, int(per_unit.max()), K)
        return
    for g in group.unique().tolist():
        members = (group == g).nonzero().squeeze(1)
        renumber = torch.full((len(cols),), -1, dtype=torch.long)
        renumber[members] = torch.arange(len(members))
        mine = (group[col] == g).nonzero().squeeze(1)
        merge_rows(
            part,
            held[members],
            v[mine],
            at[mine],
            renumber[col[mine]],
            per_unit[members],
            int(per_unit[members].max()),
            K,
        )


def merge_rows(
    part,
    held: torch.Tensor,
    v: torch.Tensor,
    at: torch.Tensor,
    col: torch.Tensor,
    per_unit: torch.Tensor,
    widest: int,
    K: int,
) -> None:
    """merge_candidates for units `held` (`col`: each candidate's row): each unit's K entries and its candidates as
    one row of a [units, K + widest] matrix, padded with empty slots, ordered by top_merge (one row sort or two). A unit
    with many more candidates than the others would make the matrix mostly padding, so the caller groups units of
    about the same width."""
    by_unit = col.argsort(stable=True)
    col, v, at = col[by_unit], v[by_unit], at[by_unit]
    slot = K + torch.arange(len(col)) - torch.repeat_interleave(torch.cumsum(per_unit, 0) - per_unit, per_unit)
    values = torch.full((len(held), K + widest), -math.inf)
    where = torch.full((len(held), K + widest), -1, dtype=torch.long)
    values[:, :K], where[:, :K] = part.best_v[held], part.best_loc[held]
    values[col, slot], where[col, slot] = v, at
    # In a scan in corpus order each block comes after every entry held, and each unit's candidates stand in location
    # order: the rows are then in location order among equal values, and one sort by value orders them.
    later = bool(at.min() > where[:, :K].amax()) and bool(((at[1:] > at[:-1]) | (col[1:] != col[:-1])).all())
    part.best_v[held], part.best_loc[held] = top_merge(values, where, K, in_location_order=later)
