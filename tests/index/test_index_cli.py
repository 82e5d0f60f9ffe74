"""`python -m gptviz index` against what a corpus or a command line can throw at it: texts read a bounded piece at a
time with the whole text's tokens, --max-tokens on every source, links and special files in a corpus folder, JSON
nested past the recursion limit, merges into folders they must not touch, and one metadata from every path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from gptviz import index as ix
from gptviz.index import texts
from gptviz.model.tokenizer import get_tokenizer
from tests.support import ROOT
from tests.support.index_reference import SPACES
from tests.support.models import build

TEXTS = {
    "paragraphs": "ROMEO:\nBut soft, what light?\n\nJULIET:\nAy me!\n\n\nNurse:\n  Anon!  \n" * 9,
    "crlf": "First line.\r\nSecond, with\r\n\r\na blank line before it.\r\nA lone\rreturn.\r\n" * 7,
    "spaces": "a  b   c    d\t\te \n  \n    x" * 11 + "     ",
    "multi-byte": "Café naïve — ünïcödé 中文字符 ok. 🙂🙃 emoji, ĀĒĪŌŪ; Ελληνικά κείμενο.\n" * 8,
    "no spaces": "abc123,def;'s'll'VE\"x\"(y)[z]{w}99bottles-of-beer.on.the.wall!" * 9,
    "contractions": "it's we'll they've I'm you'd don't 'tis o'er ma'am\n" * 9,
}


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 16, 64])
@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_a_text_read_in_pieces_has_the_whole_texts_tokens(tmp_path, monkeypatch, kind, chunk):
    """Read CHUNK_CHARS characters at a time and cut where no token changes: the ids equal tiktoken's over the
    whole text (as Path.read_text gives it: \\r\\n and \\r as \\n), whatever the chunk size, multi-byte characters
    and runs of newlines and spaces across the borders included."""
    monkeypatch.setattr(texts, "CHUNK_CHARS", chunk)
    path = tmp_path / f"{kind}.txt"
    path.write_bytes(TEXTS[kind].encode("utf-8"))
    docs = ix.tokenize_corpus(path, tmp_path / "ids")
    whole = get_tokenizer().encode_ordinary(path.read_text(encoding="utf-8"))
    assert [list(map(int, d.ids)) for d in docs] == [whole]


def test_random_texts_cut_into_pieces_keep_their_tokens(monkeypatch):
    """Texts drawn from what the cut rules turn on (spaces and newlines of every kind, ' and contractions, letters,
    digits and punctuation, combining marks, characters Python and Unicode disagree are spaces): the pieces' ids are
    the whole text's. 20,000 texts x chunks of 1-3 characters passed once; the test runs 600."""
    import random

    alphabet = (
        list('aZé中1٣½.,;!?"-_()[]{}m') + SPACES + ["\u00a0", "\u3000", "\u0301", "🙂", "'", "'s", "'ll", "ǅ", "Ⅻ"]
    )
    enc, rng = get_tokenizer(), random.Random(0)
    for _ in range(600):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        monkeypatch.setattr(texts, "CHUNK_CHARS", rng.randint(1, 3))
        got = [i for piece in texts.pieces(texts._string_chunks(text)) for i in enc.encode_ordinary(piece)]
        assert got == enc.encode_ordinary(text), repr(text)


def test_the_cut_rules_are_proven_for_the_tokenizers_own_pattern():
    assert get_tokenizer()._pat_str == texts.PRE_TOKENIZER


def test_a_run_with_no_safe_cut_is_still_read_in_bounded_pieces(monkeypatch):
    monkeypatch.setattr(texts, "CHUNK_CHARS", 10)
    monkeypatch.setattr(texts, "LONGEST_RUN", 30)
    run = "x" * 95  # one word: no cut keeps its tokens, so it is cut anyway, at most LONGEST_RUN + a chunk a piece
    got = list(texts.pieces(texts._string_chunks(run + " tail")))
    assert "".join(got) == run + " tail" and max(map(len, got)) <= 40


def test_a_json_line_longer_than_the_bound_is_refused_by_its_number(tmp_path, monkeypatch):
    monkeypatch.setattr(texts, "MAX_LINE_CHARS", 60)
    at_bound = json.dumps({"text": "x" * 48})  # 60 characters, then its newline
    assert len(at_bound) == 60
    (tmp_path / "rows.jsonl").write_text(f'{{"text": "short"}}\n{at_bound}\n{json.dumps({"text": "y" * 49})}\n')
    with pytest.raises(ValueError, match="line 3 of 'rows.jsonl' is longer than 60 characters"):
        ix.tokenize_corpus(tmp_path / "rows.jsonl", tmp_path / "ids")
    assert len(ix.tokenize_corpus(tmp_path / "rows.jsonl", tmp_path / "ids", limit_tokens=2)) == 2  # not read that far


READ_CHILD = textwrap.dedent("""
    import json, resource, sys, pathlib
    from gptviz import index as ix
    from gptviz.model.tokenizer import get_tokenizer
    get_tokenizer().encode_ordinary("warm up")
    vm = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize:"))) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))  # a runaway read fails, not the machine
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    folder = pathlib.Path(sys.argv[1])
    docs = ix.tokenize_corpus(folder / "oneline.txt", folder / "ids", limit_tokens=20000)
    print(json.dumps({"tokens": sum(len(d.ids) for d in docs),
                      "grew_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
""")


@pytest.mark.slow
@pytest.mark.subprocess
def test_max_tokens_reads_a_one_line_file_only_that_far(tmp_path):
    """A 24 MB file of one line, 20,000 tokens asked: tokenizing it whole held the line and its 4.8 million ids (over
    150 MB); read a piece at a time, the read stops after the first piece."""
    words = b"to be or not that is the question whether tis nobler in the mind "
    with open(tmp_path / "oneline.txt", "wb") as f:
        for _ in range(24_000_000 // len(words)):
            f.write(words)
    out = subprocess.run(
        [sys.executable, "-c", READ_CHILD, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["tokens"] == 20000 and run["grew_kb"] < 40 * 1024, run


def test_max_tokens_holds_for_the_bundled_works(tmp_path):
    """Without --corpus the CLI scans the complete works: --max-tokens stops there too (it read all 1.46M)."""
    import argparse

    from gptviz.index.cli import _documents

    args = argparse.Namespace(corpus=None, max_tokens=5000, text_column="text")
    docs, source, corpus = _documents(args, tmp_path)
    assert sum(len(d.ids) for d in docs) == 5000 and source == "shakespeare-works" and corpus == {"max_tokens": 5000}
    from gptviz.training.corpus import play_files, play_name

    plays = play_files()[: len(docs)]
    assert [d.name for d in docs] == [play_name(p) for p in plays]
    for d, play in zip(docs, plays, strict=True):  # the first plays' first ids, the last one cut short
        assert list(d.ids) == get_tokenizer().encode(play.read_text(encoding="utf-8"))[: len(d.ids)]


@pytest.mark.slow
def test_the_index_records_the_tokens_it_read_and_reads_them_back(tmp_path, capsys):
    from gptviz.__main__ import main
    from gptviz.model.weights import save_checkpoint

    save_checkpoint(build(vocab_size=50257, d_model=16, d_ff=32), tmp_path / "ckpt")
    assert (
        main(["index", str(tmp_path / "ckpt"), "--max-tokens", "300", "--batch", "4", "--out", str(tmp_path / "works")])
        == 0
    )
    index = ix.load_index(tmp_path / "works")
    assert index.tokens == 300 and index.meta["corpus"]["max_tokens"] == 300
    assert sum(len(d.ids) for d in ix.index_documents(index)) == 300  # the unit page reads the same 300 again
    (tmp_path / "long.txt").write_text("To be, or not to be, that is the question. " * 200)
    assert (
        main(
            [
                "index",
                str(tmp_path / "ckpt"),
                "--corpus",
                str(tmp_path / "long.txt"),
                "--max-tokens",
                "250",
                "--batch",
                "4",
                "--out",
                str(tmp_path / "long"),
            ]
        )
        == 0
    )
    index = ix.load_index(tmp_path / "long")
    assert index.tokens == 250 and index.meta["corpus"]["max_tokens"] == 250
    assert sum(len(d.ids) for d in ix.index_documents(index)) == 250


@contextmanager
def unblocked_after(fifo: Path, seconds: float = 10):
    """Should a reader open `fifo` (a regression), give it a writer after `seconds`, so that it reads nothing and
    the test fails on what it checks instead of hanging."""

    def open_writer():
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader waiting: nothing to unblock
            pass

    timer = threading.Timer(seconds, open_writer)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def corpus_with_links_and_a_fifo(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("SECRET: what lies outside the corpus folder")
    (outside / "dir" / "more.txt").write_text("SECRET too")
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("To be, or not to be.")
    (folder / "inner.txt").symlink_to("a.txt")  # a link within the folder: read
    (folder / "link.txt").symlink_to(outside / "secret.txt")  # out of the folder: skipped
    (folder / "linkdir").symlink_to(outside / "dir")  # a folder out of it: skipped
    (folder / "null.txt").symlink_to("/dev/null")  # a device, out of the folder too
    (folder / "broken.txt").symlink_to(tmp_path / "nothing")
    os.mkfifo(folder / "pipe.txt")  # would block whoever opens it for reading
    return folder


def test_a_folders_links_out_of_it_and_special_files_are_skipped_and_named(tmp_path):
    folder = corpus_with_links_and_a_fifo(tmp_path)
    skipped = []
    with unblocked_after(folder / "pipe.txt"):
        docs = ix.tokenize_corpus(folder, tmp_path / "ids", on_skip=lambda name, why: skipped.append((name, why)))
    assert [d.name for d in docs] == ["a", "inner"]
    assert "SECRET" not in get_tokenizer().decode([int(i) for d in docs for i in d.ids])
    assert skipped == [
        ("broken.txt", "a broken link"),
        ("link.txt", "a link that leads out of the corpus folder"),
        ("linkdir", "a link that leads out of the corpus folder"),
        ("null.txt", "a link that leads out of the corpus folder"),
        ("pipe.txt", "not a regular file (a FIFO, socket or device)"),
    ]
    with pytest.warns(UserWarning) as caught:  # a library caller without on_skip is told too
        ix.tokenize_corpus(folder, tmp_path / "ids")
    told = [str(w.message) for w in caught if w.category is UserWarning]
    assert told == [f"skipped {name}: {why}" for name, why in skipped]


def test_a_corpus_that_is_a_fifo_or_a_device_is_refused_unread(tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")
    with unblocked_after(tmp_path / "pipe.txt"), pytest.raises(ValueError, match="'pipe.txt' is not a regular file"):
        ix.tokenize_corpus(tmp_path / "pipe.txt", tmp_path / "ids")
    os.mkfifo(tmp_path / "rows.jsonl")
    with unblocked_after(tmp_path / "rows.jsonl"), pytest.raises(ValueError, match="'rows.jsonl' is not a regular"):
        ix.tokenize_corpus(tmp_path / "rows.jsonl", tmp_path / "ids")
    with pytest.raises(ValueError, match="'null' is not a regular file"):
        ix.tokenize_corpus("/dev/null", tmp_path / "ids")


@pytest.mark.slow
def test_the_cli_names_what_it_skipped(tmp_path, capsys):
    from gptviz.__main__ import main
    from gptviz.model.weights import save_checkpoint

    save_checkpoint(build(vocab_size=50257, d_model=16, d_ff=32), tmp_path / "ckpt")
    folder = corpus_with_links_and_a_fifo(tmp_path)
    with unblocked_after(folder / "pipe.txt"):
        assert main(["index", str(tmp_path / "ckpt"), "--corpus", str(folder), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "skipped link.txt: a link that leads out of the corpus folder" in err
    assert "skipped pipe.txt: not a regular file (a FIFO, socket or device)" in err
    assert [d["name"] for d in ix.load_index(tmp_path / "out").documents] == ["a", "inner"]


DEEP = '{"text": "deep", "a": ' + "[" * 100_000 + "]" * 100_000 + "}"


def test_a_json_line_nested_past_the_recursion_limit_is_a_clear_error(tmp_path):
    (tmp_path / "deep.jsonl").write_text('{"text": "fine"}\n' + DEEP + "\n")
    with pytest.raises(ValueError, match="line 2 of 'deep.jsonl' nests too deeply to read"):
        ix.tokenize_corpus(tmp_path / "deep.jsonl", tmp_path / "ids")


def write_partials(tmp_path: Path, shards: int = 2) -> list[Path]:
    """A tiny model's scan in `shards` partial indexes, as `index --shard I/N` writes them."""
    model = build()
    docs = [ix.Document(f"d{i}", np.arange(n) % 50) for i, n in enumerate((40, 25))]
    plan = ix.plan_scan(model, docs, batch=1, top_k=3, bins=8, min_count=2)
    parts = []
    for i in range(shards):
        parts.append(
            ix.save_partial(plan, ix.scan_batches(model, docs, plan, plan.batches(i, shards)), tmp_path / f"part{i}")
        )
    return parts


@pytest.mark.slow
@pytest.mark.subprocess
def test_no_traceback_for_deep_json_or_a_merge_onto_a_file(tmp_path):
    """Each gets one line on stderr and exit status 2, not a RecursionError or FileExistsError traceback."""
    from gptviz.model.weights import save_checkpoint

    save_checkpoint(build(vocab_size=50257, d_model=16, d_ff=32), tmp_path / "ckpt")
    (tmp_path / "deep.jsonl").write_text(DEEP + "\n")
    parts = write_partials(tmp_path)
    (tmp_path / "system-file").write_text("not to be touched\n")  # stands for /etc/hostname
    runs = {
        "deep": [
            "index",
            str(tmp_path / "ckpt"),
            "--corpus",
            str(tmp_path / "deep.jsonl"),
            "--out",
            str(tmp_path / "index"),
        ],
        "merge": ["index", "merge", str(tmp_path / "system-file"), *map(str, parts)],
    }
    for label, args in runs.items():
        out = subprocess.run(
            [sys.executable, "-m", "gptviz", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
        )
        lines = out.stderr.splitlines()
        assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (label, out.stderr[-3000:])
        assert "Traceback" not in out.stderr
    assert (tmp_path / "system-file").read_text() == "not to be touched\n"


def snapshot(folder: Path) -> dict:
    """Every file below `folder`: its bytes and modification time."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_merge_refuses_a_folder_it_did_not_make_and_its_own_shards(tmp_path, capsys):
    from gptviz.__main__ import main

    parts = [str(p) for p in write_partials(tmp_path)]
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    (tmp_path / "file").write_text("a file")
    before = {p: snapshot(tmp_path / p) for p in ("notes", "part0", "part1")}
    refusals = {
        str(notes): "the folder '.*notes' is not empty",
        parts[0]: "output '.*part0' is its input shard '.*part0'",
        str(Path(parts[1]) / "merged"): "output '.*merged' is inside its input shard '.*part1'",
        str(tmp_path / "file"): "'.*file' exists and is not a folder",
    }
    for out, message in refusals.items():
        assert main(["index", "merge", out, *parts]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and re.search(message, err[0]), err
    assert {p: snapshot(tmp_path / p) for p in ("notes", "part0", "part1")} == before  # nothing in them changed
    assert not (Path(parts[1]) / "merged").exists() and (tmp_path / "file").read_text() == "a file"
    # a new path, or an empty folder, takes the merge; nothing temporary is left beside it
    (tmp_path / "empty").mkdir()
    for out in ("new/merged", "empty"):
        assert main(["index", "merge", str(tmp_path / out), *parts]) == 0
        assert sorted(p.name for p in (tmp_path / out).iterdir()) == [ix.INDEX_JSON, ix.INDEX_NPZ]
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_a_merge_that_fails_midway_leaves_nothing(tmp_path, monkeypatch, capsys):
    from gptviz.__main__ import main
    from gptviz.index import store

    parts = [str(p) for p in write_partials(tmp_path)]

    def full_disk(index, folder):  # save_index making the folder and half a file, then out of space
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / ix.INDEX_NPZ).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "save_index", full_disk)
    assert main(["index", "merge", str(tmp_path / "merged"), *parts]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "merged").exists() and not list(tmp_path.glob(".tmp-*"))


@pytest.mark.slow
def test_every_path_records_the_same_metadata(tmp_path, capsys):
    """One process, shards merged, and Ray: the same index metadata, meta.scan's keys and what ran the statistics
    included (Ray's index had meta.scan.statistics empty)."""
    pytest.importorskip("ray")
    from gptviz.__main__ import main
    from gptviz.model.weights import save_checkpoint

    save_checkpoint(build(vocab_size=50257, d_model=16, d_ff=32), tmp_path / "ckpt")
    corpus = tmp_path / "texts.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"text": f"Line {i}: to be, or not to be, that is the question.\n" * 3}) + "\n"
            for i in range(30)
        )
    )
    common = [str(tmp_path / "ckpt"), "--corpus", str(corpus), "--batch", "2", "--max-tokens", "900"]
    assert main(["index", *common, "--out", str(tmp_path / "single")]) == 0
    for i in range(2):
        assert main(["index", *common, "--shard", f"{i}/2", "--out", str(tmp_path / f"part{i}")]) == 0
    assert main(["index", "merge", str(tmp_path / "merged"), str(tmp_path / "part0"), str(tmp_path / "part1")]) == 0
    assert main(["index", *common, "--ray", "--workers", "2", "--out", str(tmp_path / "ray")]) == 0
    capsys.readouterr()
    metas = {path: ix.load_index(tmp_path / path).meta for path in ("single", "merged", "ray")}
    single = metas["single"]
    assert single["corpus"]["tokens"] == 900 and single["scan"]["statistics"] in ("C", "torch")
    for path, meta in metas.items():
        assert {k: v for k, v in meta.items() if k != "scan"} == {k: v for k, v in single.items() if k != "scan"}, path
        assert sorted(meta["scan"]) == sorted(single["scan"]), path
        for key in ("statistics", "device", "dtype", "batch", "threads", "torch"):
            assert meta["scan"][key] == single["scan"][key], (path, key)
        assert meta["scan"]["peak_rss_mb"] > 0 and meta["scan"]["task_seconds"] > 0, path
    assert (single["scan"]["shards"], metas["merged"]["scan"]["shards"]) == (1, 2)
    assert (single["scan"]["workers"], metas["merged"]["scan"]["workers"], metas["ray"]["scan"]["workers"]) == (1, 2, 2)
