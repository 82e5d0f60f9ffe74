"""The neuron index of a model with its own tokenizer (a Hugging Face GPT-1 folder: lower case, "</w>" word ends):
the corpus is cut into pieces only where GPT-1's BPE provably splits (before whitespace), so its ids are transformers'
OpenAIGPTTokenizer's of the whole text; the scan's top examples are a brute-force scan's on those ids; the index
records its tokenizer and a reader refuses one over another tokenizer's ids; the unit page, the export and the
notebook show GPT-1's tokens."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from gptviz import index as ix
from gptviz import load_pretrained, tokenizer_for
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.index import texts
from gptviz.index.tokens import GPT1_CUT, tokenizer_fingerprint
from gptviz.serve import model_access
from gptviz.serve.limits import ServerLimits
from tests.support.gpt1 import gpt1_folder
from tests.support.index_reference import SPACES, assert_top_k_sorted, brute_force

pytestmark = [pytest.mark.hf]

# lines, blank lines, tabs, capitals, punctuation, accents (composed and combining), a final sigma, CJK, a control
# character, words the tiny BPE splits, a character it lacks, and letters beside digits (one word to GPT-1, two to
# GPT-2's cut rule)
PLAYS = {
    "romeo": "ROMEO:\nBut soft, what light through yonder window breaks?\n\nIt is the east, and Juliet is the sun.\n"
    "\tArise, fair sun, and kill the envious moon! Café naïve résumé -- e-mail: a@b.c\n" * 5,
    "hamlet": "HAMLET:\r\nTo be, or not to be: that is the question.\r\n"
    "ΟΔΥΣΣΕΥΣ ΚΑΙ ΠΗΝΕΛΟΠΗ 你好 world!\x07 "
    "It's 3.14 starlight, Thou.\n" * 4,
    "lear": "  Blow, winds, and crack your cheeks!  Rage, blow!\n\n\n   e\u0301te\u0301 r2d2 starlight3 b4\n",
}


@pytest.fixture(scope="module")
def gpt1(tmp_path_factory):
    return gpt1_folder(tmp_path_factory.mktemp("gpt1ix") / "openai-gpt")


@pytest.fixture(scope="module")
def model(gpt1):
    return load_pretrained(str(gpt1.folder)).eval()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plays")
    for name, text in PLAYS.items():
        (folder / f"{name}.txt").write_bytes(text.encode("utf-8"))
    return folder


def hf_ids(gpt1, text: str) -> list[int]:
    return gpt1.tok.encode(text, add_special_tokens=False)


def whole_ids(gpt1, corpus) -> list[list[int]]:
    """transformers' ids of each file's whole text (as Path.read_text gives it), in the corpus's order."""
    return [hf_ids(gpt1, p.read_text(encoding="utf-8")) for p in sorted(corpus.glob("*.txt"))]


def test_random_texts_cut_where_gpt1_splits_keep_transformers_tokens(gpt1, monkeypatch):
    """Texts drawn from what GPT-1's normaliser and pre-tokenizer turn on (every kind of space, control characters,
    combining marks, capitals and a final sigma, CJK, punctuation), read 1-3 characters at a time: the pieces' ids
    are transformers' ids of the whole text. 600 texts."""
    enc = tokenizer_for(load_pretrained(str(gpt1.folder)))
    assert enc.name == "openai-gpt"
    alphabet = (
        list("aZé中1.,;!?\"-_()'sΣΑ") + SPACES + ["\x07", "\u00a0", "\u3000", "\u0301", "\u200b", "light", "the", "🙂"]
    )
    rng = random.Random(0)
    for _ in range(600):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        monkeypatch.setattr(texts, "CHUNK_CHARS", rng.randint(1, 3))
        got = [i for piece in texts.pieces(texts._string_chunks(text), GPT1_CUT) for i in enc.encode(piece)]
        assert got == hf_ids(gpt1, text), repr(text)


def test_gpt2s_cuts_would_change_gpt1s_tokens(gpt1):
    """The control: GPT-2's rule cuts between a letter and a digit, inside what GPT-1 reads as one word (its last
    piece ends in "</w>"), so GPT-1 needs a rule of its own."""
    enc = tokenizer_for(load_pretrained(str(gpt1.folder)))
    text = "starlight3"
    cut = texts._last_cut(text)  # GPT-2's rule cuts before the digit
    assert cut and enc.encode(text[:cut]) + enc.encode(text[cut:]) != hf_ids(gpt1, text)
    assert texts._last_cut(text, GPT1_CUT) == 0  # GPT-1's: no whitespace, no cut


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_the_corpus_is_tokenized_as_transformers_tokenizes_each_whole_text(
    gpt1, model, corpus, tmp_path, monkeypatch, chunk
):
    monkeypatch.setattr(texts, "CHUNK_CHARS", chunk)
    docs = ix.tokenize_corpus(corpus, tmp_path / "ids", enc=tokenizer_for(model))
    assert [list(map(int, d.ids)) for d in docs] == whole_ids(gpt1, corpus)
    limited = ix.tokenize_corpus(corpus, tmp_path / "ids2", enc=tokenizer_for(model), limit_tokens=150)
    flat = [i for ids in whole_ids(gpt1, corpus) for i in ids][:150]
    assert [i for d in limited for i in map(int, d.ids)] == flat  # --max-tokens holds the same way


@pytest.fixture(scope="module")
def built(gpt1, model, corpus, tmp_path_factory):
    docs = ix.tokenize_corpus(corpus, tmp_path_factory.mktemp("ids") / "ids", enc=tokenizer_for(model))
    index = ix.build_index(
        model,
        docs,
        model_name="tiny-gpt1",
        source=corpus.name,
        batch=2,
        top_k=5,
        bins=16,
        min_count=2,
        corpus={"path": str(corpus), "text_column": "text"},
    )
    return docs, index


def test_the_scan_of_gpt1_ids_equals_brute_force(model, built):
    docs, index = built
    values = brute_force(model, docs, index.meta["windows"]["stride"])
    lengths = [len(d.ids) for d in docs]
    assert values.shape == (sum(lengths), index.n_units) and max(lengths) > model.config.n_ctx  # several windows
    # float32 at unit scale, batched against one window at a time: rounding up to ~2e-5 of the value
    assert_top_k_sorted(index, values, lengths, rtol=1e-4, atol=1e-5)


def test_the_index_records_its_tokenizer_and_reads_its_corpus_again(gpt1, model, built, tmp_path):
    docs, index = built
    enc = tokenizer_for(model)
    assert index.meta["tokenizer"] == {"name": "openai-gpt", "fingerprint": tokenizer_fingerprint(enc)}
    ix.save_index(index, tmp_path / "ix")
    loaded = ix.load_index(tmp_path / "ix")
    assert ix.index_matches(loaded, model) and ix.index_mismatch(loaded, model, weights=True) is None
    again = ix.index_documents(loaded, enc=enc)  # the corpus tokenized again with GPT-1's BPE, checksums checked
    assert [list(map(int, d.ids)) for d in again] == [list(map(int, d.ids)) for d in docs]
    with pytest.raises(ValueError, match="built over 'openai-gpt''s token ids and this model reads 'gpt2''s"):
        ix.index_documents(loaded)  # GPT-2's BPE would read other words
    u = ix.Unit("neuron", 1, 3)
    words = [enc.decode([t]) for t, _ in ix.top_tokens(index, u, 5)]
    assert ix.summary(index, u, enc).endswith("top tokens: " + ", ".join(map(repr, words)))


def export_args(gpt1, index, out, units: str) -> list[str]:
    """`gptviz index export` of the GPT-1 folder's units from the index folder `index` to `out`."""
    return ["index", "export", str(gpt1.folder), "--index", str(index), "--out", str(out), "--units", units]


def test_an_index_over_gpt2_ids_is_refused_for_the_gpt1_model(gpt1, model, tmp_path):
    """The same weights read through GPT-2's BPE (the folder without its tokenizer) give an index whose model
    fingerprint is this model's, but whose ids are GPT-2's: every reader refuses it, in words."""
    from gptviz.__main__ import main
    from gptviz.notebook.unit_widget import find_index

    plain = load_pretrained(str(gpt1.folder)).eval()
    plain.tokenizer = None
    other = ix.build_index(plain, [ix.Document("a", np.arange(80) % 50)], top_k=3, bins=8, min_count=2)
    assert other.meta["tokenizer"]["name"] == "gpt2"
    assert other.meta["model"]["fingerprint"] == ix.model_fingerprint(model)
    assert not ix.index_matches(other, model) and ix.index_matches(other, plain)
    message = "built over 'gpt2''s token ids and this model reads 'openai-gpt''s"
    assert message in ix.index_mismatch(other, model)
    with pytest.raises(ValueError, match=message):
        find_index(other, model)
    ix.save_index(other, tmp_path / "gpt2ix")
    assert main(export_args(gpt1, tmp_path / "gpt2ix", tmp_path / "exp", "L0N0")) == 2
    assert not (tmp_path / "exp").exists()


def test_the_cli_builds_exports_and_bounds_a_gpt1_index(gpt1, model, corpus, tmp_path, capsys):
    from gptviz.__main__ import main

    out = tmp_path / "ix"
    assert (
        main(
            [
                "index",
                str(gpt1.folder),
                "--corpus",
                str(corpus),
                "--out",
                str(out),
                "--batch",
                "2",
                "--max-tokens",
                "200",
            ]
        )
        == 0
    )
    index = ix.load_index(out)
    flat = [i for ids in whole_ids(gpt1, corpus) for i in ids][:200]
    docs = ix.index_documents(index, enc=tokenizer_for(model))
    assert index.tokens == 200 and [i for d in docs for i in map(int, d.ids)] == flat
    assert index.meta["tokenizer"]["name"] == "openai-gpt" and ix.index_matches(index, model)
    capsys.readouterr()
    assert main(export_args(gpt1, out, tmp_path / "exp", "L1N2")) == 0
    listed = json.loads((tmp_path / "exp" / "export.json").read_text())
    feature = json.loads((tmp_path / "exp" / listed["batches"][0]["file"]).read_text())["features"][0]
    for a in feature["activations"]:  # every example's text is GPT-1's tokens, decoded as transformers decodes
        assert a["tokens"] == [gpt1.tok.decode([i]) for i in a["gptviz"]["ids"]]
    assert feature["pos_str"] == [gpt1.tok.decode([i]) for i in feature["gptviz"]["pos_ids"]]


@pytest.fixture
def spec(gpt1, monkeypatch):
    limits = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": str(gpt1.folder.parent)})
    monkeypatch.setattr(model_access, "server_limits", lambda: limits)
    yield model_service.ModelSpec(K.SOURCE_PRETRAINED, str(gpt1.folder), "post")
    model_service.model_store().clear()


@pytest.mark.slow
def test_the_unit_page_shows_gpt1s_tokens(gpt1, model, built, spec, tmp_path, monkeypatch):
    from tests.support.pagetest import run_page, token_rows

    docs, index = built
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    ix.save_index(index, tmp_path / "indexes" / "plays")  # a name of the operator's own
    at = run_page("units", "But soft", spec, **{K.UNIT: "L1N2"})
    assert not at.exception and not at.error, [e.value for e in at.error]
    rows = token_rows(at, K.UNIT_EXAMPLES)["rows"]
    best = ix.top_examples(index, "L1N2")
    assert len(rows) == len(best)
    for row, e in zip(rows, best, strict=True):
        ids = list(map(int, docs[e.doc].ids))
        labels = [t.replace("</w>", "␣") for t in gpt1.tok.convert_ids_to_tokens(ids)]
        at_peak = labels[e.pos - row["peak"] : e.pos - row["peak"] + len(row["tokens"])]
        assert row["tokens"] == at_peak  # GPT-1's pieces around the peak, the peak where the index says
    # word search encodes the typed word with GPT-1's BPE (capitals lowered): 'LIGHT' is the token 'light</w>'
    light = hf_ids(gpt1, "light")
    assert len(light) == 1
    at = run_page("units", "But soft", spec, **{K.UNIT_TAB: K.UNIT_TABS[1], K.UNIT_WORD: "LIGHT"})
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    said = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert f"Token 'light' (id {light[0]}, " in said
    # a GPT-2 index of these weights is refused with the reason, and a build offered
    plain = load_pretrained(str(gpt1.folder)).eval()
    plain.tokenizer = None
    other = ix.build_index(plain, [ix.Document("a", np.arange(80) % 50)], top_k=3, bins=8, min_count=2)
    ix.save_index(other, tmp_path / "indexes" / "plays")
    at = run_page("units", "But soft", spec)
    shown = " ".join(e.value for e in at.error).replace("\\", "")  # the message as read (markdown-escaped)
    assert not at.exception and "built over 'gpt2''s token ids and this model reads 'openai-gpt''s" in shown


@pytest.mark.slow  # the complete works tokenized twice with GPT-1's BPE in Python (about a minute)
def test_the_unit_pages_snippet_rebuilds_the_index_over_gpt1s_ids(gpt1, model, spec):
    """Copy as Python for a GPT-1 folder's unit page: the corpus read with tokenizer_for(model), and the summary's
    top tokens decoded with it; run, it gives the summary the library gives."""
    from gptviz.app import reproduce

    code = reproduce.unit(spec, "L1N2", 3)
    assert "corpus_documents(enc=tokenizer_for(model))" in code and "summary(index, unit, tokenizer_for(model))" in code
    scope: dict = {}
    exec(compile(code, "snippet", "exec"), scope)
    docs = [ix.Document(d.name, d.ids[:3], d.held_out) for d in ix.corpus_documents(enc=tokenizer_for(model))]
    assert scope["result"]["summary"] == ix.summary(ix.build_index(model, docs), "L1N2", tokenizer_for(model))


def test_the_notebooks_unit_view_labels_gpt1s_tokens(gpt1, model, built):
    from gptviz.notebook.unit_widget import UnitData

    docs, index = built
    data = UnitData(model, "L1H1", index, docs=docs)
    assert data.rows and data.effect is not None
    for row, c in zip(data.rows, data.contexts, strict=True):
        assert row.labels == [t.replace("</w>", "␣") for t in gpt1.tok.convert_ids_to_tokens(list(map(int, c.ids)))]
    words = [gpt1.tok.decode([t]) for t, _ in ix.top_tokens(index, "L1H1", 5)]
    assert data.summary.endswith("top tokens: " + ", ".join(map(repr, words)))
