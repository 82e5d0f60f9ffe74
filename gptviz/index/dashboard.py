"""A unit's page as data in Neuronpedia's feature-dashboard shape, and the whole index as files a dashboard tool loads.

The shape is the batch file SAEDashboard's NeuronpediaRunner writes and Neuronpedia's importer reads
(`batch-N.json`): {"model_id", "layer", "sae_set", "sae_id_suffix", "features": [feature, ...]}, each feature with
Neuronpedia's own field names:
  feature_index                       the neuron's or head's number within its layer;
  activations                         [{tokens, values, bin_min, bin_max, bin_contains, qualifying_token_index}]:
                                      each example's tokens (text) and the unit's value on each, the example's own
                                      token at qualifying_token_index; the top examples first (bin_min -1, bin_max the
                                      unit's peak, bin_contains -1, as SAEDashboard marks its top group), then each
                                      band's (bin_min, bin_max: the band's edges; bin_contains: its share of the
                                      positive values);
  frac_nonzero                        the share of tokens where the unit is > 0;
  freq_hist_data_bar_values/_heights  the histogram of its positive values: bins' centres and counts;
  pos_str/pos_values, neg_str/neg_values   the tokens its direct effect raises and lowers most, with the logit change;
  logits_hist_data_bar_values/_heights     the histogram of that effect over the whole vocabulary;
  n_prompts_total, n_tokens_in_prompt, dataset   the windows scanned, their length, the corpus;
  and the fields gptviz has nothing for (neuron alignment, correlated neurons and features, decoder weights) as
  empty lists, since the importer reads every one.
What Neuronpedia has no field for travels under "gptviz" (the unit's id, its whole histogram, quantiles, band edges
and how many sampled values each band held, the effect's token ids; each example's document, position, group and
token ids), where an importer that does not know it ignores it.

`export_index` writes one folder per Neuronpedia source, `{layer}-gptviz-mlp` (neurons) and `{layer}-gptviz-attn`
(heads), each holding batch-N.json files, and an `export.json` listing them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .effects import DirectEffect, direct_effect, head_direct_effect
from .read import (
    Band,
    Context,
    Example,
    attended,
    band_examples,
    example_contexts,
    histogram,
    quantiles,
    summary,
    top_examples,
)
from .store import NeuronIndex
from .unit_ids import Unit, UnitLike

SOURCE_SETS = {"neuron": "gptviz-mlp", "head": "gptviz-attn"}
FORMAT = "neuronpedia-feature-dashboard (SAEDashboard batch)"
EMPTY_FIELDS = (
    "neuron_alignment_indices",
    "neuron_alignment_values",
    "neuron_alignment_l1",
    "correlated_neurons_indices",
    "correlated_neurons_l1",
    "correlated_neurons_pearson",
    "correlated_features_indices",
    "correlated_features_l1",
    "correlated_features_pearson",
    "decoder_weights_dist",
)
LOGIT_BINS = 40
BEFORE, AFTER = 20, 6  # the unit page's context around each example (gptviz.app.unit_index)


def _text(ids, enc=None) -> list[str]:
    from ..model.tokenizer import decode

    return [decode([int(t)], enc) for t in ids]


def _label(token: int, enc=None) -> str:
    from ..model.tokenizer import token_labels

    return token_labels([token], enc)[0]


def _round(values) -> list[float | None]:
    return [None if not np.isfinite(v) else round(float(v), 5) for v in np.asarray(values, dtype=np.float64)]


def _activation(
    index: NeuronIndex, e: Example, c: Context, bin_min: float, bin_max: float, contains: float, group: str, enc=None
) -> dict:
    return {
        "tokens": _text(c.ids, enc),
        "values": _round(c.values),
        "bin_min": float(bin_min),
        "bin_max": float(bin_max),
        "bin_contains": float(contains),
        "qualifying_token_index": int(c.peak),
        "gptviz": {
            "group": group,
            "rank": e.rank,
            "document": e.doc_name,
            "position": e.pos,
            "held_out": bool(index.documents[e.doc]["held_out"]),
            "value": float(e.value),
            "ids": [int(t) for t in c.ids],
        },
    }


def default_source(contexts: Sequence[Context]) -> int:
    """The token a head's top example attends to most: the input its OV circuit is read with (the page's default)."""
    looks = attended(contexts[0]) if contexts else None
    return looks.token if looks is not None else 0


def unit_effect(model, unit: Unit, source: int | None = None, k: int = 10) -> DirectEffect:
    if unit.kind == "neuron":
        return direct_effect(model, unit.layer, unit.index, k)
    return head_direct_effect(model, unit.layer, unit.index, 0 if source is None else source, k)


def feature(
    index: NeuronIndex,
    unit: UnitLike,
    top: Sequence[Context],
    bands: Sequence[tuple[Band, Sequence[Context]]],
    effect: DirectEffect,
    source: int | None = None,
    enc=None,
) -> dict:
    """One unit as a Neuronpedia feature, from what its page computed: the contexts of its top examples (in
    top_examples' order), each band with its examples' contexts, and its direct effect (for a head, of attending to
    `source`). `enc`: the index's tokenizer, its model's (tokenizer_for; default GPT-2's)."""
    u = index.unit(unit)
    i = index.flat(u)
    a = index.arrays
    examples = top_examples(index, u)
    if len(top) != len(examples):
        raise ValueError(f"{len(top)} contexts for {len(examples)} top examples")
    peak = float(a["top_values"][i, 0])
    activations = [_activation(index, e, c, -1, peak, -1, "top", enc) for e, c in zip(examples, top, strict=True)]
    for band, contexts in bands:
        activations += [
            _activation(index, e, c, band.lo, band.hi, band.levels[1] - band.levels[0], f"band {band.number + 1}", enc)
            for e, c in zip(band.examples, contexts, strict=True)
        ]
    edges, counts = histogram(index, u)
    positive = edges[:-1] >= 0  # the bins above the 0 edge hold exactly the values > 0
    centres = (edges[:-1] + edges[1:]) / 2
    effect_counts, effect_edges = np.histogram(effect.effect.numpy(), bins=LOGIT_BINS)
    return {
        "feature_index": u.index,
        **{name: [] for name in EMPTY_FIELDS},
        "neg_str": _text([t for t, _ in effect.suppressed], enc),
        "neg_values": _round([v for _, v in effect.suppressed]),
        "pos_str": _text([t for t, _ in effect.promoted], enc),
        "pos_values": _round([v for _, v in effect.promoted]),
        "frac_nonzero": float(counts[positive].sum() / max(1, index.tokens)),
        "freq_hist_data_bar_values": _round(centres[positive]),
        "freq_hist_data_bar_heights": [int(n) for n in counts[positive]],
        "logits_hist_data_bar_values": _round((effect_edges[:-1] + effect_edges[1:]) / 2),
        "logits_hist_data_bar_heights": [int(n) for n in effect_counts],
        "n_prompts_total": int(index.meta["windows"]["count"]),
        "n_tokens_in_prompt": int(index.meta["windows"]["n_ctx"]),
        "dataset": str(index.meta["corpus"]["source"]),
        "activations": activations,
        "gptviz": {
            "unit": str(u),
            "kind": u.kind,
            "layer": u.layer,
            "index": u.index,
            "summary": summary(index, u, enc),
            "pos_ids": [int(t) for t, _ in effect.promoted],
            "neg_ids": [int(t) for t, _ in effect.suppressed],
            "source_id": None if u.kind == "neuron" else int(source or 0),
            "score": index.meta["scores"][u.kind],
            "tokens_scanned": index.tokens,
            "histogram": {"edges": _round(edges), "counts": [int(n) for n in counts]},
            "quantiles": {str(q): float(v) for q, v in quantiles(index, u).items()},
            "mean": float(a["mean"][i]),
            "std": float(a["std"][i]),
            "bands": [
                {
                    "band": b.number + 1,
                    "lo": b.lo,
                    "hi": b.hi,
                    "levels": list(b.levels),
                    "sampled": b.sampled,
                    "examples": len(b.examples),
                }
                for b, _ in bands
            ],
            "band_rule": index.meta["bands"]["rule"],
            "sample": int(index.meta["bands"]["sample"]),
            "positive_values": int(counts[positive].sum()),
            "effect": (
                "the logit change per unit of the neuron's activation: its output weights through the final "
                "norm and the unembedding"
            )
            if u.kind == "neuron"
            else (f"what attending to {_label(source or 0, enc)} writes, through the final norm and the unembedding"),
        },
    }


def batch(index: NeuronIndex, features: list[dict], layer: int, kind: str) -> dict:
    """Features of one layer and kind as one batch file's content."""
    return {
        "model_id": str(index.meta["model"]["name"] or "gptviz-model"),
        "layer": int(layer),
        "sae_set": SOURCE_SETS[kind],
        "sae_id_suffix": None,
        "features": features,
        "gptviz": {
            "format": FORMAT,
            "index_version": index.meta["version"],
            "model_fingerprint": index.meta["model"]["fingerprint"],
        },
    }


def unit_contexts(
    index: NeuronIndex, docs, model, unit: UnitLike, before: int = BEFORE, after: int = AFTER
) -> tuple[list[Context], list[tuple[Band, list[Context]]]]:
    """The contexts of a unit's top examples and of each band's, in one batched forward pass."""
    u = index.unit(unit)
    examples = top_examples(index, u)
    bands = band_examples(index, u)
    every = examples + [e for b in bands for e in b.examples]
    contexts = example_contexts(index, docs, every, model=model, before=before, after=after)
    top, rest, out = contexts[: len(examples)], contexts[len(examples) :], []
    for b in bands:
        out.append((b, rest[: len(b.examples)]))
        rest = rest[len(b.examples) :]
    return top, out


def unit_dashboard(index: NeuronIndex, docs, model, unit: UnitLike, source: int | None = None) -> dict:
    """A unit's page as one batch file holding one feature (the app's JSON download; `python -m gptviz index
    export` writes every unit)."""
    u = index.unit(unit)
    top, bands = unit_contexts(index, docs, model, u)
    source = default_source(top) if u.kind == "head" and source is None else source
    from ..model.tokenizer import tokenizer_for

    return batch(
        index,
        [feature(index, u, top, bands, unit_effect(model, u, source), source, tokenizer_for(model))],
        u.layer,
        u.kind,
    )


def export_index(
    index: NeuronIndex,
    docs,
    model,
    out,
    *,
    units: Sequence[UnitLike] | None = None,
    per_batch: int = 128,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Every unit (or `units`) as Neuronpedia batch files under `out` (a new or empty folder): a folder per
    Neuronpedia source (`{layer}-gptviz-mlp`, `{layer}-gptviz-attn`), batch-N.json in each of at most `per_batch`
    features, and export.json listing them. `progress(done, total)` after each unit."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{str(out)!r} is not a new or empty folder: nothing written")
    chosen = [index.unit(u) for u in (units if units is not None else index.units())]
    groups: dict[tuple[int, str], list[Unit]] = {}
    for u in chosen:
        groups.setdefault((u.layer, u.kind), []).append(u)
    listed, done = [], 0
    for (layer, kind), members in sorted(groups.items(), key=lambda g: (g[0][1] != "neuron", g[0][0])):
        folder = out / f"{layer}-{SOURCE_SETS[kind]}"
        folder.mkdir(parents=True, exist_ok=True)
        for n, start in enumerate(range(0, len(members), per_batch)):
            features = []
            for u in members[start : start + per_batch]:
                features += unit_dashboard(index, docs, model, u)["features"]
                done += 1
                if progress is not None:
                    progress(done, len(chosen))
            path = folder / f"batch-{n}.json"
            path.write_text(json.dumps(batch(index, features, layer, kind), allow_nan=False), encoding="utf-8")
            listed.append(
                {
                    "file": str(path.relative_to(out)),
                    "layer": layer,
                    "source_set": SOURCE_SETS[kind],
                    "features": [f["feature_index"] for f in features],
                }
            )
    (out / "export.json").write_text(
        json.dumps(
            {
                "format": FORMAT,
                "model": index.meta["model"],
                "corpus": {k: v for k, v in index.meta["corpus"].items() if k != "documents"},
                "units": len(chosen),
                "batches": listed,
                "load": "each folder is one Neuronpedia source: its batch files are what SAEDashboard's "
                "NeuronpediaRunner writes and Neuronpedia's importer reads (a layer number and a source set id "
                "per folder)",
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    return out
