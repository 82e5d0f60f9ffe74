"""A model trained for 50 steps with each format's own code, saved in that format, generates the same text greedily
in gptviz as in that code: nanoGPT (bias=False, saved under a compiled model's names), Raschka's GPTModel, llm.c
(its vocabulary padded to a multiple of 128) and Hugging Face GPT-1. Each uses a small vocabulary, the GPT-2 tokens
the text uses renumbered, to stay at a second or two (test_formats.py covers nanoGPT's 50,304-row padding)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gptviz import generate, get_tokenizer, load_pretrained
from tests.reference import llmc as llmc_ref
from tests.reference import nanogpt as nanogpt_ref
from tests.reference import raschka as raschka_ref
from tests.support import ROOT
from tests.support.small_configs import hf_gpt1_config, raschka_config

CORPUS = ROOT / "data" / "tinyshakespeare.txt"
STEPS, NEW, BLOCK, BATCH = 50, 20, 32, 16

pytestmark = pytest.mark.slow  # a few seconds each: fifty optimizer steps


def small_vocab_ids() -> tuple[torch.Tensor, int]:
    """The first 400 characters' GPT-2 ids renumbered 0..n-1 (in id order), and n: a text small enough that fifty
    steps learn more of it than its most frequent token (on longer slices every model only says "\n")."""
    ids = torch.tensor(get_tokenizer().encode(CORPUS.read_text(encoding="utf-8")[:400]))
    uniq, inverse = torch.unique(ids, return_inverse=True)
    return inverse, len(uniq)


def train(model: torch.nn.Module, ids: torch.Tensor, logits_of=lambda m, x: m(x), seed: int = 0) -> None:
    """Fifty AdamW steps of next-token prediction on random windows of `ids`."""
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(STEPS):
        starts = torch.randint(0, len(ids) - BLOCK - 1, (BATCH,), generator=g)
        x = torch.stack([ids[s : s + BLOCK] for s in starts])
        y = torch.stack([ids[s + 1 : s + BLOCK + 1] for s in starts])
        logits = logits_of(model, x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def greedy(logits_of, prompt: torch.Tensor, vocab: int) -> list[int]:
    """The reference's greedy continuation: its logits at the last position, argmax over the real vocabulary."""
    ids = prompt[None]
    with torch.no_grad():
        for _ in range(NEW):
            nxt = logits_of(ids[:, -BLOCK:])[0, -1, :vocab].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    return ids[0, len(prompt) :].tolist()


def ours_greedy(path, prompt: torch.Tensor, **kwargs) -> list[int]:
    model = load_pretrained(str(path), **kwargs)
    new = generate(model, prompt.tolist(), NEW, temperature=0)[len(prompt) :]
    assert len(set(new)) > 1, new  # trained: not one token over and over
    return new


def test_nanogpt_trained_generates_the_same_text(tmp_path):
    ids, vocab = small_vocab_ids()
    torch.manual_seed(0)
    cfg = nanogpt_ref.GPTConfig(block_size=BLOCK, vocab_size=vocab, n_layer=2, n_head=4, n_embd=32, bias=False)
    ref = nanogpt_ref.GPT(cfg)
    train(ref, ids)
    nanogpt_ref.save_ckpt(ref, tmp_path / "ckpt.pt", iter_num=STEPS, compiled=True)
    prompt = ids[:8]
    expected = greedy(ref, prompt, vocab)
    assert ours_greedy(tmp_path / "ckpt.pt", prompt) == expected


def test_raschka_trained_generates_the_same_text(tmp_path):
    ids, vocab = small_vocab_ids()
    cfg = raschka_config(vocab, BLOCK)
    torch.manual_seed(1)
    ref = raschka_ref.GPTModel(cfg)
    train(ref, ids, seed=1)
    torch.save(ref.state_dict(), tmp_path / "model.pth")
    prompt = ids[:8]
    expected = raschka_ref.generate_text_simple(ref, prompt[None], NEW, BLOCK)[0, 8:].tolist()
    assert ours_greedy(tmp_path / "model.pth", prompt, n_head=4) == expected


def test_llmc_trained_generates_the_same_text(tmp_path):
    ids, vocab = small_vocab_ids()
    torch.manual_seed(0)
    ref = llmc_ref.GPT(llmc_ref.GPTConfig(block_size=BLOCK, vocab_size=vocab, n_layer=2, n_head=4, n_embd=32))
    train(ref, ids)
    llmc_ref.write_model(ref, tmp_path / "model_00050.bin")  # vocabulary padded to a multiple of 128
    prompt = ids[:8]
    assert ours_greedy(tmp_path / "model_00050.bin", prompt) == greedy(ref, prompt, vocab)


@pytest.mark.hf
def test_hf_gpt1_trained_generates_the_same_text(tmp_path):
    transformers = pytest.importorskip("transformers")
    ids, vocab = small_vocab_ids()
    cfg = hf_gpt1_config(vocab, BLOCK)
    torch.manual_seed(3)
    hf = transformers.OpenAIGPTLMHeadModel(cfg)
    train(hf, ids, logits_of=lambda m, x: m(x).logits, seed=3)
    hf.save_pretrained(tmp_path / "gpt1")
    prompt = ids[:8]
    out = hf.generate(prompt[None], max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    expected = out[0, 8:].tolist()
    assert expected == greedy(lambda x: hf(x).logits, prompt, vocab)
    assert ours_greedy(tmp_path / "gpt1", prompt) == expected
