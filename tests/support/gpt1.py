"""GPT-1 folders made here: its own tokenizer's files, and a Hugging Face folder with transformers' ids."""

from __future__ import annotations

import pytest

from gptviz.app.sidebar import EXAMPLE_PROMPTS
from tests.support.models import unit_scale
from tests.support.small_configs import hf_gpt1_config


def gpt1_tokenizer_files(folder, vocab_size: int = 300) -> None:
    """vocab.json and merges.txt as Hugging Face's openai-gpt has them, trained on the example prompts."""
    tokenizers = pytest.importorskip("tokenizers")
    text = " ".join(EXAMPLE_PROMPTS.values()) * 3 + " Café naïve résumé, 你好 world! It's 3.14 -- e-mail: a@b.c"
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    tok.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"], end_of_word_suffix="</w>")
    tok.train_from_iterator([text], trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.model.save(str(folder))


# words the tiny BPE splits ("starlight": s t a r light</w>) and a character it has no end-of-word piece for ("thou":
# th o <unk>), beside whole words
PROMPT = (
    "ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. Thou starlight"
)


class GPT1(tuple):
    """(folder, transformers' tokenizer, transformers' model) of one tiny GPT-1 saved as Hugging Face saves it."""

    folder = property(lambda self: self[0])
    tok = property(lambda self: self[1])
    hf = property(lambda self: self[2])


def gpt1_folder(folder) -> GPT1:
    """A tiny GPT-1 (unit-scale weights) with a tiny GPT-1 BPE, saved in `folder` as transformers saves them."""
    transformers = pytest.importorskip("transformers")
    gpt1_tokenizer_files(folder)
    tok = transformers.OpenAIGPTTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
    cfg = hf_gpt1_config(len(tok), 64)
    hf = unit_scale(transformers.OpenAIGPTLMHeadModel(cfg))
    hf.save_pretrained(folder)
    return GPT1((folder, tok, hf))


def hf_ids(gpt1: GPT1, text: str = PROMPT) -> list[int]:
    return gpt1.tok.encode(text, add_special_tokens=False)


def hf_labels(gpt1: GPT1, ids) -> list[str]:
    """transformers' tokens for `ids`, a word's last piece's "</w>" shown as the app shows it ("␣")."""
    return [t.replace("</w>", "␣") for t in gpt1.tok.convert_ids_to_tokens(list(ids))]
