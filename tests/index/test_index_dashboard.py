"""gptviz.index.dashboard: a unit's page as Neuronpedia's feature-dashboard JSON (every field Neuronpedia's importer
reads, the examples' tokens and values as their contexts, the bands' ranges), its HTML page drawn from that JSON
with token text kept as text, and `python -m gptviz index export` over a whole index."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from gptviz import index as ix
from gptviz.index import dashboard as db
from gptviz.model.tokenizer import decode, encode
from tests.support.models import build

# what Neuronpedia's importer reads from each batch file, feature and activation (convert-saedashboard-to-
# neuronpedia-export.py's process_data indexes every one of these)
BATCH_FIELDS = {"model_id", "layer", "sae_id_suffix", "features"}
FEATURE_FIELDS = {
    "feature_index",
    "neuron_alignment_indices",
    "neuron_alignment_values",
    "neuron_alignment_l1",
    "correlated_neurons_indices",
    "correlated_neurons_pearson",
    "correlated_neurons_l1",
    "correlated_features_indices",
    "correlated_features_pearson",
    "correlated_features_l1",
    "neg_str",
    "neg_values",
    "pos_str",
    "pos_values",
    "frac_nonzero",
    "freq_hist_data_bar_heights",
    "freq_hist_data_bar_values",
    "logits_hist_data_bar_heights",
    "logits_hist_data_bar_values",
    "decoder_weights_dist",
    "activations",
}
ACTIVATION_FIELDS = {"tokens", "values", "bin_contains", "bin_max", "bin_min", "qualifying_token_index"}
HOSTILE = "</script><b>bold</b><img src=x onerror=alert(1)> & *stars*"


@pytest.fixture(scope="module")
def tiny():
    model = build(vocab_size=50257, d_model=16, d_ff=32, seed=3)
    g = torch.Generator().manual_seed(1)
    hostile = np.array(encode(HOSTILE) * 4)
    docs = [
        ix.Document("d0", torch.randint(0, 300, (70,), generator=g).numpy()),
        ix.Document("evil", hostile),
        ix.Document("d2", torch.randint(0, 300, (40,), generator=g).numpy(), held_out=True),
    ]
    index = ix.build_index(model, docs, model_name="tiny", batch=2, min_count=2)
    return model, docs, index


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["L1N3", "L0H1"])
def test_a_units_json_has_neuronpedias_fields_and_its_examples(tiny, unit):
    model, docs, index = tiny
    batch = db.unit_dashboard(index, docs, model, unit)
    json.dumps(batch, allow_nan=False)  # plain JSON: no NaN, no numpy
    assert BATCH_FIELDS <= set(batch) and batch["model_id"] == "tiny" and len(batch["features"]) == 1
    f = batch["features"][0]
    u = index.unit(unit)
    assert FEATURE_FIELDS <= set(f) and f["feature_index"] == u.index and batch["layer"] == u.layer
    top, bands = ix.top_examples(index, u), ix.band_examples(index, u)
    acts = f["activations"]
    assert len(acts) == len(top) + sum(len(b.examples) for b in bands)
    contexts = ix.example_contexts(
        index, docs, top + [e for b in bands for e in b.examples], model=model, before=db.BEFORE, after=db.AFTER
    )
    peak = float(index.arrays["top_values"][index.flat(u), 0])
    for a, c, e in zip(acts, contexts, top + [e for b in bands for e in b.examples], strict=True):
        assert ACTIVATION_FIELDS <= set(a)
        assert a["tokens"] == [decode([t]) for t in c.ids] and a["gptviz"]["ids"] == c.ids.tolist()
        np.testing.assert_allclose(a["values"], c.values, atol=1e-5)
        assert a["values"][a["qualifying_token_index"]] == pytest.approx(e.value, abs=1e-4)  # the example's token
        assert (a["gptviz"]["document"], a["gptviz"]["position"]) == (e.doc_name, e.pos)
    for a in acts[: len(top)]:  # the top group as SAEDashboard marks it
        assert (a["bin_min"], a["bin_contains"], a["bin_max"]) == (-1, -1, pytest.approx(peak))
    groups = [a for a in acts[len(top) :]]
    for b in bands:
        mine = [a for a in groups if a["gptviz"]["group"] == f"band {b.number + 1}"]
        assert len(mine) == len(b.examples)
        assert all((a["bin_min"], a["bin_max"], a["bin_contains"]) == (b.lo, b.hi, pytest.approx(0.2)) for a in mine)
        assert all(b.lo < a["gptviz"]["value"] <= b.hi or b.number == 0 for a in mine)
    # the histogram of positive values, the share above 0 and the direct effect's tokens
    edges, counts = ix.histogram(index, u)
    assert sum(f["freq_hist_data_bar_heights"]) == counts[edges[:-1] >= 0].sum()
    assert f["frac_nonzero"] == pytest.approx(counts[edges[:-1] >= 0].sum() / index.tokens)
    if u.kind == "neuron":
        assert f["frac_nonzero"] == pytest.approx(float(index.arrays["active_share"][index.flat(u)]))
    assert sum(f["logits_hist_data_bar_heights"]) == 50257 and len(f["pos_str"]) == len(f["pos_values"]) == 10
    assert f["pos_values"] == sorted(f["pos_values"], reverse=True) and f["neg_values"] == sorted(f["neg_values"])


@pytest.mark.slow
def test_the_html_page_draws_the_json_with_token_text_as_text(tiny):
    from gptviz.notebook.unit_page import dashboard_html

    model, docs, index = tiny
    # a unit whose examples hold the hostile text
    evil = next(i for i in range(index.n_units) if (index.arrays["top_doc"][i] == 1).any())
    batch = db.unit_dashboard(index, docs, model, evil)
    tokens = {t for a in batch["features"][0]["activations"] for t in a["tokens"]}
    assert {"</", "><", "<img"} & tokens  # the hostile text's markup pieces are in the data
    page = dashboard_html(batch)
    assert "<b>" not in page and "<img" not in page and "</b>" not in page  # never as markup
    assert len(re.findall(r"<script", page)) == page.count("</script>")  # only the page's own script tags
    # every example is a row of the token_rows component: the top group, then one component per band
    data = [
        json.loads(d.replace("\\u003c", "<").replace("\\u003e", ">").replace("\\u0026", "&"))
        for d in re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', page)
    ]
    assert sum(len(d["rows"]) for d in data) == len(batch["features"][0]["activations"])
    assert {"</", "><", "<img"} & {t for d in data for row in d["rows"] for t in row["tokens"]}  # drawn as text


@pytest.mark.slow
def test_the_cli_exports_every_unit_as_batch_files(tiny, tmp_path, capsys):
    from gptviz.__main__ import main
    from gptviz.model.weights import save_checkpoint

    model, docs, index = tiny
    save_checkpoint(model, tmp_path / "ckpt")
    # the index over a corpus of files, so that export reads its documents again from where the index says
    corpus = tmp_path / "plays"
    corpus.mkdir()
    (corpus / "one.txt").write_text("To be, or not to be: that is the question. " * 6)
    (corpus / "two.txt").write_text(HOSTILE)
    assert (
        main(["index", str(tmp_path / "ckpt"), "--corpus", str(corpus), "--out", str(tmp_path / "idx"), "--batch", "2"])
        == 0
    )
    out = tmp_path / "export"
    assert (
        main(
            [
                "index",
                "export",
                str(tmp_path / "ckpt"),
                "--index",
                str(tmp_path / "idx"),
                "--out",
                str(out),
                "--units",
                "L0N1,L0N2,L0N3,L1H0",
                "--per-batch",
                "2",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["units"] == 4 and printed["batches"] == 3
    listing = json.loads((out / "export.json").read_text())
    assert [(b["file"], b["features"]) for b in listing["batches"]] == [
        ("0-gptviz-mlp/batch-0.json", [1, 2]),
        ("0-gptviz-mlp/batch-1.json", [3]),
        ("1-gptviz-attn/batch-0.json", [0]),
    ]
    for b in listing["batches"]:
        batch = json.loads((out / b["file"]).read_text())
        assert BATCH_FIELDS <= set(batch) and all(FEATURE_FIELDS <= set(f) for f in batch["features"])
    # a folder that holds something is refused, before anything is written
    assert main(["index", "export", str(tmp_path / "ckpt"), "--index", str(tmp_path / "idx"), "--out", str(out)]) == 2
    assert "not a new or empty folder" in capsys.readouterr().err
