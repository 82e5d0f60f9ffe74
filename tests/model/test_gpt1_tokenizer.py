"""GPT-1's own tokenizer, read from an openai-gpt folder's vocab.json and merges.txt in plain Python, gives the ids and
text transformers' OpenAIGPTTokenizer gives on the same files (a small BPE trained here in the openai-gpt layout)."""

from __future__ import annotations

import pytest

from gptviz.app.sidebar import EXAMPLE_PROMPTS
from gptviz.model.gpt1_tokenizer import OpenAIGPTTokenizer
from tests.support.gpt1 import gpt1_tokenizer_files

TEXTS = [
    *EXAMPLE_PROMPTS.values(),
    "Hello, World!  ROMEO.\n\tBut soft",
    "Café naïve résumé",
    "你好世界 ok",
    "Zebra quux 🦜 xyz",
    "a\x00b\u200bc\x07d",
    "It's 3.14 -- e-mail: a@b.c <b>bold</b>",
    "",
    "   ",
]


@pytest.mark.slow
@pytest.mark.hf
def test_gpt1s_tokenizer_is_transformers_own(tmp_path):
    transformers = pytest.importorskip("transformers")
    gpt1_tokenizer_files(tmp_path)
    ref = transformers.OpenAIGPTTokenizer(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"))
    ours = OpenAIGPTTokenizer.from_folder(tmp_path)
    assert ours.n_vocab == len(ref)
    for text in TEXTS:
        ids = ref.encode(text, add_special_tokens=False)
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == ref.decode(ids), text
    labels = ours.labels(ours.encode("But soft"))
    assert labels[-1].endswith("␣") and "".join(labels).replace("␣", " ").strip() == "but soft"


def test_missing_or_malformed_files_are_one_error(tmp_path):
    with pytest.raises(ValueError, match="no GPT-1 vocab.json and merges.txt"):
        OpenAIGPTTokenizer.from_folder(tmp_path)
    (tmp_path / "vocab.json").write_text("[1, 2]")
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    with pytest.raises(ValueError, match="not in the Hugging Face layout"):
        OpenAIGPTTokenizer.from_folder(tmp_path)
