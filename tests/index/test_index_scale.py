"""The neuron index past one process and the bundled corpus: shards that merge exactly, the CLI's shards and merge,
your own corpus (text, folder, Parquet, JSON lines), Ray, and a scan's memory when the corpus grows tenfold."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from gptviz import index as ix
from gptviz.model.tokenizer import get_tokenizer
from tests.support import ROOT
from tests.support.models import build

EXACT = (
    "top_values",
    "top_doc",
    "top_pos",
    "hist_counts",
    "hist_range",
    "min_max",
    "value_range",
    "active_share",
    "quantiles",
    "token_ids",
    "token_counts",
)


@pytest.fixture(scope="module")
def corpus():
    model = build(seed=2)
    g = torch.Generator().manual_seed(11)
    docs = [
        ix.Document(f"d{i}", torch.randint(0, 30, (n,), generator=g).numpy()) for i, n in enumerate((90, 16, 5, 61, 40))
    ]
    single = ix.build_index(model, docs, batch=2, top_k=6, bins=24, min_count=4)
    return model, docs, single


def assert_same_index(a: ix.NeuronIndex, b: ix.NeuronIndex) -> None:
    """Equal where the merge is exact; float sums (means, standard deviations, per-token means) up to rounding."""
    assert sorted(a.arrays) == sorted(b.arrays)
    for name in EXACT:
        assert np.array_equal(a.arrays[name], b.arrays[name], equal_nan=True), name
    for name in set(a.arrays) - set(EXACT):
        if a.arrays[name].dtype.kind == "f":
            np.testing.assert_allclose(a.arrays[name], b.arrays[name], rtol=1e-4, atol=1e-5, err_msg=name)
        else:  # rankings by float means: equal unless two means tie within rounding
            assert (a.arrays[name] == b.arrays[name]).mean() > 0.99, name
    assert {k: v for k, v in a.meta.items() if k != "scan"} == {k: v for k, v in b.meta.items() if k != "scan"}


@pytest.mark.parametrize("shards", [2, 3])
def test_shards_merge_to_the_single_pass(corpus, shards):
    model, docs, single = corpus
    plan = ix.plan_scan(model, docs, batch=2, top_k=6, bins=24, min_count=4)
    assert plan.n_batches > shards  # each shard has work
    parts = [ix.scan_batches(model, docs, plan, plan.batches(i, shards)) for i in range(shards)]
    assert sum(p.tokens for p in parts) == single.tokens
    assert_same_index(ix.finish_scan(plan, ix.merge_scans(parts)), single)
    # merged in another grouping and order: the same
    regrouped = ix.merge_scans([parts[-1], ix.merge_scans(parts[:-1])])
    assert_same_index(ix.finish_scan(plan, regrouped), single)


def test_merge_refuses_overlap_gaps_and_other_plans(corpus, tmp_path):
    model, docs, _ = corpus
    plan = ix.plan_scan(model, docs, batch=2, top_k=6, bins=24, min_count=4)
    a, b = (ix.scan_batches(model, docs, plan, plan.batches(i, 2)) for i in range(2))
    with pytest.raises(ValueError, match="overlap"):
        ix.merge_scans([a, a])
    with pytest.raises(ValueError, match="cover"):
        ix.finish_scan(plan, a)  # half the batches
    other = ix.plan_scan(model, docs[:3], batch=2, top_k=6, bins=24, min_count=4)
    with pytest.raises(ValueError, match="different plans"):
        ix.merge_scans([a, ix.scan_batches(model, docs[:3], other, other.batches(1, 2))])
    # on disk and back: the same partial scan; an edited one is refused
    ix.save_partial(plan, b, tmp_path / "b")
    plan2, b2 = ix.load_partial(tmp_path / "b")
    assert plan2.key == plan.key and b2.batches == b.batches
    assert_same_index(ix.finish_scan(plan2, ix.merge_scans([a, b2])), ix.finish_scan(plan, ix.merge_scans([a, b])))
    with np.load(tmp_path / "b" / "partial.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["plan_hist_range"] = arrays["plan_hist_range"] * 2
    np.savez(tmp_path / "b" / "partial.npz", **arrays)
    with pytest.raises(ix.IndexFormatError, match="does not match its own plan"):
        ix.load_partial(tmp_path / "b")
    with pytest.raises(ix.IndexFormatError):
        ix.load_partial(tmp_path / "nothing")


@pytest.mark.slow
def test_cli_shards_and_merge_equal_the_single_pass(tmp_path, capsys):
    from gptviz.__main__ import main
    from gptviz.model.weights import save_checkpoint

    save_checkpoint(build(vocab_size=50257, d_model=16, d_ff=32), tmp_path / "ckpt")
    corpus = tmp_path / "texts.jsonl"
    lines = [
        {"text": f"Line {i}: to be, or not to be, that is the question {i % 7}.\n" * (1 + i % 5)} for i in range(40)
    ]
    corpus.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    common = [str(tmp_path / "ckpt"), "--corpus", str(corpus), "--batch", "2"]
    assert main(["index", *common, "--out", str(tmp_path / "single")]) == 0
    for i in range(3):
        assert main(["index", *common, "--shard", f"{i}/3", "--out", str(tmp_path / f"part{i}")]) == 0
    assert "tokens (100%)" in capsys.readouterr().err  # each shard's progress line
    assert main(["index", "merge", str(tmp_path / "merged"), *(str(tmp_path / f"part{i}") for i in range(3))]) == 0
    single, merged = ix.load_index(tmp_path / "single"), ix.load_index(tmp_path / "merged")
    assert_same_index(merged, single)
    assert single.meta["corpus"]["path"] == str(corpus.resolve()) and len(single.documents) == 40
    # the unit page reads the documents again from the corpus the index records
    docs = ix.index_documents(single)
    assert [d.name for d in docs] == [f"line{i + 1}" for i in range(40)]
    assert main(["index", *common, "--shard", "3/3"]) == 2  # a clear error, no traceback
    assert "0 <= I < N" in capsys.readouterr().err
    assert main(["index", *common, "--max-tokens", "-5"]) == 2  # not "the corpus holds no text"
    assert "--max-tokens must be at least 1, got -5" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("")
    assert main(["index", str(tmp_path / "ckpt"), "--corpus", str(tmp_path / "empty.txt")]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: the corpus holds no text"]


def test_your_corpus_in_every_format_gives_the_same_documents(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    texts = ["ROMEO:\nBut soft, what light through yonder window breaks?\n", "  \n", "JULIET:\nAy me!\n" * 30]
    enc = get_tokenizer()
    expected = [("a", enc.encode_ordinary(texts[0])), ("c", enc.encode_ordinary(texts[2]))]  # the blank one adds none
    (tmp_path / "folder" / "sub").mkdir(parents=True)
    for name, text in zip("abc", texts, strict=True):
        (tmp_path / "folder" / ("sub" if name == "c" else "") / f"{name}.txt").write_text(text)
    (tmp_path / "folder" / "notes.bin").write_bytes(b"\x00\x01")  # not text: skipped
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    pq.write_table(pa.table({"body": texts}), tmp_path / "rows.parquet")
    (tmp_path / "one.txt").write_text("".join(texts))

    def read(path, **kw):
        docs = ix.tokenize_corpus(path, tmp_path / "store.ids", **kw)
        return [(d.name, list(map(int, d.ids))) for d in docs]

    assert [ids for _, ids in read(tmp_path / "folder")] == [ids for _, ids in expected]
    assert [n for n, _ in read(tmp_path / "folder")] == ["a", "sub/c"]
    assert [ids for _, ids in read(tmp_path / "rows.jsonl")] == [ids for _, ids in expected]
    assert [ids for _, ids in read(tmp_path / "rows.parquet", text_column="body")] == [ids for _, ids in expected]
    # a long text is tokenized in pieces, cut only where the pieces' tokens are the whole text's
    from gptviz.index import texts as texts_module

    monkeypatch.setattr(texts_module, "CHUNK_CHARS", 40)
    assert read(tmp_path / "one.txt") == [("one", enc.encode_ordinary("".join(texts)))]
    assert read(tmp_path / "rows.jsonl", limit_tokens=5) == [("line1", expected[0][1][:5])]
    with pytest.raises(ValueError, match="no column 'text'"):
        read(tmp_path / "rows.parquet")
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2"):
        read(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="no corpus"):
        read(tmp_path / "missing")
    # a binary file is refused by name, alone or as a folder's .txt, not indexed as replacement characters
    (tmp_path / "archive.gz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)))
    with pytest.raises(ValueError, match="'archive.gz' is not a UTF-8 text file"):
        read(tmp_path / "archive.gz")
    (tmp_path / "folder" / "sub" / "utf16.txt").write_text("JULIET: Ay me!", encoding="utf-16")
    with pytest.raises(ValueError, match="'sub/utf16.txt' is not a UTF-8 text file"):
        read(tmp_path / "folder")


def test_the_help_text_gives_the_default_batch():
    from gptviz import PRESETS
    from gptviz.__main__ import build_parser
    from gptviz.model.weights import load_pretrained

    index_parser = build_parser()._subparsers._group_actions[0].choices["index"]
    batch_help = next(a.help for a in index_parser._actions if "--batch" in a.option_strings)
    assert f"{ix.default_batch(load_pretrained('shakespeare-pre').config)} windows for the bundled models" in batch_help
    assert f"{ix.default_batch(PRESETS['gpt2-small'])} for gpt2-small" in batch_help


@pytest.mark.slow
def test_ray_with_two_workers_equals_the_single_pass(corpus, tmp_path):
    pytest.importorskip("ray")
    from gptviz.index.distributed import scan_on_ray
    from gptviz.model.weights import save_checkpoint

    model, docs, single = corpus
    save_checkpoint(model, tmp_path / "ckpt")  # the tasks load the model where they run
    plan = ix.plan_scan(model, docs, batch=2, top_k=6, bins=24, min_count=4)
    seen = []
    index = scan_on_ray(str(tmp_path / "ckpt"), docs, plan, workers=2, progress=lambda done, total: seen.append(done))
    assert_same_index(index, single)
    assert index.meta["scan"]["shards"] == min(plan.n_batches, 8) and seen[-1] == single.tokens
    assert index.meta["scan"]["statistics"] == single.meta["scan"]["statistics"] != ""  # the tasks' own, kept


SCAN_CHILD = textwrap.dedent("""
    import json, resource, sys, tempfile, pathlib
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a runaway scan fails here, not the machine
    import torch
    torch.set_num_threads(1)
    from gptviz import GPT, GPTConfig
    from gptviz import index as ix
    copies = int(sys.argv[1])
    model = GPT(GPTConfig(vocab_size=50257, n_ctx=128, d_model=16, n_layers=1, n_heads=2, d_ff=32)).eval()
    folder = pathlib.Path(tempfile.mkdtemp())
    line = json.dumps({"text": "To be, or not to be, that is the question: whether 'tis nobler in the mind. " * 40})
    (folder / "c.jsonl").write_text((line + "\\n") * (340 * copies))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    docs = ix.tokenize_corpus(folder / "c.jsonl", folder / "ids")
    index = ix.build_index(model, docs, batch=32)  # one batch size for both corpora
    print(json.dumps({"tokens": index.tokens, "grew_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
""")


@pytest.mark.slow
def test_a_scans_memory_stays_flat_when_the_corpus_grows_tenfold():
    runs = {}
    for copies in (1, 10):
        out = subprocess.run(
            [sys.executable, "-c", SCAN_CHILD, str(copies)], capture_output=True, text=True, cwd=ROOT, timeout=600
        )
        assert out.returncode == 0, out.stderr[-2000:]
        runs[copies] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs[10]["tokens"] == 10 * runs[1]["tokens"] > 2_500_000
    # the tenfold corpus's ids held in memory as int64 would add 8 bytes a token (about 21 MB more); a memory map
    # of the int32 ids, 4 bytes a token once read. Streamed from the file, the scan's peak moves by the noise of a
    # few MB between runs.
    extra_tokens = runs[10]["tokens"] - runs[1]["tokens"]
    grew = (runs[10]["grew_kb"] - runs[1]["grew_kb"]) * 1024
    assert grew < min(8 << 20, 4 * extra_tokens / 2), runs


def test_ranked_tokens_are_capped_at_the_most_frequent(corpus, monkeypatch):
    from gptviz.index import plan

    model, docs, single = corpus
    counts = np.bincount(np.concatenate([d.ids for d in docs]))
    frequent = np.flatnonzero(counts >= 4)
    assert len(frequent) > 5
    monkeypatch.setattr(plan, "MAX_RANKED_TOKENS", 5)
    capped = ix.build_index(model, docs, batch=2, top_k=6, bins=24, min_count=4)
    kept = capped.arrays["token_ids"]
    assert len(kept) == 5 and list(kept) == sorted(kept)
    assert counts[kept].min() >= np.sort(counts[frequent])[-5]  # none rarer than a token left out
    for name in ("top_values", "hist_counts", "active_share"):  # the rest of the index is untouched
        assert np.array_equal(capped.arrays[name], single.arrays[name], equal_nan=True)
