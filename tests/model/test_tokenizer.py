"""GPT-2 BPE from the bundled file: reference ids, round-trips, offline, checksum, display labels."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest

from gptviz import assets, get_tokenizer
from gptviz.model import tokenizer as tok
from gptviz.model.tokenizer import EOT_ID, decode, encode, position_labels, token_label, token_labels
from tests.support import ROOT

SHARED_BPE = ROOT.parent / "shared" / "data" / "r50k_base.tiktoken"


@pytest.fixture
def fresh_tokenizer():
    """Clear the cached Encoding before and after, so the test builds one itself and leaves no odd one."""
    get_tokenizer.cache_clear()
    yield
    get_tokenizer.cache_clear()


@pytest.mark.parametrize(
    "text, ids",
    [
        ("Hello, I am", [15496, 11, 314, 716]),
        (" Every effort moves you", [3887, 3626, 6100, 345]),
    ],
)
def test_reference_encodings(text, ids):
    enc = get_tokenizer()
    assert enc.encode(text) == ids
    assert enc.decode(ids) == text
    assert encode(text) == ids and decode(ids) == text


def test_no_leading_space_gives_other_first_token():
    assert get_tokenizer().encode("Every effort moves you")[0] == 6109


def test_vocabulary_size_and_end_of_text():
    enc = get_tokenizer()
    assert enc.n_vocab == 50257
    assert enc.eot_token == EOT_ID == 50256
    assert enc.decode_single_token_bytes(50256) == b"<|endoftext|>"
    assert enc.encode("<|endoftext|>", allowed_special="all") == [50256]


def test_end_of_text_in_user_text_is_plain_text():
    enc = get_tokenizer()
    text = "before <|endoftext|> after"
    ids = enc.encode(text)
    assert 50256 not in ids
    assert enc.decode(ids) == text


def test_bundled_file_is_the_shared_reference_file():
    bundled = (Path(assets.__file__).parent / tok.BPE_FILE).read_bytes()
    assert hashlib.sha256(bundled).hexdigest() == tok.BPE_SHA256
    if SHARED_BPE.exists():
        assert SHARED_BPE.read_bytes() == bundled


@pytest.mark.parametrize(
    "text",
    [
        "emoji 🦜🦜 family 👨‍👩‍👧 flags 🇫🇷",
        "CJK 中文字符 日本語のテキスト 한국어",
        "combining e\u0301 a\u0308 o\u0303\u0304",
        "RTL שלום עולם مرحبا بالعالم",
        "zero\u200bwidth\u200djoiner\ufeffbom",
        "<script>alert('x')</script> &amp; <b>bold</b>",
        "  leading and trailing spaces  \n\n\ttabs\r\nCRLF",
        "math ∑∫√∞ ≠ ≤ and control \x00\x07 chars",
        "",
    ],
)
def test_round_trip_odd_unicode(text):
    enc = get_tokenizer()
    ids = enc.encode(text)
    assert enc.decode(ids) == text
    assert b"".join(enc.decode_single_token_bytes(i) for i in ids) == text.encode("utf-8")


def test_builds_without_network(monkeypatch, fresh_tokenizer):
    def refuse(*args, **kwargs):
        raise AssertionError("the tokenizer tried to use the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    ranks = tok._load_ranks()
    assert len(ranks) == 50256 and ranks[b"Hello"] == 15496
    enc = get_tokenizer()
    assert enc.encode("Hello, I am") == [15496, 11, 314, 716]


def test_corrupt_bpe_file_raises_clear_error(monkeypatch, tmp_path, fresh_tokenizer):
    good = (Path(assets.__file__).parent / tok.BPE_FILE).read_bytes()
    corrupt = bytearray(good)
    corrupt[1000] ^= 0x01  # one flipped bit
    (tmp_path / tok.BPE_FILE).write_bytes(bytes(corrupt))

    class FakeResources:
        @staticmethod
        def files(package):
            assert package == "gptviz.assets"
            return tmp_path

    monkeypatch.setattr(tok, "resources", FakeResources)
    with pytest.raises(RuntimeError, match=r"r50k_base\.tiktoken is corrupt .*expected 306cd27f"):
        get_tokenizer()
    (tmp_path / tok.BPE_FILE).write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(RuntimeError, match="corrupt"):
        get_tokenizer()
    (tmp_path / tok.BPE_FILE).write_bytes(good)  # the real bytes from the same place load fine
    assert get_tokenizer().encode("Hello") == [15496]


def test_labels_make_whitespace_visible():
    enc = get_tokenizer()
    assert token_labels(enc.encode(" hello")) == ["␣hello"]
    assert token_labels(enc.encode("a\nb")) == ["a", "↵", "b"]
    assert token_label(b"\t") == "⇥" and token_label(b"\r\n") == "␍↵"
    assert token_label(b"  x") == "␣␣x"


def test_labels_show_partial_utf8_as_hex_bytes():
    enc = get_tokenizer()
    ids = enc.encode("🦜")
    assert len(ids) > 1  # split across tokens
    labels = token_labels(ids)
    assert labels == ["<0xF0><0x9F>", "<0xA6>", "<0x9C>"]
    for label in labels:
        assert "?" not in label and "\ufffd" not in label
    assert token_label("🦜".encode()) == "🦜"  # a whole character is shown as itself
    assert token_label("中".encode()) == "中"


def test_labels_name_invisible_characters():
    assert token_label("\u200d".encode()) == "U+200D"
    assert token_label(b"\x00") == "U+0000"
    assert token_label("e\u0301".encode()) == "e\u0301"  # combining marks are printable; kept


def test_position_labels_unique_for_repeated_tokens():
    ids = get_tokenizer().encode(" the the the cat the")
    labels = token_labels(ids)
    assert labels.count("␣the") == 4
    positions = position_labels(ids)
    assert len(set(positions)) == len(positions) == len(ids)
    assert positions[:2] == ["0:␣the", "1:␣the"]
