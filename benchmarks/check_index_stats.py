"""A shipped (or any) neuron index's statistics against a direct count over the same corpus and windows.

    python -m benchmarks index-stats -- shakespeare-pre            # the shipped index of a bundled model
    python -m benchmarks index-stats -- shakespeare-post --units 300

One more pass over the index's windows, independent of the index's running statistics: every neuron's active share
counted directly (values > 0), and for `--units` units (the neurons a review named, then a seeded random choice) all
their values kept, so their exact quantiles come from np.quantile. Prints the worst disagreements as JSON; exits 1
when an active share differs by more than 0.1 percentage point, a quantile (or a band's edge, a quantile of the
positive values) lies more than one bin from the exact one, or a band's examples are not the ones its sample
chooses (gptviz.index.bands), recomputed from every value of the units kept. Peak memory: about 4 bytes x tokens x
units kept (1.46M tokens x 300 units: 1.8 GB).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from gptviz import index as ix
from gptviz.index import corpus as ix_corpus
from gptviz.index import forward as ix_forward
from gptviz.model.weights import load_pretrained

NAMED = ("L3N47", "L3N301", "L2N487", "L2N107", "L3N215", "L1N228")  # the units the review found wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a bundled model's name")
    parser.add_argument("--index", default=None, help="index folder (default: the model's shipped index)")
    parser.add_argument("--units", type=int, default=300, help="units whose quantiles are checked exactly")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    index = ix.load_index(args.index) if args.index else ix.bundled_index(args.model)
    model = load_pretrained(args.model).eval()
    if not ix.index_matches(index, model):
        raise SystemExit("the index was not built with this model")
    docs = ix.index_documents(index)
    n_ctx, stride = index.meta["windows"]["n_ctx"], index.meta["windows"]["stride"]
    lengths = [len(d.ids) for d in docs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    windows = ix_corpus._windows(lengths, n_ctx, stride)

    rng = np.random.default_rng(0)
    named = [index.flat(u) for u in NAMED if _exists(index, u)]
    kept = list(dict.fromkeys(named + list(rng.choice(index.n_units, args.units, replace=False))))[
        : max(args.units, len(named))
    ]
    kept_t = torch.as_tensor(kept)
    active = torch.zeros(index.n_units, dtype=torch.long)
    columns = np.empty((len(kept), index.tokens), dtype=np.float32)
    done, batch = 0, index.meta["scan"]["batch"]
    for i in range(0, len(windows), batch):
        values, loc, _ = ix_forward._run_windows(model, docs, offsets, windows[i : i + batch])
        active += (values > 0).sum(1)
        columns[:, loc.numpy()] = values[kept_t].numpy()
        done += values.shape[1]
    assert done == index.tokens

    n = index.n_neurons
    exact_share = active[:n].numpy() / index.tokens
    share_error = np.abs(index.arrays["active_share"][:n] - exact_share)
    worst = np.argsort(-share_error)[:5]
    quantile_rows, bad_quantiles = [], 0
    for row, u in enumerate(kept):
        edges, _ = ix.histogram(index, int(u))
        for q, v in ix.quantiles(index, int(u)).items():
            exact = float(np.quantile(columns[row], q))
            b = min(max(int(np.searchsorted(edges, exact)) - 1, 0), len(edges) - 2)
            lo, hi = edges[max(b - 1, 0)], edges[min(b + 2, len(edges) - 1)]
            inside = lo - 1e-7 <= v <= hi + 1e-7
            bad_quantiles += not inside
            quantile_rows.append(
                {
                    "unit": str(index.unit(int(u))),
                    "q": q,
                    "index": v,
                    "exact": exact,
                    "bin_width": float(edges[b + 1] - edges[b]),
                    "within_one_bin": inside,
                }
            )
    bands = _check_bands(index, kept, columns, offsets)
    named_rows = [
        {
            "unit": u,
            "index_share": float(index.arrays["active_share"][index.flat(u)]),
            "exact_share": float(exact_share[index.flat(u)]),
        }
        for u in NAMED
        if _exists(index, u) and index.unit(u).kind == "neuron"
    ]
    report = {
        "model": args.model,
        "tokens": index.tokens,
        "neurons": n,
        "index_version": index.meta["version"],
        "active_share_max_error_pp": round(100 * float(share_error.max()), 6),
        "neurons_off_by_more_than_0.1pp": int((share_error > 0.001).sum()),
        "worst_active_share": [
            {
                "unit": str(index.unit(int(u))),
                "index": float(index.arrays["active_share"][u]),
                "exact": float(exact_share[u]),
            }
            for u in worst
        ],
        "named_units": named_rows,
        "quantiles_checked": len(quantile_rows),
        "quantiles_off_by_more_than_one_bin": bad_quantiles,
        "largest_quantile_error_in_bins": max(
            (abs(r["index"] - r["exact"]) / max(r["bin_width"], 1e-12) for r in quantile_rows), default=0.0
        ),
        **bands,
    }
    print(json.dumps(report, indent=1))
    return (
        0
        if (
            report["neurons_off_by_more_than_0.1pp"] == 0
            and bad_quantiles == 0
            and bands["band_examples_wrong"] == 0
            and bands["band_edges_off_by_more_than_one_bin"] == 0
        )
        else 1
    )


def _check_bands(index, kept, columns: np.ndarray, offsets: np.ndarray) -> dict:
    """For the kept units, whose every value is at hand: each band's examples are the sample chosen by hand (the
    SAMPLE positive values with the smallest keys, gptviz.index.bands), the first of them by key in the band, with
    their values; and each band edge lies within a bin of the exact quantile of the positive values."""
    from gptviz.index.bands import sample_keys

    keys = sample_keys(torch.arange(index.tokens)).numpy()
    size = index.meta["bands"]["sample"]
    checked = wrong = bad_edges = 0
    off = []
    for row, u in enumerate(kept):
        column = columns[row]
        positive = np.flatnonzero(column > 0)
        found = ix.band_examples(index, int(u))
        if not len(positive):
            wrong += bool(found)
            continue
        edges_h, _ = ix.histogram(index, int(u))
        edges = index.arrays["band_edges"][int(u)]
        ordered = np.sort(column[positive])
        for level, edge in zip(index.meta["bands"]["levels"], edges[1:-1], strict=False):
            # within a bin of the exact quantile: the share of positive values at or below it crosses the level
            # within one bin of the edge (np.quantile's interpolation between the order statistics is another
            # quantile, far from this one where a unit has a handful of positive values)
            b = min(max(int(np.searchsorted(edges_h, edge)) - 1, 0), len(edges_h) - 2)
            width = float(edges_h[b + 1] - edges_h[b]) * (1 + 1e-6)
            below = np.searchsorted(ordered, edge - width, side="right") / len(ordered)
            above = np.searchsorted(ordered, edge + width, side="right") / len(ordered)
            if not (below <= level + 1e-9 and level - 1e-9 <= above):
                bad_edges += 1
                off.append(
                    {
                        "unit": str(index.unit(int(u))),
                        "level": level,
                        "index": float(edge),
                        "np_quantile": float(np.quantile(ordered, level)),
                        "bin_width": width,
                        "share_below": below,
                        "share_above": above,
                        "positive_values": len(positive),
                    }
                )
        sampled = positive[np.argsort(keys[positive])][:size]
        band_of = np.searchsorted(edges[1:-1], column[sampled], side="left")
        for band in found:
            mine = sorted(
                sampled[band_of == band.number][: index.meta["bands"]["examples"]], key=lambda g: (-column[g], g)
            )
            got = [int(offsets[e.doc] + e.pos) for e in band.examples]
            values_agree = np.allclose([e.value for e in band.examples], column[got], rtol=1e-5, atol=1e-6)
            wrong += got != [int(g) for g in mine] or not values_agree
            checked += len(got)
    return {
        "band_examples_checked": checked,
        "band_examples_wrong": wrong,
        "band_edges_off_by_more_than_one_bin": bad_edges,
        "band_edges_off": off[:10],
    }


def _exists(index, unit) -> bool:
    try:
        index.unit(unit)
        return True
    except ValueError:
        return False


if __name__ == "__main__":
    sys.exit(main())
