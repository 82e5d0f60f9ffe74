"""Which tokenizer an index's ids are in, and the tokenizer-specific parts of reading a corpus.

An index records the tokenizer it was built with (`meta["tokenizer"]`: name and a fingerprint of its vocabulary and
merges); an index without the field was built over GPT-2's ids, as every index before the field was. A reader
refuses an index whose tokenizer is not the model's (`tokenizer_mismatch`): its ids would be other words.

Where a corpus may be cut into pieces without changing its tokens (texts.pieces) depends on the tokenizer's
pre-tokenizer: GPT-2's (texts._CUT), or, for GPT-1's BPE (gptviz.model.gpt1_tokenizer), just before an ASCII
whitespace character. GPT-1's tokenizer (as transformers' OpenAIGPTTokenizer) normalises the text (control
characters out, whitespace as spaces, CJK spaced, NFC/NFD with accents dropped, lower case) and then splits it at
whitespace before BPE runs on each word; every normalisation step is per character or confined between two
whitespace characters (canonical reordering and composition stop at a space, whose combining class is 0; lower
case's final-sigma context stops at a space), so a cut before whitespace changes no word, hence no token.
tests/index/test_index_gpt1.py checks it against transformers on whole texts.
"""

from __future__ import annotations

import hashlib
import json
import re

from ..model.tokenizer import BPE_SHA256, get_tokenizer, is_gpt2

GPT2 = {"name": "gpt2", "fingerprint": BPE_SHA256}  # the tokenizer of an index that names none
GPT1_CUT = re.compile(r"[^ \t\n\r](?=[ \t\n\r])")  # a cut after this match is safe for GPT-1's BPE


def tokenizer_fingerprint(enc) -> str:
    """sha256 of a tokenizer's vocabulary and merges: GPT-2's bundled BPE file's, or GPT-1's vocab.json and merges
    (in rank order) as gptviz read them."""
    if is_gpt2(enc):
        return BPE_SHA256
    known = getattr(enc, "_gptviz_fingerprint", None)
    if known is None:
        h = hashlib.sha256(json.dumps(sorted(enc.vocab.items()), ensure_ascii=False).encode())
        h.update(json.dumps(sorted(enc.ranks.items(), key=lambda kv: kv[1]), ensure_ascii=False).encode())
        known = enc._gptviz_fingerprint = h.hexdigest()
    return known


def tokenizer_meta(enc) -> dict:
    """What an index records of the tokenizer its ids are in."""
    return dict(GPT2) if is_gpt2(enc) else {"name": enc.name, "fingerprint": tokenizer_fingerprint(enc)}


def index_tokenizer(meta: dict) -> dict:
    """The tokenizer an index's metadata names (GPT-2's where it names none)."""
    found = meta.get("tokenizer")
    return found if isinstance(found, dict) else dict(GPT2)


def tokenizer_mismatch(meta: dict, enc) -> str | None:
    """Why an index (its metadata) cannot be read with the tokenizer `enc`, or None when its ids are `enc`'s."""
    theirs, mine = index_tokenizer(meta), tokenizer_meta(enc or get_tokenizer())
    if theirs.get("fingerprint") == mine["fingerprint"]:
        return None
    same = theirs.get("name") == mine["name"]
    return (
        f"the index was built over {theirs.get('name')!r}'s token ids and this model reads "
        f"{mine['name']!r}'s{' (another vocabulary of that name)' if same else ''}: its examples would be other "
        "words; build the index again with this model"
    )


def encode_ordinary(enc, text: str) -> list[int]:
    """`text`'s ids, a special token's spelling read as plain text (tiktoken's encode_ordinary; GPT-1's BPE has
    no special tokens to read)."""
    return enc.encode_ordinary(text) if hasattr(enc, "encode_ordinary") else enc.encode(text)


def cut_pattern(enc):
    """The regex whose matches' ends are safe cuts for `enc` (texts.pieces), None for GPT-2's own."""
    return None if is_gpt2(enc) else GPT1_CUT
