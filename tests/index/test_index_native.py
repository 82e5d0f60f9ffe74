"""gptviz.index.native: the scan's statistics in the C extension built from block_stats.c (setup.py, into a temporary
folder: conftest.block_stats_extension) against the torch ops they replace, value for value (bins at the 0 edge, -0.0,
tiny and huge values, inf, NaN), on whole scans and shards; and the fallbacks (no extension, GPTVIZ_NATIVE=0). The
extension's checks at its boundary, and no compiler at run time: test_index_native_boundary.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gptviz import index as ix
from gptviz.index import native
from gptviz.index.accumulate import _empty_partial
from gptviz.index.histograms import _Binner
from tests.support.models import build, model_with_silent_neurons


@pytest.fixture(autouse=True)
def compiled(block_stats_extension, monkeypatch):
    """The extension built from this checkout's sources, as native.py's (whatever an in-place build left there)."""
    monkeypatch.setattr(native, "_extension", block_stats_extension[0])
    monkeypatch.delenv("GPTVIZ_NATIVE", raising=False)
    return block_stats_extension[0]


@pytest.fixture
def path(monkeypatch):
    """Switch the scan's statistics: path("C") or path("torch")."""

    def use(which: str) -> None:
        monkeypatch.setenv("GPTVIZ_NATIVE", "1" if which == "C" else "0")

    return use


def scan_both(path, model, docs, **settings):
    path("C")
    compiled = ix.build_index(model, docs, **settings)
    path("torch")
    with_torch = ix.build_index(model, docs, **settings)
    assert (compiled.meta["scan"]["statistics"], with_torch.meta["scan"]["statistics"]) == ("C", "torch")
    return compiled, with_torch


def assert_same_but_rounding(a: ix.NeuronIndex, b: ix.NeuronIndex, summed_apart: bool = False) -> None:
    """Every array equal, bit for bit, but the standard deviation (sums of squares: double here, a float32 dot per
    block there) and the z-scores built on it; `summed_apart`: the means too (shards' token sums are added apart,
    then together)."""
    rounded = ("std", "token_neuron_z", "token_head_z") + (("mean", "top_token_mean") if summed_apart else ())
    rankings = ("token_neurons", "token_heads") + (("top_token_ids",) if summed_apart else ())  # by those figures
    assert sorted(a.arrays) == sorted(b.arrays)
    for name, array in a.arrays.items():
        if name in rounded:
            np.testing.assert_allclose(array, b.arrays[name], rtol=1e-5, atol=1e-6, err_msg=name)
        elif name not in rankings:
            assert np.array_equal(array, b.arrays[name], equal_nan=True), name


def test_a_scan_with_the_compiled_statistics_equals_the_torch_ops(path):
    # several windows per batch (the scored rows are read in place), later batches through the in-pass top-k
    model = build(seed=4)
    g = torch.Generator().manual_seed(8)
    docs = [
        ix.Document(f"d{i}", torch.randint(0, 25, (n,), generator=g).numpy()) for i, n in enumerate((77, 16, 3, 50, 31))
    ]
    compiled, with_torch = scan_both(path, model, docs, batch=3, top_k=6, bins=20, min_count=3)
    assert_same_but_rounding(compiled, with_torch)
    assert compiled.arrays["hist_counts"].sum() == compiled.tokens * len(
        compiled.arrays["hist_counts"]
    )  # each value once


def test_neurons_of_minus_zero_and_tiny_negatives_bin_the_same_way(path):
    model = model_with_silent_neurons()
    g = torch.Generator().manual_seed(5)
    docs = [ix.Document(f"d{i}", torch.randint(0, 20, (n,), generator=g).numpy()) for i, n in enumerate((60, 33, 9))]
    compiled, with_torch = scan_both(path, model, docs, batch=2, top_k=4, bins=32, min_count=3)
    assert_same_but_rounding(compiled, with_torch)
    F = model.config.d_ff
    assert (compiled.arrays["active_share"][[0, 8, F, F + 8]] == 0).all()  # -0.0 and tiny negatives: never active


def test_shards_scanned_each_way_merge_to_the_single_pass(path):
    model = build(seed=2)
    g = torch.Generator().manual_seed(11)
    docs = [
        ix.Document(f"d{i}", torch.randint(0, 30, (n,), generator=g).numpy()) for i, n in enumerate((90, 16, 5, 61, 40))
    ]
    plan = ix.plan_scan(model, docs, batch=2, top_k=6, bins=24, min_count=4)
    path("C")
    single = ix.finish_scan(plan, ix.scan_batches(model, docs, plan))
    first = ix.scan_batches(model, docs, plan, plan.batches(0, 2))
    path("torch")
    second = ix.scan_batches(model, docs, plan, plan.batches(1, 2))
    merged = ix.merge_scans([first, second])
    assert merged.statistics == "C+torch"
    assert_same_but_rounding(ix.finish_scan(plan, merged), single, summed_apart=True)


@pytest.mark.slow
def test_the_bands_sample_is_the_same_from_the_c_pass_and_the_torch_ops(path):
    # a sample of 3 fills in the first batch and then turns most values away: both paths keep the 3 smallest keys of
    # each unit's positive values, in key order, over one pass and over shards scanned each way
    model = build(seed=6)
    g = torch.Generator().manual_seed(12)
    docs = [ix.Document(f"d{i}", torch.randint(0, 30, (n,), generator=g).numpy()) for i, n in enumerate((70, 12, 44))]
    compiled, with_torch = scan_both(path, model, docs, batch=2, top_k=3, bins=16, min_count=4, sample=3)
    assert_same_but_rounding(compiled, with_torch)
    assert (compiled.arrays["band_sampled"].sum(1) == 3).mean() > 0.9  # most units' samples are full
    plan = ix.plan_scan(model, docs, batch=2, top_k=3, bins=16, min_count=4, sample=3)
    path("C")
    first = ix.scan_batches(model, docs, plan, plan.batches(0, 2))
    path("torch")
    second = ix.scan_batches(model, docs, plan, plan.batches(1, 2))
    for part in (first, second):  # each unit's sample in key order, empty slots (location -1) last
        held = part.samp_loc >= 0
        keys = part.samp_key.masked_fill(~held, torch.iinfo(torch.long).max)
        assert (keys[:, 1:] >= keys[:, :-1]).all() and (held[:, 1:] <= held[:, :-1]).all(), part.statistics
    assert_same_but_rounding(ix.finish_scan(plan, ix.merge_scans([first, second])), compiled, summed_apart=True)


def block_inputs(values: torch.Tensor, hist_range: np.ndarray, zero_bin: np.ndarray, bins: int, slots: int = 3):
    """A partial scan, token sums and slots for one block of `values` [n, units]."""
    n, U = values.shape
    plan = type("Plan", (), {"settings": {"top_k": 2, "bins": bins}, "key": "k", "frequent": np.arange(slots - 1)})
    part = _empty_partial(plan, U)
    token_sums = torch.zeros(slots, U)
    return part, token_sums, torch.arange(n) % slots


def test_bins_equal_the_binner_value_for_value():
    # units of every width (inverse width below and above 1), the 0 edge anywhere, and values on and near every edge
    g = torch.Generator().manual_seed(0)
    U, bins = 6, 16
    lo = -torch.tensor([0.5, 3.0, 1e-3, 40.0, 2.0, 7.0], dtype=torch.float64)
    hi = torch.tensor([0.25, 5.0, 1e-2, 10.0, 30.0, 1e-4], dtype=torch.float64)
    width = (hi - lo) / (bins - 1)
    zero_bin = torch.clamp(torch.ceil(-lo / width - 1e-9), min=1, max=bins - 1)
    lo = -zero_bin * width
    hist_range = torch.stack([lo, lo + bins * width], 1).float().numpy()
    zero_bin = zero_bin.long().numpy()
    edges = torch.from_numpy(hist_range[:, :1]) + torch.arange(bins + 1)[None] * torch.from_numpy(
        (hist_range[:, 1:] - hist_range[:, :1]) / bins
    )
    special = torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 1e-7, -1e-7, math.inf, -math.inf, 1e30, -1e30])
    columns = [
        torch.cat(
            [
                special,
                edges[u],
                torch.nextafter(edges[u], torch.tensor(math.inf)),
                torch.nextafter(edges[u], torch.tensor(-math.inf)),
                (torch.rand(200, generator=g) - 0.5) * 4 * float(hi[u] - lo[u]),
            ]
        )
        for u in range(U)
    ]
    values = torch.stack(columns, 1).float().contiguous()
    part, token_sums, slots = block_inputs(values, hist_range, zero_bin, bins)
    stats = native.block_stats(_Binner(hist_range, zero_bin, bins))
    loc = torch.arange(len(values))
    high = stats.update(part, token_sums, slots, loc, 0, values, None, insert=False)
    expected = _Binner(hist_range, zero_bin, bins).counts(values, slice(0, U))
    assert torch.equal(part.counts, expected)
    assert torch.equal(high, values.amax(0)) and torch.equal(part.vmin, values.amin(0))
    assert torch.equal(token_sums, torch.zeros(3, U).index_add_(0, slots, values))
    assert torch.isinf(part.vsq).all()  # every column holds an inf
    # above the 0 edge exactly the values > 0
    above = torch.from_numpy(np.arange(bins)[None] >= zero_bin[:, None])
    assert torch.equal(part.counts.masked_fill(~above, 0).sum(1), (values > 0).sum(0))


def test_rows_read_in_place_equal_the_copied_rows():
    g = torch.Generator().manual_seed(1)
    full = torch.randn(40, 5, generator=g)
    rows = torch.tensor([0, 3, 4, 5, 17, 18, 39])
    hist_range = np.tile(np.array([[-4.0, 4.0]], dtype=np.float32), (5, 1))
    zero_bin = np.full(5, 8)
    stats = native.block_stats(_Binner(hist_range, zero_bin, 16))
    a = block_inputs(full[rows], hist_range, zero_bin, 16)
    b = block_inputs(full[rows], hist_range, zero_bin, 16)
    loc = torch.arange(len(rows))
    stats.update(a[0], a[1], a[2], loc, 0, full[rows].contiguous(), None, insert=False)
    stats.update(b[0], b[1], b[2], loc, 0, full, rows, insert=False)
    for name in ("counts", "vmin", "vsq"):
        assert torch.equal(getattr(a[0], name), getattr(b[0], name)), name
    assert torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="rows"):
        stats.update(b[0], b[1], b[2], loc, 0, full, rows + 1000, insert=False)  # out of bounds: refused


def test_the_top_k_inserted_in_the_pass_equals_the_merge():
    # ties with the K-th (a dead unit's zeros), values equal to a held one, and values below: the total order holds
    K, U = 4, 3
    first = torch.tensor([[5.0, 0.0, 2.0], [3.0, 0.0, 2.0], [3.0, 0.0, 1.0], [1.0, 0.0, 1.0], [0.5, 0.0, -1.0]])
    later = torch.tensor([[3.0, 0.0, 2.0], [4.0, 0.0, 0.5], [1.0, 1e-30, 7.0], [6.0, 0.0, 2.0], [3.0, -0.0, 1.0]])
    hist_range = np.tile(np.array([[-8.0, 8.0]], dtype=np.float32), (U, 1))
    zero_bin = np.full(U, 8)
    stats = native.block_stats(_Binner(hist_range, zero_bin, 16))
    part, token_sums, slots = block_inputs(first, hist_range, zero_bin, 16)
    part.best_v, part.best_loc = torch.full((U, K), -math.inf), torch.full((U, K), -1)
    loc1, loc2 = torch.arange(5), torch.arange(5, 10)
    high = stats.update(part, token_sums, slots, loc1, 0, first, None, insert=False)
    ix.top_k.keep_top(part, 0, first, high, loc1, K)
    stats.update(part, token_sums, slots, loc2, 0, later, None, insert=True)
    everything = torch.cat([first, later]).t()
    where = torch.cat([loc1, loc2]).expand(U, -1)
    v, at = ix.top_k.top_merge(everything, where, K)
    assert torch.equal(part.best_v, v) and torch.equal(part.best_loc, at)
    assert part.best_loc[1].tolist() == [7, 0, 1, 2]  # the 1e-30 first, then the earliest zeros


def test_nan_is_refused_and_stays_inside_the_histogram():
    values = torch.tensor([[1.0, math.nan], [2.0, 0.5]])
    hist_range = np.tile(np.array([[-1.0, 3.0]], dtype=np.float32), (2, 1))
    zero_bin = np.full(2, 4)
    stats = native.block_stats(_Binner(hist_range, zero_bin, 16))
    part, token_sums, slots = block_inputs(values, hist_range, zero_bin, 16)
    with pytest.raises(ValueError, match="NaN"):
        stats.update(part, token_sums, slots, torch.arange(2), 0, values, None, insert=False)
    assert part.counts.sum() == 4 and part.counts[1, 0] == 1  # the NaN counted in the lowest bin, nowhere else


def test_without_the_extension_or_when_turned_off_the_torch_ops_run(monkeypatch):
    model = build(seed=4)
    docs = [ix.Document("d", np.arange(40) % 17)]
    assert native.available()
    assert ix.build_index(model, docs, top_k=3, bins=8, min_count=2).meta["scan"]["statistics"] == "C"
    monkeypatch.setenv("GPTVIZ_NATIVE", "0")
    assert not native.available()
    assert ix.build_index(model, docs, top_k=3, bins=8, min_count=2).meta["scan"]["statistics"] == "torch"
    monkeypatch.delenv("GPTVIZ_NATIVE")
    monkeypatch.setattr(native, "_extension", None)  # an install without a compiler, a checkout not built
    assert not native.available()
    assert ix.build_index(model, docs, top_k=3, bins=8, min_count=2).meta["scan"]["statistics"] == "torch"


def test_units_fill_their_top_k_in_the_pass_as_the_merge_would():
    # from empty: fewer values than K, -inf values (kept, after every finite one, before the empty slots), ties
    K, U = 5, 3
    blocks = [
        torch.tensor([[-math.inf, 0.0, 2.0], [1.0, 0.0, -math.inf], [1.0, -0.0, 2.0]]),
        torch.tensor([[-math.inf, 0.0, 9.0], [0.5, 3.0, 2.0]]),
    ]
    hist_range = np.tile(np.array([[-8.0, 8.0]], dtype=np.float32), (U, 1))
    zero_bin = np.full(U, 8)
    stats = native.block_stats(_Binner(hist_range, zero_bin, 16))
    part, token_sums, _ = block_inputs(blocks[0], hist_range, zero_bin, 16)
    part.best_v, part.best_loc = torch.full((U, K), -math.inf), torch.full((U, K), -1)
    seen_v, seen_loc, start = [], [], 0
    for block in blocks:
        loc = torch.arange(start, start + len(block))
        stats.update(part, token_sums, torch.zeros(len(block), dtype=torch.long), loc, 0, block, None, insert=True)
        seen_v.append(block), seen_loc.append(loc)
        start += len(block)
        v, at = ix.top_k.top_merge(torch.cat(seen_v).t(), torch.cat(seen_loc).expand(U, -1), K)
        if len(torch.cat(seen_loc)) < K:  # top_merge keeps only what there is; the running arrays pad with empties
            pad = K - v.shape[1]
            v = torch.cat([v, torch.full((U, pad), -math.inf)], 1)
            at = torch.cat([at, torch.full((U, pad), -1)], 1)
        assert torch.equal(part.best_v, v) and torch.equal(part.best_loc, at)
    assert part.best_loc[0].tolist() == [1, 2, 4, 0, 3]  # 1.0, 1.0, 0.5, then the -infs in location order
