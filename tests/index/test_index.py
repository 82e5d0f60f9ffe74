"""gptviz.index: the corpus scan against brute force, fresh captures of listed examples, direct effects by hand,
the on-disk format, and the shipped index of shakespeare-pre."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from gptviz import index as ix
from gptviz.index import corpus as ix_corpus
from gptviz.model.hooks import act_name, capture
from tests.support.index_reference import assert_top_k_sorted, brute_force
from tests.support.models import build, model_with_silent_neurons

DOC_LENGTHS = (41, 7, 16, 30)  # n_ctx is 16: several windows, one short document, one exactly n_ctx


@pytest.fixture(scope="module")
def small():
    model = build()
    g = torch.Generator().manual_seed(3)
    vocab = 12  # few distinct ids, so tokens repeat and the per-token means have occurrences to average
    docs = [
        ix.Document(f"d{i}", torch.randint(0, vocab, (n,), generator=g).numpy(), held_out=(i == 1))
        for i, n in enumerate(DOC_LENGTHS)
    ]
    index = ix.build_index(model, docs, model_name="test-small", batch=3, top_k=5, bins=16, min_count=3)
    return model, docs, index


def by_hand_head_norm(model, layer, head, z):
    hs = model.config.d_head
    w = model.blocks[layer].attn.c_proj.weight.detach()[:, head * hs : (head + 1) * hs]  # (C, hs): W_O^h
    return (z @ w.t()).norm(dim=-1)


def test_windows_score_every_token_once():
    for n in (1, 5, 16, 17, 40, 100):
        w = ix_corpus._windows([n], 16, 12)
        scored = np.concatenate([np.arange(s + f, s + length) for _, s, length, f in w])
        assert np.array_equal(scored, np.arange(n))
        for t in range(n):  # scoring_window agrees with the windows the scan ran
            row = next(r for r in w if r[1] + r[3] <= t < r[1] + r[2])
            assert ix.scoring_window(t, 16, 12) == row[1]
            assert t - row[1] >= min(t, 16 - 12)  # left context: n_ctx - stride, or the whole document


def test_top_k_equals_brute_force_sort(small):
    model, docs, index = small
    values = brute_force(model, docs, index.meta["windows"]["stride"])
    assert values.shape == (sum(DOC_LENGTHS), index.n_units)
    assert_top_k_sorted(index, values, DOC_LENGTHS, rtol=1e-5, atol=1e-6)


def test_batches_of_one_window_equal_brute_force(small):
    """Batches of one window (gpt2-small's default) read the capture's scored rows as a view, not a copy: a
    document's first window (every position scored) and its later ones (only the tail): the top K, its locations
    where neighbours differ clearly, each unit's minimum and mean equal the brute force, and every histogram counts
    every token once."""
    model, docs, _ = small
    K = 5
    index = ix.build_index(model, docs, batch=1, top_k=K, bins=16, min_count=3)
    assert index.meta["scan"]["batch"] == 1 and index.meta["windows"]["count"] > len(docs)  # later windows ran
    values = brute_force(model, docs, index.meta["windows"]["stride"])
    order = torch.sort(values, dim=0, descending=True, stable=True)
    torch.testing.assert_close(torch.from_numpy(index.arrays["top_values"]), order.values[:K].t(), rtol=1e-5, atol=1e-6)
    offsets = np.concatenate([[0], np.cumsum(DOC_LENGTHS)])
    got = offsets[index.arrays["top_doc"]] + index.arrays["top_pos"]
    vals = order.values[: K + 1].t().numpy()
    clear = np.zeros_like(got, dtype=bool)
    for i in range(K):
        clear[:, i] = ((i == 0) | (vals[:, i - 1] - vals[:, i] > 1e-4)) & (vals[:, i] - vals[:, i + 1] > 1e-4)
    assert clear.sum() > clear.size // 2
    assert np.array_equal(got[clear], order.indices[:K].t().numpy()[clear])
    torch.testing.assert_close(
        torch.from_numpy(index.arrays["value_range"][:, 0]), values.amin(0), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(torch.from_numpy(index.arrays["mean"]), values.mean(0), rtol=1e-4, atol=1e-5)
    assert (index.arrays["hist_counts"].sum(1) == sum(DOC_LENGTHS)).all()


def test_histogram_quantiles_active_mean_and_tokens(small):
    model, docs, index = small
    values = brute_force(model, docs, index.meta["windows"]["stride"]).numpy()
    total = sum(DOC_LENGTHS)
    a = index.arrays
    assert (a["hist_counts"].sum(1) == total).all()
    assert index.tokens == total
    for u in range(index.n_units):
        edges, counts = ix.histogram(index, u)
        assert edges[0] <= values[:, u].min() + 1e-6 and edges[-1] >= values[:, u].max() - 1e-6
        assert np.all(np.diff(edges) > 0)
        expected, _ = np.histogram(np.clip(values[:, u], edges[0], edges[-1]), bins=edges)
        assert np.abs(expected - counts).sum() <= 2  # a value on a bin edge may round to either side
    n_neurons = index.n_neurons
    np.testing.assert_allclose(a["active_share"][:n_neurons], (values[:, :n_neurons] > 0).mean(0), atol=1.5 / total)
    assert np.isnan(a["active_share"][n_neurons:]).all()
    np.testing.assert_allclose(a["mean"], values.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a["std"], values.std(0), rtol=1e-3, atol=1e-5)
    # quantiles from the histogram: within one bin's width of the exact ones
    for u in range(0, index.n_units, 7):
        edges, _ = ix.histogram(index, u)
        width = np.diff(edges).max()
        for q, v in ix.quantiles(index, u).items():
            low, high = np.quantile(values[:, u], q, method="lower"), np.quantile(values[:, u], q, method="higher")
            assert low - width - 1e-6 <= v <= high + width + 1e-6
    # top tokens: highest means among tokens occurring at least min_count times
    ids = np.concatenate([d.ids for d in docs])
    counts = np.bincount(ids)
    frequent = np.flatnonzero(counts >= index.meta["top_tokens"]["min_count"])
    assert np.array_equal(a["token_ids"], frequent)
    means = np.stack([values[ids == t].mean(0) for t in frequent])  # (V', U)
    for u in range(0, index.n_units, 5):
        best = ix.top_tokens(index, u)
        assert [t for t, _ in best][:3] == list(frequent[np.argsort(-means[:, u], kind="stable")][:3])
        np.testing.assert_allclose([m for _, m in best], np.sort(means[:, u])[::-1][: len(best)], rtol=1e-4, atol=1e-5)
    z = (means - values.mean(0)) / values.std(0)
    token = int(frequent[0])
    listed = ix.units_for_token(index, token, k=3)
    assert [ix.Unit(*x.unit) for x in listed] == [index.unit(int(i)) for i in np.argsort(-z[0, :n_neurons])[:3]]
    np.testing.assert_allclose(
        [x.mean for x in listed], means[0, np.argsort(-z[0, :n_neurons])[:3]], rtol=1e-3, atol=1e-4
    )
    assert all(x.unit.kind == "head" for x in ix.units_for_token(index, token, kind="head"))
    assert ix.units_for_token(index, 99) == []  # never occurs


@pytest.mark.slow
def test_every_listed_activation_equals_a_fresh_capture(small):
    model, docs, index = small
    n_ctx, stride = model.config.n_ctx, index.meta["windows"]["stride"]
    for unit in index.units():
        for ex in ix.top_examples(index, unit):
            ctx = ix.example_context(index, docs, ex.doc, ex.pos, model=model, unit=unit, before=6, after=3)
            assert ctx.ids[ctx.peak] == docs[ex.doc].ids[ex.pos] and ctx.positions[ctx.peak] == ex.pos
            assert ctx.values[ctx.peak] == pytest.approx(ex.value, rel=1e-5, abs=1e-6)
            # independently: capture the peak's scoring window and read the hook (heads: the norm by hand)
            start = ix.scoring_window(ex.pos, n_ctx, stride)
            window = torch.from_numpy(docs[ex.doc].ids[start : ex.pos + 1])
            _, cache = capture(model, window, [unit.hook])
            if unit.kind == "neuron":
                fresh = cache[unit.hook][0, -1, unit.index]
            else:
                fresh = by_hand_head_norm(model, unit.layer, unit.index, cache[unit.hook][0, -1, unit.index])
            assert float(fresh) == pytest.approx(ex.value, rel=1e-5, abs=1e-6)
    # the whole context, token by token, equals brute force (each token in its own scoring window)
    values = brute_force(model, docs, stride)
    offsets = np.concatenate([[0], np.cumsum(DOC_LENGTHS)])
    ctx = ix.example_context(index, docs, 0, 30, model=model, unit="L1N3", before=30, after=10)
    assert list(ctx.positions) == list(range(0, 41))
    np.testing.assert_allclose(ctx.values, values[offsets[0] + ctx.positions, index.flat("L1N3")], rtol=1e-5, atol=1e-6)
    head = ix.example_context(index, docs, 0, 30, model=model, unit="L0H2", before=5, after=2)
    assert head.attention is not None and np.nansum(head.attention) <= 1 + 1e-5
    assert (head.attention[head.peak + 1 :] == 0).all()


@pytest.fixture(scope="module")
def silent():
    model = model_with_silent_neurons()
    g = torch.Generator().manual_seed(5)
    docs = [ix.Document(f"d{i}", torch.randint(0, 20, (n,), generator=g).numpy()) for i, n in enumerate((60, 33, 9))]
    return model, docs, ix.build_index(model, docs, batch=2, top_k=4, bins=32, min_count=3)


def test_active_share_and_quantiles_equal_a_direct_count(silent):
    model, docs, index = silent
    values = brute_force(model, docs, index.meta["windows"]["stride"]).numpy()
    total, n_neurons, a = len(values), index.n_neurons, index.arrays
    F = model.config.d_ff
    for layer in range(model.config.n_layers):
        # exactly zero; its sign is the CPU's GELU kernel's (-0.0 on the CI's, +0.0 on an AMD EPYC): either falls
        # below the 0 edge, checked below (-0.0 itself: test_block_binner_counts_equal_the_sign_exact_rule)
        assert (values[:, layer * F : layer * F + 8] == 0).all()
        assert (values[:, layer * F + 8 : layer * F + 16] < 0).all()
    exact = (values[:, :n_neurons] > 0).sum(0)
    assert 0 < exact[16:24].min() and exact[16:24].max() < total  # the rarely active ones are neither 0 nor all
    # the share is a direct count: equal, not close
    assert np.array_equal(a["active_share"][:n_neurons], (exact / total).astype(np.float32))
    # and the histogram agrees with it: every value > 0 lies in a bin above the 0 edge, every other value below
    for u in range(n_neurons):
        edges, counts = ix.histogram(index, u)
        zero = int(np.argmin(np.abs(edges[1:-1]))) + 1
        assert edges[zero] == 0.0 and counts[zero:].sum() == exact[u], index.unit(u)
    for u in range(index.n_units):  # quantiles: within one bin of the exact ones, for every unit
        edges, _ = ix.histogram(index, u)
        for q, v in ix.quantiles(index, u).items():
            low, high = np.quantile(values[:, u], q, method="lower"), np.quantile(values[:, u], q, method="higher")
            b_low = min(max(np.searchsorted(edges, low) - 1, 0), len(edges) - 2)
            b_high = min(max(np.searchsorted(edges, high) - 1, 0), len(edges) - 2)
            assert edges[max(b_low - 1, 0)] - 1e-7 <= v <= edges[min(b_high + 2, len(edges) - 1)] + 1e-7, (u, q)
    for layer in range(model.config.n_layers):  # the silent neurons' quantiles sit at 0, not a bin above it
        for u in range(layer * F, layer * F + 16):
            q = ix.quantiles(index, u)
            assert max(q.values()) <= 0.0, (index.unit(u), q)
    line = ix.summary(index, "L0N0")
    assert line.startswith(f"L0N0: never active (> 0) on the {total:,} tokens") and "peak 0;" in line
    for u in range(n_neurons):  # the words follow the count: a rare or a busy neuron is never rounded to 0% or 100%
        phrase = ix.active_phrase(index, u)
        if exact[u] == 0:
            assert phrase.startswith("never active")
        elif exact[u] < total / 1000 or exact[u] > total * 0.999:
            assert phrase.startswith(f"active on {exact[u]:,} of {total:,} tokens"), phrase
        else:
            assert phrase == f"active on {exact[u] / total:.1%} of tokens"


def test_a_rebuild_gives_the_same_arrays(silent):
    model, docs, index = silent
    again = ix.build_index(model, docs, batch=2, top_k=4, bins=32, min_count=3)
    assert sorted(again.arrays) == sorted(index.arrays)
    for name, array in index.arrays.items():
        assert np.array_equal(array, again.arrays[name], equal_nan=True), name


def test_batched_contexts_equal_one_at_a_time(small):
    model, docs, index = small
    for unit in ("L1N3", "L0H2", "L1H1"):
        examples = ix.top_examples(index, unit)
        batched = ix.example_contexts(index, docs, examples, model=model, before=20, after=4)
        assert len(batched) == len(examples)
        for ex, got in zip(examples, batched, strict=True):
            one = ix.example_context(index, docs, ex.doc, ex.pos, model=model, unit=unit, before=20, after=4)
            assert np.array_equal(got.positions, one.positions) and np.array_equal(got.ids, one.ids)
            assert got.peak == one.peak
            np.testing.assert_allclose(got.values, one.values, rtol=1e-5, atol=1e-6)
            assert got.values[got.peak] == pytest.approx(ex.value, rel=1e-5, abs=1e-6)
            if one.attention is not None:
                np.testing.assert_allclose(got.attention, one.attention, rtol=1e-5, atol=1e-6)
    assert ix.example_contexts(index, docs, [], model=model) == []
    with pytest.raises(ValueError, match="one unit"):
        ix.example_contexts(
            index, docs, ix.top_examples(index, "L0N0", 1) + ix.top_examples(index, "L0N1", 1), model=model
        )


def test_units_at_skips_units_dead_in_the_corpus(small):
    model, docs, index = small
    dead = ix.NeuronIndex(index.meta, dict(index.arrays))
    dead.arrays["top_values"] = index.arrays["top_values"].copy()
    dead.arrays["top_values"][index.flat("L0N5")] = 0.0  # a neuron that never fired: peak 0
    ids = docs[0].ids[:10]
    listed = [s.unit for s in ix.units_at(model, ids, 4, index=dead, k=index.n_units)]
    assert ix.Unit("neuron", 0, 5) not in listed  # it used to rank first (value / 1e-12)
    assert len(listed) == index.n_units - 1


def test_direct_effect_equals_the_product_by_hand():
    model = build()
    w_out = model.blocks[1].mlp.c_proj.weight.detach()[:, 7]  # W_out[7], (C,)
    W_U = model.lm_head.weight.detach().t()  # (C, vocab)
    plain = ix.direct_effect(model, 1, 7, k=4, fold_ln=False)
    torch.testing.assert_close(plain.effect, w_out @ W_U)
    folded = ix.direct_effect(model, 1, 7, k=4)
    torch.testing.assert_close(folded.effect, ((w_out - w_out.mean()) * model.ln_f.weight.detach()) @ W_U)
    order = torch.argsort(folded.effect, descending=True)
    assert [t for t, _ in folded.promoted] == order[:4].tolist()
    assert [t for t, _ in folded.suppressed] == order.flip(0)[:4].tolist()
    # post-norm: the neuron's own ln_2, every later block's norms, then ln_f
    post = build(norm="post")
    with torch.no_grad():
        for p in post.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)  # gains away from 1, so folding them matters
    v = post.blocks[0].mlp.c_proj.weight.detach()[:, 2]
    for norm in (post.blocks[0].ln_2, post.blocks[1].ln_1, post.blocks[1].ln_2, post.ln_f):
        v = (v - v.mean()) * norm.weight.detach()
    torch.testing.assert_close(ix.direct_effect(post, 0, 2).effect, v @ post.lm_head.weight.detach().t())
    # a head's OV circuit for one source token
    c, layer, head, tok = model.config, 1, 2, 5
    hs = c.d_head
    x = model.blocks[layer].ln_1(model.wte.weight[tok]).detach()
    qkv_w, qkv_b = model.blocks[layer].attn.c_attn.weight.detach(), model.blocks[layer].attn.c_attn.bias.detach()
    rows = slice(2 * c.d_model + head * hs, 2 * c.d_model + (head + 1) * hs)
    v = x @ qkv_w[rows].t() + qkv_b[rows]
    out = v @ model.blocks[layer].attn.c_proj.weight.detach()[:, head * hs : (head + 1) * hs].t()
    torch.testing.assert_close(ix.head_direct_effect(model, layer, head, tok, fold_ln=False).effect, out @ W_U)


def test_units_at_and_summary(small):
    model, docs, index = small
    ids = docs[0].ids[:10]
    values = ix.unit_values(model, ids)[4]
    top = ix.units_at(model, ids, 4, k=5)
    assert [index.flat(s.unit) for s in top] == torch.argsort(values, descending=True)[:5].tolist()
    rel = ix.units_at(model, ids, 4, index=index, k=5, kind="neuron")
    assert all(s.unit.kind == "neuron" for s in rel) and len(rel) == 5
    shares = values[: index.n_neurons] / torch.from_numpy(index.arrays["top_values"][: index.n_neurons, 0])
    assert rel[0].share_of_peak == pytest.approx(float(shares.max()), rel=1e-5)
    heads = ix.units_at(model, ids, -1, k=3, kind="head")
    assert all(s.unit.kind == "head" for s in heads)
    line = ix.summary(index, "L0N1")
    assert line.startswith("L0N1: active on ") and "top tokens" in line and "\n" not in line
    assert ix.summary(index, ("head", 1, 0)).startswith("L1H0")
    assert index.unit("l1h3") == ix.Unit("head", 1, 3) and str(index.unit(index.n_neurons)) == "L0H0"
    for bad in ("L9N0", "L0N999", "N3", -1):
        with pytest.raises(ValueError):
            index.unit(bad)


def test_save_load_round_trip_and_bad_files(small, tmp_path):
    model, docs, index = small
    folder = ix.save_index(index, tmp_path / "idx")
    loaded = ix.load_index(folder)
    assert loaded.meta == json.loads(json.dumps(index.meta))
    for name, arr in index.arrays.items():
        np.testing.assert_array_equal(loaded.arrays[name], arr)
    assert ix.index_matches(loaded, model) and not ix.index_matches(loaded, build(seed=1))
    ix.check_documents(loaded, docs)
    with pytest.raises(ValueError):
        ix.check_documents(loaded, docs[:2])
    assert loaded.meta["documents" if False else "corpus"]["documents"][1]["held_out"] is True

    def broken(change):
        bad = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
        ix.save_index(index, bad)
        change(bad)
        return bad

    def set_array(name, value):
        def change(folder):
            arrays = dict(index.arrays, **{name: value})
            np.savez(folder / ix.INDEX_NPZ, **arrays)

        return change

    def set_meta(key, value):
        def change(folder):
            meta = json.loads((folder / ix.INDEX_JSON).read_text())
            meta[key] = value
            (folder / ix.INDEX_JSON).write_text(json.dumps(meta))

        return change

    cases = {
        "garbage npz": lambda f: (f / ix.INDEX_NPZ).write_bytes(b"not a zip file at all"),
        "truncated npz": lambda f: (f / ix.INDEX_NPZ).write_bytes((f / ix.INDEX_NPZ).read_bytes()[:200]),
        "garbage json": lambda f: (f / ix.INDEX_JSON).write_text("{oops"),
        "missing npz": lambda f: (f / ix.INDEX_NPZ).unlink(),
        "wrong version": set_meta("version", ix.VERSION + 1),
        "wrong format": set_meta("format", "something-else"),
        "mismatched top_k": set_meta("top_k", 7),
        "wrong shape": set_array("top_values", index.arrays["top_values"][:, :3]),
        "wrong dtype": set_array("hist_counts", index.arrays["hist_counts"].astype(np.float32)),
        "counts off": set_array("hist_counts", index.arrays["hist_counts"] + 1),
        "outside a document": set_array("top_pos", index.arrays["top_pos"] + 100),
        "pickled object": set_array("mean", np.array([object()] * index.n_units, dtype=object)),
        "missing array": lambda f: np.savez(
            f / ix.INDEX_NPZ, **{k: v for k, v in index.arrays.items() if k != "quantiles"}
        ),
    }
    for label, change in cases.items():
        with pytest.raises(ValueError):
            ix.load_index(broken(change))
        assert issubclass(ix.IndexFormatError, ValueError), label
    with pytest.raises(ValueError):
        ix.load_index(tmp_path / "nothing here")


def test_cli_builds_an_index(tmp_path, capsys):
    from gptviz.__main__ import main
    from gptviz.model.weights import save_checkpoint

    model = build(vocab_size=50257, d_model=16, d_ff=32)
    save_checkpoint(model, tmp_path / "ckpt")
    corpus = tmp_path / "plays"
    corpus.mkdir()
    (corpus / "one.txt").write_text("To be, or not to be: that is the question.\n" * 3)
    (corpus / "two.txt").write_text("Friends, Romans, countrymen, lend me your ears.\n")
    assert (
        main(["index", str(tmp_path / "ckpt"), "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--batch", "2"])
        == 0
    )
    err = capsys.readouterr().err
    assert "tokens (100%)" in err
    index = ix.load_index(tmp_path / "out")
    assert [d["name"] for d in index.documents] == ["one", "two"] and index.meta["scan"]["peak_rss_mb"] > 0
    assert ix.index_matches(index, model)


@pytest.mark.slow
def test_shipped_index_of_shakespeare_pre_recaptures():
    from gptviz import load_pretrained

    index = ix.bundled_index("shakespeare-pre")
    assert index is not None, "gptviz/bundled/shakespeare-pre/index is missing"
    model = load_pretrained("shakespeare-pre")
    assert ix.index_matches(index, model)
    assert index.meta["corpus"]["tokens"] > 1_400_000 and index.meta["windows"]["n_ctx"] == model.config.n_ctx
    held = [d["name"] for d in index.documents if d["held_out"]]
    assert sorted(held) == ["julius_caesar", "macbeth", "twelfth_night"]
    docs = ix.index_documents(index)
    for unit in ("L2N100", "L3H1"):
        ex = ix.top_examples(index, unit, 1)[0]
        ctx = ix.example_context(index, docs, ex.doc, ex.pos, model=model, unit=unit)
        assert ctx.values[ctx.peak] == pytest.approx(ex.value, rel=1e-4, abs=1e-5)
        for band in ix.band_examples(index, unit):  # the weakest example of each band, recaptured too
            ex = band.examples[-1]
            ctx = ix.example_context(index, docs, ex.doc, ex.pos, model=model, unit=unit)
            assert band.lo <= ctx.values[ctx.peak] <= band.hi * (1 + 1e-5)
            assert ctx.values[ctx.peak] == pytest.approx(ex.value, rel=1e-4, abs=1e-5)
    assert ix.summary(index, "L0N0").startswith("L0N0: active on")


def test_block_binner_counts_equal_the_sign_exact_rule():
    """The scan's per-block histogram (token-major values) equals _bin_of's rule on the same values, for narrow bins
    and for bins wider than 1 (where v * (1 / width) can round a tiny v > 0 to 0), with -0.0, values within rounding
    of 0 and values far outside the range; and the bins above the 0 edge hold exactly the values > 0."""
    from gptviz.index.histograms import _bin_of, _Binner

    g = torch.Generator().manual_seed(0)
    U, n, bins = 40, 501, 16
    values = torch.nn.functional.gelu(torch.randn(n, U, generator=g) * 3)
    values[::7], values[1], values[2], values[3], values[4] = -0.0, 1e-30, -1e-30, 1e9, -1e9
    span = torch.rand(U, generator=g, dtype=torch.float64) * 10 + 0.5
    span[:10] *= 1e-3  # narrow: 1 / width well above 1
    span[10:20] *= 100  # wide: 1 / width below 1, the fix-up's case
    width = span / bins
    zero_bin = torch.full((U,), bins // 4, dtype=torch.float64)
    hist_range = torch.stack([-zero_bin * width, (bins - zero_bin) * width], 1).float().numpy()
    binner = _Binner(hist_range, zero_bin.long().numpy(), bins)
    assert int(binner.small.sum()) == 10
    counts = torch.cat([binner.counts(values[:, :25], slice(0, 25)), binner.counts(values[:, 25:], slice(25, U))])
    inv_width = binner.inv_width[:, None]
    by_rule = _bin_of(values.t().contiguous(), inv_width, zero_bin.float()[:, None], bins)
    expected = torch.stack([torch.bincount(row, minlength=bins) for row in by_rule])
    assert torch.equal(counts, expected)
    above = torch.arange(bins)[None] >= zero_bin.long()[:, None]
    assert torch.equal((counts * above).sum(1), (values > 0).sum(0))


def test_head_write_norms_equal_the_norm_of_each_heads_write():
    """A head's score is the norm of what it writes into the residual stream, z_h W_O^h, computed here by hand."""
    g = torch.Generator().manual_seed(1)
    # batches of windows, one window, one position; a model narrower than a head (C < d_head: R is C x d_head)
    for shape, d_head, C in [((2, 7, 3), 5, 11), ((1, 4, 12), 64, 768), ((5, 2), 8, 6), ((3,), 4, 9)]:
        z = torch.randn(*shape, d_head, generator=g)
        weight = torch.randn(C, shape[-1] * d_head, generator=g) * 0.05  # c_proj's [out, in]
        silent = (0,) * (len(shape) - 1)  # a position (none in the last case, one position's heads)
        if silent:
            z[silent] = 0.0  # a silent position: exactly 0
        by_hand = torch.stack(
            [(z[..., h, :] @ weight[:, h * d_head : (h + 1) * d_head].t()).norm(dim=-1) for h in range(shape[-1])], -1
        )
        got = ix.head_write_norms(z, weight)
        assert got.shape == by_hand.shape and (not silent or torch.equal(got[silent], torch.zeros(shape[-1])))
        torch.testing.assert_close(got, by_hand, rtol=3e-6, atol=1e-7)
    # z as a view of heads-first memory ((B, nh, T, hs) transposed, as the explicit attention path hands it over):
    # the same norms as from its row-major copy
    heads_first = torch.randn(2, 3, 7, 5, generator=g)
    weight = torch.randn(11, 15, generator=g)
    strided = heads_first.transpose(1, 2)
    assert not strided.is_contiguous()
    assert torch.equal(ix.head_write_norms(strided, weight), ix.head_write_norms(strided.contiguous(), weight))


def test_a_scans_forward_pass_ends_after_the_last_activation_it_reads():
    """forward_through_units runs the edits of every layer up to the last layer's MLP activation, with the values a
    full pass gives them, then stops: that layer's MLP output, the final norm and the LM head never run."""
    from benchmarks.forward_passes import forward_count
    from gptviz.index.forward import forward_through_units

    for norm in ("pre", "post"):
        model = build(norm=norm)
        L = model.config.n_layers
        ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
        seen = {}

        def record(name, seen=seen):
            def edit(x, _offset):
                seen[name] = x.clone()
                return x

            return edit

        names = [act_name("z", layer) for layer in range(L)] + [act_name("post", layer) for layer in range(L)]
        names += [act_name("mlp_out", L - 1), act_name("resid_post", L - 1)]
        before = forward_count()
        forward_through_units(model, ids, {name: (record(name),) for name in names})
        assert forward_count() == before + 1
        assert set(seen) == set(names[: 2 * L])  # the last layer's MLP output and residual were never made
        _, cache = capture(model, ids, names[: 2 * L])
        for name in names[: 2 * L]:
            assert torch.equal(seen[name], cache[name]), name


def test_the_running_top_k_equals_one_sort_of_every_value_ties_included():
    """top_k.keep_top over many batches (units that fill their K entries take the candidates' path, the others a
    top-k) against one sort of all values by (value descending, location ascending): dead units (all zeros), units
    with ties at their K-th value, and ordinary ones."""
    import types

    from gptviz.index.top_k import keep_top

    g = torch.Generator().manual_seed(0)
    K, units, batches, rows = 5, 7, 9, 13
    values = torch.randn(batches * rows, units, generator=g)
    values[:, 0] = 0.0  # a dead unit: every value ties
    values[:, 1] = torch.randint(0, 3, (batches * rows,), generator=g).float()  # three values, many ties
    values[::4, 2] = 5.0  # a tie at the top, every 4th row
    part = types.SimpleNamespace(
        best_v=torch.full((units + 3, K), -math.inf), best_loc=torch.full((units + 3, K), -1, dtype=torch.long)
    )
    first = 3  # the block's first unit is not unit 0
    for b in range(batches):
        block = values[b * rows : (b + 1) * rows]
        loc = torch.arange(b * rows, (b + 1) * rows) + 1000
        keep_top(part, first, block, block.amax(0), loc, K)
    for u in range(units):
        expected = sorted(((-float(v), 1000 + i) for i, v in enumerate(values[:, u])))[:K]
        assert part.best_v[first + u].tolist() == [-v for v, _ in expected], u
        assert part.best_loc[first + u].tolist() == [i for _, i in expected], u


@pytest.mark.parametrize("in_order", [True, False])
def test_the_running_top_k_takes_both_merges_and_equals_one_sort(monkeypatch, in_order):
    """merge_candidates orders a block's candidates as one padded row per unit, in one matrix when the units' rows
    are of about the same width (the usual case) or in groups of about equal width (a unit with many, such as a dead
    unit's tied zeros while it fills). Both run here, and the top K equals one sort of every value by (value
    descending, location ascending), with the batches in corpus order (a value tied with a unit's K-th cannot enter:
    the threshold is one float above it) and reversed (each block comes before the entries held, so ties do
    enter)."""
    import types

    from gptviz.index import top_k

    groups_per_merge = []
    merge, rows = top_k.merge_candidates, top_k.merge_rows

    def counted_merge(*args):
        groups_per_merge.append(0)
        return merge(*args)

    def counted_rows(*args):
        groups_per_merge[-1] += 1
        return rows(*args)

    monkeypatch.setattr(top_k, "merge_candidates", counted_merge)
    monkeypatch.setattr(top_k, "merge_rows", counted_rows)
    g = torch.Generator().manual_seed(1)
    K, units, batches, n = 5, 40, 12, 64
    values = torch.randn(batches * n, units, generator=g)
    values[:, 0] = 0.0  # dead: every value ties
    values[:, 1] = torch.randint(0, 4, (batches * n,), generator=g).float()  # four values, many ties
    values[5 * n :, 2] += 3.0  # late risers: many late candidates
    part = types.SimpleNamespace(
        best_v=torch.full((units, K), -math.inf), best_loc=torch.full((units, K), -1, dtype=torch.long)
    )
    for b in range(batches) if in_order else reversed(range(batches)):
        block = values[b * n : (b + 1) * n]
        top_k.keep_top(part, 0, block, block.amax(0), torch.arange(b * n, (b + 1) * n) * 3 + 7, K)
    # reversed, the dead unit's zeros tie its K-th in every block: it has many candidates, the others few
    assert max(groups_per_merge) >= 2 and (1 in groups_per_merge or not in_order), groups_per_merge
    for u in range(units):
        expected = sorted((-float(v), i * 3 + 7) for i, v in enumerate(values[:, u]))[:K]
        assert part.best_v[u].tolist() == [-v for v, _ in expected], u
        assert part.best_loc[u].tolist() == [i for _, i in expected], u


def test_the_kth_lower_bound_is_at_most_each_columns_kth_largest():
    """keep_top's threshold while a unit fills: at most the column's K-th largest value (so no value that can enter
    the top K is left out), equal to it when the top K fall in different groups of rows, and -inf below K rows; for
    row counts that 4K groups divide and that they do not, with ties and a dead column."""
    from gptviz.index.top_k import kth_lower_bound

    g = torch.Generator().manual_seed(3)
    K = 5
    for n in (3, 5, 19, 20, 23, 200, 1001):
        values = torch.randn(n, 6, generator=g)
        values[:, 0] = 0.0  # dead: every value ties
        values[:, 1] = torch.randint(0, 3, (n,), generator=g).float()  # many ties
        bound = kth_lower_bound(values, K)
        if n < K:
            assert torch.isinf(bound).all() and (bound < 0).all()
            continue
        kth = values.topk(K, dim=0).values[-1]
        assert (bound <= kth).all(), (n, bound, kth)
        assert (values >= bound).sum(0).ge(K).all()
    spread = torch.zeros(200, 1)
    spread[::10, 0] = torch.arange(20, 0, -1).float()  # the top values one to a group of rows: the bound is exact
    assert kth_lower_bound(spread, K).item() == 16.0
