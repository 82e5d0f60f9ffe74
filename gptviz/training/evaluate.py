"""The bars a trained model must clear, measured: validation loss against a bigram baseline on the same split,
previous-token and induction heads, and a sample that should read like a play script (the card that reports them:
model_card.py)."""

from __future__ import annotations

import math
import re

import torch

from ..methods import bigram_baseline, head_ranking, induction_test, previous_token_chance, previous_token_scores
from ..model.generate import generate
from ..model.hooks import act_name, capture
from ..model.model import GPT
from ..model.tokenizer import get_tokenizer
from .corpus import DATA, HELD_OUT_PLAYS, WORKS, Corpus, load_training_data
from .train import most_frequent_ids, summed_lm_loss

# The training record's readers are asked for here by the pages (with corpus_of, a checkpoint's data).
from .training_record import recipe_differences, training_stages, twins_caveat  # noqa: F401

# A speaker's name alone on its line, as the complete works write it: "Ham.", "KING.", "First Clown.", "SIR TOBY."
SPEAKER_LINE = re.compile(r"^[A-Z][A-Za-z']*(?: [A-Z][A-Za-z']*){0,2}\.$", re.M)
SAMPLE_PROMPT = "Ham.\n"
# The bars of the bundled-model issue.
MARGIN_NATS = 0.5  # held-out loss at least this far below the bigram/unigram baseline
PREVIOUS_TOKEN_BAR = 0.5  # mean attention to the previous token on held-out text
INDUCTION_BAR = 0.3  # induction score on a random sequence repeated once
REPEAT_LOSS_BAR = 3.0  # nats/token on the repeated half
INDUCTION_SEEDS = 4  # random sequences averaged
# The induction test's sequences draw from the training text's most frequent ids (each seen 62 times or more in
# the complete works): an id seen a handful of times has an embedding too little trained to be told apart.
INDUCTION_TEST_VOCAB = 2000
# The app's repeated-sequence example: a model with an induction head continues it with " D".
COPY_PROMPT = "A B C D E F G H A B C"
COPY_EXPECTED = " D E F G H"


@torch.no_grad()
def validation_loss(model: GPT, val: torch.Tensor, batch: int = 16) -> float:
    """Mean next-token loss over every non-overlapping n_ctx window of the validation tokens."""
    model.eval()
    block = model.config.n_ctx
    n = (len(val) - 1) // block
    x = val[: n * block].view(n, block)
    y = val[1 : n * block + 1].view(n, block)
    total = sum(summed_lm_loss(model, x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch))
    return total / (n * block)


@torch.no_grad()
def previous_token_on_text(model: GPT, tokens: torch.Tensor, windows: int = 8) -> torch.Tensor:
    """[layers, heads] previous-token scores averaged over evenly spaced windows of real text."""
    block = model.config.n_ctx
    starts = torch.linspace(0, len(tokens) - block - 1, windows).long()
    names = [act_name("pattern", i) for i in range(model.config.n_layers)]
    scores = []
    for s in starts:
        _, cache = capture(model, tokens[s : s + block][None], names)
        scores.append(previous_token_scores(cache.patterns()[:, 0]))
    return torch.stack(scores).mean(0)


def head_report(scores: torch.Tensor, chance: float) -> dict:
    layer, head, score = head_ranking(scores, 1)[0]
    return {"layer": layer, "head": head, "score": score, "chance": chance}


def training_measure(model: GPT, train: torch.Tensor, val: torch.Tensor) -> dict[str, float]:
    """The head bars, cheaply, for the history during training (4 held-out windows, one random sequence of the
    training ids, as the bar's test draws them)."""
    test = induction_test(model, ids=torch.unique(train))
    return {
        "prev_token": float(previous_token_on_text(model, val, windows=4).max()),
        "induction": float(test.scores.max()),
        "repeat_loss": test.repeat_loss,
    }


def check_model(model: GPT, corpus: Corpus, seed: int = 0, sample_tokens: int = 200) -> dict:
    """Every bar of the bundled-model issue, measured on this model: the loss on the corpus's held-out text
    against a bigram/unigram model fitted on its training text, the heads (each beside its chance level),
    the copy test and a sample."""
    baseline = bigram_baseline(corpus.train, corpus.val, model.config.vocab_size)
    val_loss = validation_loss(model, corpus.val)
    prev = previous_token_on_text(model, corpus.val)
    trained_ids = corpus.train_vocab
    tests = [induction_test(model, seed=s, ids=trained_ids) for s in range(INDUCTION_SEEDS)]
    induction = torch.stack([t.scores for t in tests]).mean(0)
    repeat_loss = sum(t.repeat_loss for t in tests) / len(tests)
    # The same test on the most frequent training ids only (the ids the training's repeated windows draw from):
    # beside the bar's figure, it tells a head that copies any token from one that copies the tokens it practised on.
    frequent = [
        induction_test(model, seed=s, ids=most_frequent_ids(corpus.train, INDUCTION_TEST_VOCAB))
        for s in range(INDUCTION_SEEDS)
    ]
    enc = get_tokenizer()
    ids = generate(model, enc.encode(SAMPLE_PROMPT), sample_tokens, temperature=0.8, top_k=50, seed=seed)
    sample = enc.decode(ids)
    copy_ids = enc.encode(COPY_PROMPT)
    copy = enc.decode(generate(model, copy_ids, len(enc.encode(COPY_EXPECTED)), temperature=0.0)[len(copy_ids) :])
    speakers = SPEAKER_LINE.findall(sample)
    best_prev = head_report(prev, previous_token_chance(model.config.n_ctx))
    best_ind = head_report(induction, tests[0].chance)
    return {
        "data": {
            "source": corpus.source,
            "held_out": list(corpus.val_parts),
            "train_tokens": len(corpus.train),
            "held_out_tokens": len(corpus.val),
            "train_vocab": len(trained_ids),
        },
        "val_loss": val_loss,
        "bigram_baseline": baseline["nats"],
        "bigram_lambda": baseline["lambda"],
        "unigram_baseline": baseline["unigram_nats"],
        "margin": baseline["nats"] - val_loss,
        "best_previous_token_head": best_prev,
        "best_induction_head": best_ind,
        "induction_length": tests[0].length,
        "repeat_loss": repeat_loss,
        "frequent_ids_induction": {
            "ids": INDUCTION_TEST_VOCAB,
            "best_induction_head": head_report(torch.stack([t.scores for t in frequent]).mean(0), frequent[0].chance),
            "repeat_loss": sum(t.repeat_loss for t in frequent) / len(frequent),
        },
        "uniform_loss": math.log(model.config.vocab_size),
        "copy_prompt": COPY_PROMPT,
        "copy_continuation": copy,
        "sample": sample,
        "sample_speaker_lines": len(speakers),
        "sample_newlines": sample.count("\n"),
        "passes": {
            f"held_out_loss_below_bigram_by_{MARGIN_NATS}": baseline["nats"] - val_loss >= MARGIN_NATS,
            f"previous_token_head_at_least_{PREVIOUS_TOKEN_BAR}": best_prev["score"] >= PREVIOUS_TOKEN_BAR,
            f"induction_head_at_least_{INDUCTION_BAR}": best_ind["score"] >= INDUCTION_BAR,
            f"repeated_half_loss_at_most_{REPEAT_LOSS_BAR:g}": repeat_loss <= REPEAT_LOSS_BAR,
            "continues_the_repeated_letters_with_D": copy.startswith(" D"),
            "sample_reads_like_a_play": len(speakers) >= 2 and sample.count("\n") >= 4,
        },
    }


def corpus_of(meta: dict) -> Corpus:
    """The training and held-out text a checkpoint's config.json names (the bundled data folder)."""
    training = meta.get("training", {})
    held_out = tuple(training.get("held_out") or HELD_OUT_PLAYS)
    return load_training_data(
        DATA / training.get("data", WORKS.name), training.get("settings", {}).get("val_fraction", 0.1), held_out
    )
