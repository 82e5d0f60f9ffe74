"""gptviz.index.bands: the examples from five bands of each unit's positive values against brute force (every value
recomputed, the sample chosen by hand from the keys), the sample's exact merge across shards, the
band edges against the histogram, and the refusal of an index of the previous format with the command that rebuilds
it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gptviz import index as ix
from gptviz.index.bands import band_edges, sample_keys
from tests.support.models import build

DOC_LENGTHS = (60, 9, 33, 41)
SAMPLE = 6  # small, so that samples fill and values are turned away (64 would hold every positive value here)


@pytest.fixture(scope="module")
def scanned():
    model = build(seed=5)
    g = torch.Generator().manual_seed(7)
    docs = [ix.Document(f"d{i}", torch.randint(0, 14, (n,), generator=g).numpy()) for i, n in enumerate(DOC_LENGTHS)]
    index = ix.build_index(model, docs, batch=3, top_k=4, bins=16, min_count=3, sample=SAMPLE)
    return model, docs, index


def every_value(model, docs, stride: int) -> torch.Tensor:
    """Every token's every unit score, each token in its own scoring window: [tokens, units]."""
    rows = []
    for d in docs:
        for t in range(len(d.ids)):
            start = ix.scoring_window(t, model.config.n_ctx, stride)
            rows.append(ix.unit_values(model, d.ids[start : t + 1])[-1])
    return torch.stack(rows)


@pytest.mark.slow
def test_each_bands_examples_are_the_samples_smallest_keys_in_it(scanned):
    model, docs, index = scanned
    values = every_value(model, docs, index.meta["windows"]["stride"]).numpy()
    offsets = np.concatenate([[0], np.cumsum(DOC_LENGTHS)])
    keys = sample_keys(torch.arange(index.tokens)).numpy()
    a = index.arrays
    checked = 0
    for i in range(index.n_units):
        column = values[:, i]
        positive = np.flatnonzero(column > 0)
        bands = ix.band_examples(index, i)
        if not len(positive):
            assert bands == [] and np.isnan(a["band_edges"][i]).all()
            continue
        sampled = positive[np.argsort(keys[positive])][:SAMPLE]  # the SAMPLE positive values with the smallest keys
        edges = a["band_edges"][i]
        assert edges[0] == 0 and edges[-1] == pytest.approx(column.max(), rel=1e-5) and (np.diff(edges) >= 0).all()
        band_of = np.searchsorted(edges[1:-1], column[sampled], side="left")  # (lo, hi]
        assert [b.sampled for b in bands] == np.bincount(band_of, minlength=ix.BANDS).tolist()
        for b, band in enumerate(bands):
            mine = sampled[band_of == b][: ix.BAND_EXAMPLES]  # the band's smallest keys
            expected = sorted(((float(column[g]), int(g)) for g in mine), key=lambda vg: (-vg[0], vg[1]))
            got = [(e.value, int(offsets[e.doc] + e.pos)) for e in band.examples]
            assert [g for _, g in got] == [g for _, g in expected], (i, b)  # the same places, highest first
            # the same values (a batched forward pass rounds a little differently from one window at a time)
            np.testing.assert_allclose([v for v, _ in got], [v for v, _ in expected], rtol=1e-4, atol=1e-7)
            assert all(band.lo < e.value <= band.hi or (b == 0 and 0 < e.value <= band.hi) for e in band.examples)
            assert band.levels == (b / ix.BANDS, (b + 1) / ix.BANDS)
            checked += len(got)
    assert checked > 3 * index.n_units  # most units have examples in several bands


@pytest.mark.slow
def test_band_edges_are_the_positive_values_quantiles_of_the_histogram(scanned):
    _, _, index = scanned
    a = index.arrays
    edges, counts = ix.histogram(index, 3)
    zero = int(np.flatnonzero(edges == 0)[0])  # the 0 edge: the bins from it on hold exactly the values > 0
    positive = counts[zero:]
    cum = np.concatenate([[0], np.cumsum(positive)]) / positive.sum()
    for level, edge in zip(ix.BAND_LEVELS, a["band_edges"][3, 1:-1], strict=False):
        # linear within a bin: the share of positive values below the edge, read off the histogram, is the level
        assert np.interp(edge, edges[zero:], cum) == pytest.approx(level, abs=1e-5)
    # a unit that is never > 0 has no bands
    none = band_edges(np.array([[-2.0, -1.0, 0.0, 1.0]]), np.array([[3, 4, 0]]), np.array([2]), np.array([-0.5]))
    assert np.isnan(none).all()


@pytest.mark.slow
def test_the_sample_merges_exactly_over_shards(scanned):
    model, docs, index = scanned
    plan = ix.plan_scan(model, docs, batch=3, top_k=4, bins=16, min_count=3, sample=SAMPLE)
    parts = [ix.scan_batches(model, docs, plan, plan.batches(s, 3)) for s in range(3)]
    merged = ix.finish_scan(plan, ix.merge_scans([parts[2], parts[0], parts[1]]))
    for name in ("band_edges", "band_values", "band_doc", "band_pos", "band_sampled"):
        assert np.array_equal(merged.arrays[name], index.arrays[name], equal_nan=True), name


def test_an_index_of_the_previous_format_is_refused_with_the_command_that_rebuilds_it(tmp_path):
    # a sample of 0 keeps no examples: every band is empty, its edges still read from the histogram
    index = ix.build_index(build(seed=5), [ix.Document("d", np.arange(20) % 7)], batch=2, min_count=2, sample=0)
    assert index.meta["bands"]["sample"] == 0 and (index.arrays["band_doc"] == -1).all()
    assert all(b.examples == [] for b in ix.band_examples(index, 0))
    folder = ix.save_index(index, tmp_path / "old")
    meta = json.loads((folder / ix.INDEX_JSON).read_text())
    meta["version"], meta["model"]["name"] = 2, "shakespeare-pre"
    (folder / ix.INDEX_JSON).write_text(json.dumps(meta))
    with pytest.raises(
        ix.IndexFormatError,
        match=r"version 2; this gptviz reads version 3 \(version 3 adds examples "
        r"from five bands.*`python -m gptviz index shakespeare-pre --out",
    ):
        ix.load_index(folder)
