"""Training: a standard loop (AdamW, warmup + cosine decay, gradient clipping, train/validation split,
seeded) used by the CLI that builds the bundled models and by the Train page.

Two Trainers fed the same batches compare pre-norm and post-norm on equal terms.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ..model.config import GPTConfig
from ..model.model import GPT
from .corpus import CORPUS, Corpus, load_corpus, split  # noqa: F401 (load_corpus, CORPUS: re-exported)


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 1200
    batch_size: int = 8
    block_size: int | None = None  # tokens per sequence; None means the model's n_ctx
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * this
    warmup: int = 100  # linear warmup steps (0 = none)
    weight_decay: float = 0.1  # on matrices only, not on biases, norms or embeddings' positions
    beta2: float = 0.95  # AdamW's second-moment decay (Xiong et al. 2020 used 0.98); beta1 is 0.9
    grad_clip: float = 1.0  # max global gradient norm (0 = no clipping)
    val_fraction: float = 0.1
    eval_every: int = 100
    eval_batches: int = 8
    seed: int = 1337
    # The LM head over 50,257 ids is most of a small model's cost, and Tiny Shakespeare uses about 11,000 of
    # them. The first `corpus_vocab_steps` steps normalise the softmax over the ids the training split uses
    # (the loss of every target is exact up to that normalisation); the remaining steps use the full
    # vocabulary, which pushes the never-seen ids down. Validation always uses the full vocabulary.
    corpus_vocab_steps: int = 0
    # Share of each batch's windows made of a random sequence of training ids followed by its exact repeats,
    # which only copying predicts: the usual way small models grow induction heads quickly (0 = text only).
    copy_fraction: float = 0.0
    # The repeated sequences draw from the `copy_vocab` most frequent ids of the training text (0 = every id
    # it uses). Rare ids have embeddings too little trained to tell apart, so copying them is not learnable.
    copy_vocab: int = 0
    # While the softmax is over the corpus's ids, the repeated rows normally normalise over the copy ids. With
    # this, they normalise over the ids the batch's repeated rows themselves contain (a few hundred): the loss
    # then asks only "which of the tokens in view comes next", which copying answers, and leaves the rest of
    # the vocabulary's logits to the text (copying every rare id against the whole vocabulary raised them).
    copy_batch_softmax: bool = False
    # Share of the repeated sequences drawn from every training id instead of the `copy_vocab` most frequent: a
    # model copying only random rare ids learnt to copy when the context looks random and trust the text otherwise.
    copy_any_share: float = 0.0

    def __post_init__(self):
        def whole(x):
            return isinstance(x, int) and not isinstance(x, bool)

        def number(x):
            return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

        ints = ("steps", "batch_size", "warmup", "eval_every", "eval_batches", "seed", "copy_vocab")
        floats = (
            "lr",
            "min_lr_ratio",
            "weight_decay",
            "beta2",
            "grad_clip",
            "val_fraction",
            "copy_fraction",
            "copy_any_share",
        )
        bad = [n for n in ints if not whole(getattr(self, n))] + [n for n in floats if not number(getattr(self, n))]
        if self.block_size is not None and not whole(self.block_size):
            bad.append("block_size")
        if not isinstance(self.copy_batch_softmax, bool):
            bad.append("copy_batch_softmax")
        if bad:
            raise ValueError(f"invalid training setting(s): {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}")
        checks = {
            "steps": self.steps >= 1,
            "batch_size": self.batch_size >= 1,
            "lr": self.lr > 0,
            "warmup": self.warmup >= 0,
            "eval_every": self.eval_every >= 1,
            "val_fraction": 0 < self.val_fraction < 1,
            "grad_clip": self.grad_clip >= 0,
            "min_lr_ratio": 0 <= self.min_lr_ratio <= 1,
            "eval_batches": self.eval_batches >= 1,
            "weight_decay": self.weight_decay >= 0,
            "beta2": 0 <= self.beta2 < 1,
            "copy_fraction": 0 <= self.copy_fraction <= 1,
            "copy_any_share": 0 <= self.copy_any_share <= 1,
            "copy_vocab": self.copy_vocab >= 0,
            "block_size": self.block_size is None or self.block_size >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid training setting(s): {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}")


def lr_at(step: int, s: TrainSettings) -> float:
    """Linear warmup to s.lr, then cosine decay to s.lr * s.min_lr_ratio at the last step."""
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    progress = (step - s.warmup) / max(1, s.steps - 1 - s.warmup)  # 1.0 at the last step (steps - 1)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def repeated_sequence(ids: torch.Tensor, block: int, generator: torch.Generator) -> torch.Tensor:
    """block + 1 tokens: a random sequence of `ids` (length uniform in [min(8, block // 2), block // 2])
    repeated until the window is full, so every token after the first copy is predictable by copying."""
    shortest = min(8, block // 2)
    n = int(torch.randint(shortest, block // 2 + 1, (1,), generator=generator))
    seq = ids[torch.randint(0, len(ids), (n,), generator=generator)]
    return seq.repeat(math.ceil((block + 1) / n))[: block + 1]


def most_frequent_ids(tokens: torch.Tensor, k: int = 0) -> torch.Tensor:
    """The `k` most frequent ids of `tokens` (ties broken by id), sorted by id; k = 0: every id it uses."""
    ids, counts = torch.unique(tokens, return_counts=True)
    if not k or k >= len(ids):
        return ids
    order = torch.argsort(counts, descending=True, stable=True)
    return ids[order[:k]].sort().values


def batches(
    tokens: torch.Tensor,
    batch_size: int,
    block: int,
    generator: torch.Generator,
    copy_fraction: float = 0.0,
    copy_vocab: int = 0,
    copy_any_share: float = 0.0,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Random windows: inputs [B, block] and next-token targets [B, block], forever. The last
    round(copy_fraction * B) rows of each batch are repeated random sequences of the text's own ids
    (its `copy_vocab` most frequent ones, or all); each one, with probability `copy_any_share`, of every id."""
    if len(tokens) <= block + 1:
        raise ValueError(f"the data has {len(tokens)} tokens, too few for windows of {block + 1}")
    n_copy = round(copy_fraction * batch_size)
    if n_copy and block < 2:
        raise ValueError("repeated sequences need windows of at least 2 tokens")
    ids = most_frequent_ids(tokens, copy_vocab) if n_copy else None
    every = torch.unique(tokens) if n_copy and copy_any_share else None
    while True:
        starts = torch.randint(0, len(tokens) - block - 1, (batch_size - n_copy,), generator=generator)
        rows = [tokens[s : s + block + 1] for s in starts]
        for _ in range(n_copy):
            any_id = every is not None and float(torch.rand(1, generator=generator)) < copy_any_share
            rows.append(repeated_sequence(every if any_id else ids, block, generator))
        xy = torch.stack(rows)
        yield xy[:, :-1], xy[:, 1:]


def vocab_index(vocab: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(vocab, index_of) for subset_lm_loss: `index_of[id]` is id's row in the sorted ids `vocab`, -1 elsewhere."""
    index_of = torch.full((vocab_size,), -1, dtype=torch.long, device=vocab.device)
    index_of[vocab] = torch.arange(len(vocab), device=vocab.device)
    return vocab, index_of


def _subset_ce(
    hidden: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, vocab: torch.Tensor, index_of: torch.Tensor
) -> torch.Tensor:
    logits = hidden @ weight[vocab].t()  # (B, T, |vocab|)
    targets = index_of[y.to(logits.device)]
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def subset_lm_loss(
    model: GPT,
    x: torch.Tensor,
    y: torch.Tensor,
    vocab: torch.Tensor,
    index_of: torch.Tensor,
    n_copy: int = 0,
    copy_vocab: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Next-token loss with the softmax over `vocab` (sorted ids) only; `index_of[id]` is id's row in vocab.
    With `copy_vocab` (vocab, index_of) given, the last `n_copy` rows (the repeated sequences, whose tokens all
    come from it) normalise over those ids instead: the same per-token mean, at a fraction of the head's cost."""
    hidden = model.final_hidden(x)
    weight = model.lm_head.weight
    if not n_copy or copy_vocab is None:
        return _subset_ce(hidden, weight, y, vocab, index_of)
    n_text = len(x) - n_copy
    parts = [(_subset_ce(hidden[n_text:], weight, y[n_text:], *copy_vocab), n_copy)]
    if n_text:
        parts.append((_subset_ce(hidden[:n_text], weight, y[:n_text], vocab, index_of), n_text))
    return sum(loss * n for loss, n in parts) / len(x)


def lm_loss(model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.to(logits.device).reshape(-1))


# Positions per LM-head chunk when no gradient is needed (validation): a chunk's logits (64 x 50,257 floats) stay in
# the CPU's cache between the head and the loss, and the whole batch's logits never exist at once; on one torch thread
# the chunks were also faster than one matrix, for a small model's validation (`python -m benchmarks grow` times
# the runs that validate this way).
LOSS_ROWS = 64


@torch.no_grad()
def summed_lm_loss(model: GPT, x: torch.Tensor, y: torch.Tensor) -> float:
    """The sum of the next-token losses of every position of `x` [B, T] against `y`, without gradients, the LM head
    and the loss computed LOSS_ROWS positions at a time (equal to lm_loss * B * T up to float rounding)."""
    hidden = model.final_hidden(x)
    hidden = hidden.reshape(-1, hidden.shape[-1])
    target = y.reshape(-1).to(hidden.device)
    total = torch.zeros((), dtype=torch.float64, device=hidden.device)  # summed where the chunks are: on a GPU, one
    for r in range(0, len(hidden), LOSS_ROWS):  # sync at the end, not one per chunk
        logits = model.lm_head(hidden[r : r + LOSS_ROWS]).float()
        total += F.cross_entropy(logits, target[r : r + LOSS_ROWS], reduction="sum").double()
    return float(total)


@dataclass
class StepLog:
    step: int
    lr: float
    train_loss: float
    grad_norm: float
    val_loss: float | None
    elapsed_s: float
    full_vocab: bool = True  # train_loss normalised over all ids (False: over the corpus's ids only)
    # Head measurements taken with each validation loss when train_models is given `measure`:
    prev_token: float | None = None  # best head's previous-token score on held-out text
    induction: float | None = None  # best head's induction score on a repeated random sequence
    repeat_loss: float | None = None  # loss on that sequence's repeated half (nats/token)


def trains_copy_rows_only(settings: TrainSettings, config: GPTConfig) -> bool:
    """Do these settings train, of a model of `config`, only the embedding rows of the ids its repeated sequences draw
    from (Trainer.trained_rows says why)? Every window a repeated sequence, every step's softmax over their ids, no
    weight decay, the LM head tied to the embedding."""
    s = settings
    copy_only = round(s.copy_fraction * s.batch_size) == s.batch_size and not s.copy_batch_softmax
    return copy_only and s.corpus_vocab_steps >= s.steps and s.weight_decay == 0 and config.tie_weights


class Trainer:
    """One model, its optimiser and schedule; `step(x, y)` trains on one batch and returns a StepLog."""

    def __init__(self, model: GPT, settings: TrainSettings, train_tokens: torch.Tensor | None = None):
        self.model, self.settings = model, settings
        self.corpus_vocab = None  # (sorted ids the training split uses, row of each id in that list)
        self.copy_vocab = None  # the same for the ids the repeated sequences draw from
        self.n_copy = round(settings.copy_fraction * settings.batch_size)
        if settings.corpus_vocab_steps and train_tokens is not None:
            size = model.config.vocab_size
            self.corpus_vocab = vocab_index(torch.unique(train_tokens).to(model.device), size)
            if self.n_copy and settings.copy_any_share:  # some repeated rows hold any training id
                self.copy_vocab = self.corpus_vocab
            elif self.n_copy:
                self.copy_vocab = vocab_index(
                    most_frequent_ids(train_tokens, settings.copy_vocab).to(model.device), size
                )
        # The token embedding's rows that this run trains, as their own tensor, when no other row can change: see
        # trained_rows. None: the optimiser holds the whole embedding.
        self.rows = None
        if self.trained_rows() is not None:
            self.rows = torch.nn.Parameter(model.wte.weight.detach()[self.copy_vocab[0]].clone())
        # the parameters the optimiser steps and the clipping measures: the model's, in its order, with the trained
        # rows in the whole embedding's place
        self.params = [self._trained(p) for p in model.parameters()]
        decay = [self._trained(p) for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith("wpe")]
        no_decay = [self._trained(p) for n, p in model.named_parameters() if p.dim() < 2 or n.startswith("wpe")]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=settings.lr,
            betas=(0.9, settings.beta2),
        )
        self.history: list[StepLog] = []
        self.started = time.perf_counter()

    def trained_rows(self) -> torch.Tensor | None:
        """The ids whose embedding rows are the only ones this run can change, or None where any row may change.

        A copy-only run (every window a repeated sequence of the copy ids) whose every step normalises over those
        ids (corpus_vocab_steps covers the run) gives the tied embedding a gradient on their rows alone: its inputs
        and its softmax's columns are those ids. AdamW leaves a row that never had a gradient where it was (both its
        moments stay zero) unless weight decay shrinks it, so without weight decay the run trains those rows and no
        other. Trainer.step then keeps them as their own tensor and steps them alone, then writes them back into the
        embedding: the same model, without the optimiser's and the gradient's passes over the whole vocabulary's
        rows, a large share of a small model's step (issue 60; `python -m benchmarks grow` times the Heads forming run
        that trains this way)."""
        if self.copy_vocab is not None and trains_copy_rows_only(self.settings, self.model.config):
            return self.copy_vocab[0]
        return None

    def _trained(self, p: torch.Tensor) -> torch.Tensor:
        """The tensor the optimiser steps for parameter p: p, or the trained rows in the whole embedding's place."""
        return self.rows if self.rows is not None and p is self.model.wte.weight else p

    def _rows_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """subset_lm_loss over the copy ids, through the trained rows (self.rows) for the embedding and the LM head:
        the same loss, and the gradient of those rows only."""
        _, index_of = self.copy_vocab
        xi, yi = index_of[x.to(self.model.device)], index_of[y.to(self.model.device)]
        if len(x) != self.settings.batch_size or bool((xi < 0).any() or (yi < 0).any()):
            raise ValueError(
                "this trainer trains the embedding rows of its copy ids only: every batch is batch_size repeated "
                "sequences of those ids (gptviz.training.train.batches)"
            )
        hidden = self.model.final_hidden_from(F.embedding(xi, self.rows))
        logits = hidden @ self.rows.t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), yi.reshape(-1))

    def step(self, x: torch.Tensor, y: torch.Tensor, val: torch.Tensor | None = None) -> StepLog:
        step = len(self.history)
        lr = lr_at(step, self.settings)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        full_vocab = step >= self.settings.corpus_vocab_steps or self.corpus_vocab is None
        if self.rows is not None:
            loss = self._rows_loss(x, y)
        elif not full_vocab:
            n_copy = self.n_copy if len(x) == self.settings.batch_size else 0
            copy_vocab = self.copy_vocab
            if n_copy and self.settings.copy_batch_softmax:
                seen = torch.unique(torch.cat([x[-n_copy:].flatten(), y[-n_copy:].flatten()]))
                copy_vocab = vocab_index(seen.to(self.model.device), self.model.config.vocab_size)
            loss = subset_lm_loss(self.model, x, y, *self.corpus_vocab, n_copy=n_copy, copy_vocab=copy_vocab)
        else:
            loss = lm_loss(self.model, x, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.settings.grad_clip or float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, clip))
        self.optimizer.step()
        if self.rows is not None:  # the model holds what it trained (its validation, snapshots and checkpoints read it)
            with torch.no_grad():
                self.model.wte.weight.index_copy_(0, self.copy_vocab[0], self.rows)
        last = step + 1 == self.settings.steps
        val_loss = None
        if val is not None and ((step + 1) % self.settings.eval_every == 0 or last or step == 0):
            val_loss = self.evaluate(val)
        log = StepLog(
            step + 1, lr, float(loss.detach()), grad_norm, val_loss, time.perf_counter() - self.started, full_vocab
        )
        self.history.append(log)
        return log

    @torch.no_grad()
    def evaluate(self, tokens: torch.Tensor) -> float:
        """Mean loss over fixed, evenly spaced validation windows (the same ones every time)."""
        self.model.eval()
        block = self.settings.block_size or self.model.config.n_ctx
        n = self.settings.eval_batches * self.settings.batch_size
        starts = torch.linspace(0, len(tokens) - block - 2, n).long()
        losses = []
        for chunk in starts.split(self.settings.batch_size):
            x = torch.stack([tokens[s : s + block] for s in chunk])
            y = torch.stack([tokens[s + 1 : s + block + 1] for s in chunk])
            losses.append(summed_lm_loss(self.model, x, y) / y.numel())
        return sum(losses) / len(losses)


@dataclass
class TrainResult:
    settings: dict
    config: dict
    history: list[dict] = field(default_factory=list)
    stopped_early: bool = False

    @property
    def final(self) -> dict:
        vals = [h for h in self.history if h["val_loss"] is not None]
        return {
            "step": self.history[-1]["step"],
            "train_loss": self.history[-1]["train_loss"],
            "val_loss": vals[-1]["val_loss"] if vals else None,
        }


def train_models(
    configs: dict[str, GPTConfig],
    settings: TrainSettings,
    tokens: torch.Tensor | Corpus,
    device: str = "cpu",
    on_step: Callable[[str, StepLog], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    init: str = "gpt2",
    start_states: dict[str, dict[str, torch.Tensor]] | None = None,
    measure: Callable[[GPT, torch.Tensor, torch.Tensor], dict[str, float]] | None = None,
    recorders: dict | None = None,
) -> tuple[dict[str, GPT], dict[str, TrainResult]]:
    """Train one model per config on the same batches (same seed, same init draws per config).
    `on_step(name, log)` is called after every step; `should_stop()` ends training cleanly.
    `start_states[name]`, when given, replaces that model's random init (continued training).
    `tokens`: a Corpus (its own training and held-out parts) or one tensor split by settings.val_fraction.
    `measure(model, train_tokens, val_tokens)`, when given, runs at every validation step and fills the
    StepLog's head fields (prev_token, induction, repeat_loss), so the history shows when the heads grow.
    `recorders[name]` (gptviz.training.snapshots.SnapshotRecorder), when given, snapshots that model's heads as it
    trains."""
    if isinstance(tokens, Corpus):
        train_tokens, val_tokens = tokens.train, tokens.val
    else:
        train_tokens, val_tokens = split(tokens, settings.val_fraction)
    models, trainers = {}, {}
    for name, cfg in configs.items():
        # same seed, so twins that differ only in wiring start from the same weights
        models[name] = GPT(cfg, init=init, seed=settings.seed).to(device)
        if start_states and name in start_states:
            models[name].load_state_dict({k: v.float() for k, v in start_states[name].items()})
        trainers[name] = Trainer(models[name], settings, train_tokens)
    block = settings.block_size or min(cfg.n_ctx for cfg in configs.values())
    if block > min(cfg.n_ctx for cfg in configs.values()):
        raise ValueError(f"block_size {block} exceeds the context length {min(c.n_ctx for c in configs.values())}")
    data = batches(
        train_tokens,
        settings.batch_size,
        block,
        torch.Generator().manual_seed(settings.seed),
        settings.copy_fraction,
        settings.copy_vocab,
        settings.copy_any_share,
    )
    stopped = False
    for _ in range(settings.steps):
        if should_stop is not None and should_stop():
            stopped = True
            break
        x, y = next(data)
        for name, trainer in trainers.items():
            started = time.perf_counter()
            log = trainer.step(x.to(device), y, val_tokens)
            recorder = (recorders or {}).get(name)
            if recorder is not None and recorder.observe(log.step, log.train_loss, time.perf_counter() - started):
                recorder.record(models[name], log.step, log.train_loss)
            if measure is not None and log.val_loss is not None:
                for key, value in measure(models[name], train_tokens, val_tokens).items():
                    setattr(log, key, value)
            if on_step is not None:
                on_step(name, log)
    results = {
        name: TrainResult(
            asdict(settings), configs[name].to_dict(), [asdict(h) for h in trainers[name].history], stopped
        )
        for name in configs
    }
    for model in models.values():
        model.eval()
    return models, results


def write_history(result: TrainResult, folder: Path) -> None:
    """Loss curves beside the checkpoint: history.csv and history.json."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "history.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(result.history[0]))
        writer.writeheader()
        writer.writerows(result.history)
    (folder / "history.json").write_text(
        json.dumps({"settings": result.settings, "final": result.final, "history": result.history}, indent=1)
    )


def format_eta(done: int, total: int, elapsed: float) -> str:
    if done == 0:
        return "?"
    left = elapsed / done * (total - done)
    return f"{int(left // 60)}m{int(left % 60):02d}s"
