"""Warmup, the practical claim of Xiong et al. (2020): post-norm needs a learning-rate warmup, pre-norm does not.

One scenario: a deep and narrow model trained from the same initial weights on the same batches three ways
(post-norm without warmup, post-norm with warmup, pre-norm without warmup), for several initial-weight seeds, with
the loss and each layer's FFN gradient norm recorded at every step. `outcome` reads the result: each arm's loss
over the last steps as mean ± sd over the seeds, and whether the claim shows, by the thresholds it states.

Runs are stepped in lockstep (every arm and seed takes step t before any takes t + 1), so a run stopped early still
compares the arms at the same step. The training softmax is over the ids the training text uses (the Train page's
cheaper loss, TrainSettings.corpus_vocab_steps), the same for every arm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..model.config import PRESETS, GPTConfig
from ..model.model import GPT
from .train import Trainer, TrainSettings, batches, split

ARMS = {
    "post-norm, no warmup": ("post", False),
    "post-norm, warmup": ("post", True),
    "pre-norm, no warmup": ("pre", False),
}
MIN_EFFECT = 0.05  # nats: a smaller gap between post-norm's arms is not read as needing warmup
LAST = 10  # the outcome averages each run's loss over its last LAST steps (one batch's loss is noisy)


@dataclass(frozen=True)
class Scenario:
    """Defaults: the setting the first warmup protocol (docs/benchmarks-history.md, "Protocol") fixed before its runs,
    at lr 3e-3 (the first whose verdict, by that protocol's rule, said the claim shows; by the second protocol's
    stricter rule no setting tried shows it, and that protocol keeps this one). Every setting's runs are reported
    there."""

    layers: int = 12
    width: int = 64
    heads: int = 4
    lr: float = 3e-3
    warmup: int = 60
    steps: int = 300
    batch_size: int = 8
    block: int = 32
    seeds: int = 3
    init: str = "xavier"
    beta2: float = 0.98  # AdamW's second-moment decay, as in Xiong et al. (2020); the Trainer's default is 0.95

    def __post_init__(self):
        for name in ("layers", "width", "heads", "steps", "batch_size", "block", "seeds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not 0 < self.warmup < self.steps:
            raise ValueError(f"warmup must be between 1 and steps - 1 ({self.steps - 1}), got {self.warmup}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if not 0 <= self.beta2 < 1:
            raise ValueError(f"beta2 must be in [0, 1), got {self.beta2!r}")

    def config(self, norm: str) -> GPTConfig:
        return PRESETS["tiny"].replace(
            n_layers=self.layers,
            d_model=self.width,
            n_heads=self.heads,
            n_ctx=self.block,
            norm=norm,
            dropout=0.0,
            name=f"warmup-{self.layers}L-d{self.width}-{norm}",
        )

    def settings(self, warmup: bool, seed: int) -> TrainSettings:
        """No clipping (a spike goes through whole) and no weight decay: only the schedule differs between arms."""
        return TrainSettings(
            steps=self.steps,
            batch_size=self.batch_size,
            block_size=self.block,
            lr=self.lr,
            warmup=self.warmup if warmup else 0,
            grad_clip=0.0,
            weight_decay=0.0,
            corpus_vocab_steps=self.steps,
            seed=seed,
            eval_every=self.steps,
            beta2=self.beta2,
        )

    def run_names(self) -> list[str]:
        return [run_name(arm, seed) for seed in range(self.seeds) for arm in ARMS]

    @property
    def label(self) -> str:
        return (
            f"warmup scenario: {self.layers}L d{self.width}, lr {self.lr:g}, warmup {self.warmup} of "
            f"{self.steps} steps, {self.seeds} seeds, {self.init} init, Adam betas (0.9, {self.beta2:g})"
        )


# The scenario the Train page offers (a test may swap in a smaller one).
PAGE_SCENARIO = Scenario()


def frequency_baseline(tokens: torch.Tensor) -> float:
    """The training split's unigram entropy (nats/token): the loss of a model that knows only how often each token
    comes, the plateau a run reaches first. A reference beside the outcome, not part of its rule."""
    counts = torch.unique(split(tokens, 0.1)[0], return_counts=True)[1].double()
    p = counts / counts.sum()
    return float(-(p * p.log()).sum())


def baseline_line(out: Outcome, baseline: float) -> str:
    """Which arms ended below the frequency-only loss, read off the numbers."""
    # the arm names hold commas, so a list of them would not read
    words = {
        "post-norm, no warmup": "post-norm without warmup",
        "post-norm, warmup": "post-norm with warmup",
        "pre-norm, no warmup": "pre-norm without warmup",
    }
    below = [words[arm] for arm, a in out.arms.items() if a.mean < baseline]
    rest = [words[arm] for arm, a in out.arms.items() if a.mean >= baseline]
    parts = [
        f"below it: {' and '.join(below)}" if below else "no arm ended below it",
        f"at or above it: {' and '.join(rest)}" if rest else "",
    ]
    return (
        f"A model that knows only how often each token comes scores {baseline:.3f} nats on this text; "
        + "; ".join(p for p in parts if p)
        + "."
    )


def run_name(arm: str, seed: int) -> str:
    return f"{arm} · seed {seed}"


def split_name(name: str) -> tuple[str, int]:
    arm, seed = name.rsplit(" · seed ", 1)
    return arm, int(seed)


def ffn_grad_per_layer(model: GPT) -> list[float]:
    """The norm of each layer's FFN gradient (W^1 and W^2 together) as the last backward pass left it."""
    out = []
    for block in model.blocks:
        sq = sum(
            float(p.grad.double().pow(2).sum())
            for p in (block.mlp.c_fc.weight, block.mlp.c_proj.weight)
            if p.grad is not None
        )
        out.append(sq**0.5)
    return out


def compact(model: GPT, vocab: torch.Tensor) -> GPT:
    """`model` with its token embedding and LM head cut to the rows of the sorted ids `vocab`, renumbered 0, 1, ...
    With the softmax over `vocab` and no weight decay the other rows never get a gradient and AdamW leaves them as
    they are, so training the cut model is training the whole one, minus the update of ~39,000 idle rows."""
    small = GPT(model.config.replace(vocab_size=len(vocab)), init="empty")
    state = model.state_dict()
    for key in ("wte.weight", "lm_head.weight"):
        state[key] = state[key][vocab]
    small.load_state_dict(state)
    return small


def run_scenario(
    s: Scenario,
    tokens: torch.Tensor,
    on_step: Callable[[str, dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    cut_vocab: bool = True,
) -> dict[str, list[dict]]:
    """Every arm for every seed, in lockstep on the same batches: {run name: [step records]}. A record holds step,
    lr, train_loss, grad_norm (whole model) and ffn_grad (per layer). `cut_vocab`: train `compact` models on the
    renumbered ids (the same losses, tested), drawn from the full model's weights so a seed means the same weights."""
    train_tokens, _ = split(tokens, 0.1)
    vocab = torch.unique(train_tokens)
    if cut_vocab:
        train_tokens = torch.searchsorted(vocab, train_tokens)  # each id's row in vocab
    trainers = {}
    for seed in range(s.seeds):
        for arm, (norm, warm) in ARMS.items():
            model = GPT(s.config(norm), init=s.init, seed=seed)  # the same weights for every arm of a seed
            if cut_vocab:
                model = compact(model, vocab)
            trainers[run_name(arm, seed)] = Trainer(model, s.settings(warm, seed), train_tokens)
    data = batches(train_tokens, s.batch_size, s.block, torch.Generator().manual_seed(0))
    logs: dict[str, list[dict]] = {name: [] for name in trainers}
    for _ in range(s.steps):
        if should_stop is not None and should_stop():
            break
        x, y = next(data)
        for name, trainer in trainers.items():
            log = trainer.step(x, y)
            record = {
                "step": log.step,
                "lr": log.lr,
                "train_loss": log.train_loss,
                "grad_norm": log.grad_norm,
                "val_loss": None,
                "ffn_grad": ffn_grad_per_layer(trainer.model),
            }
            logs[name].append(record)
            if on_step is not None:
                on_step(name, record)
    return logs


@dataclass
class ArmOutcome:
    arm: str
    mean: float  # loss over the last LAST steps, averaged, then mean over seeds
    sd: float  # sd over seeds
    seeds: int


@dataclass
class Outcome:
    step: int  # the last step every run reached
    arms: dict[str, ArmOutcome]
    post_needs_warmup: bool  # post-norm without warmup above with warmup by more than both sds together
    pre_fine_without: bool  # pre-norm without warmup no worse than post-norm with warmup, within that margin
    sentence: str  # the three arms' numbers
    verdict: str  # what they show by `rule`, with the differences and margins it compared
    rule: str


def loss_matrix(logs: dict[str, list[dict]], arm: str, upto: int) -> np.ndarray:
    """[seeds, upto] training losses of one arm."""
    rows = [
        [r["train_loss"] for r in records[:upto]]
        for name, records in sorted(logs.items())
        if split_name(name)[0] == arm
    ]
    return np.array(rows, float)


def outcome(logs: dict[str, list[dict]], baseline: float) -> Outcome | None:
    """What the runs show, from their losses and the frequency-only loss `baseline` (frequency_baseline: what a model
    that knows only how often each token comes scores); None before every run has LAST steps."""
    step = min((len(r) for r in logs.values()), default=0)
    if step < LAST:
        return None
    arms = {}
    for arm in ARMS:
        tail = loss_matrix(logs, arm, step)[:, step - LAST : step].mean(1)
        arms[arm] = ArmOutcome(arm, float(tail.mean()), float(tail.std(ddof=1)) if len(tail) > 1 else 0.0, len(tail))
    cold, warm, pre = arms["post-norm, no warmup"], arms["post-norm, warmup"], arms["pre-norm, no warmup"]
    # the claim is that warmup lets post-norm train: with warmup it must leave the frequency-only plateau, and the
    # gap must exceed both the seeds' spread and a minimum effect (docs/benchmarks-history.md, "A second protocol")
    needs = warm.mean < baseline and cold.mean - warm.mean > max(cold.sd + warm.sd, MIN_EFFECT)
    fine = pre.mean - warm.mean <= pre.sd + warm.sd
    sentence = (
        f"Loss over steps {step - LAST + 1}–{step}, mean ± sd over {cold.seeds} seeds: post-norm without "
        f"warmup {cold.mean:.3f} ± {cold.sd:.3f}; with warmup {warm.mean:.3f} ± {warm.sd:.3f}; pre-norm "
        f"without warmup {pre.mean:.3f} ± {pre.sd:.3f}."
    )
    rule = (
        f"post-norm needs warmup when, with warmup, it ends below the frequency-only loss and, without it, "
        f"higher by more than both the two sds together and {MIN_EFFECT} nats; pre-norm does fine without when "
        "its loss is no more than post-norm-with-warmup's plus the two sds together; the claim shows when both "
        "hold"
    )
    return Outcome(step, arms, needs, fine, sentence, verdict_of(cold, warm, pre, needs, fine, baseline), rule)


def _compared(diff: float, margin: float, named: str | None = None) -> str:
    """A loss difference in words, against the margin the rule compares a higher loss with (`named`: that margin in
    words, the sds' sum by default)."""
    if named is None:
        named = f"the sds' sum {margin:.3f}" if diff <= 0 else f"the sds' sum of {margin:.3f}"
    if diff <= 0:
        return f"{-diff:.3f} lower; {named}"
    return f"{diff:.3f} higher, {'beyond' if diff > margin else 'within'} {named}"


def verdict_of(cold: ArmOutcome, warm: ArmOutcome, pre: ArmOutcome, needs: bool, fine: bool, baseline: float) -> str:
    """The outcome in words, every clause read off the numbers it names."""
    if warm.mean >= baseline:
        without = "either" if cold.mean >= baseline else "while without warmup it did"
        post_part = (
            f"Post-norm did not clearly need warmup here: with warmup it did not leave the frequency-only "
            f"loss {without} ({warm.mean:.3f} against {baseline:.3f}; without warmup {cold.mean:.3f})"
        )
    else:
        sds, margin = cold.sd + warm.sd, max(cold.sd + warm.sd, MIN_EFFECT)
        named = f"the sds' sum of {sds:.3f}" if sds >= MIN_EFFECT else f"the {MIN_EFFECT}-nat minimum effect"
        post_part = (
            f"Post-norm {'needed' if needs else 'did not clearly need'} warmup here (without it: "
            f"{_compared(cold.mean - warm.mean, margin, named)})"
        )
    pre_part = (
        f"pre-norm without warmup {'did as well as' if fine else 'did worse than'} post-norm with it "
        f"({_compared(pre.mean - warm.mean, pre.sd + warm.sd)})"
    )
    claim = "shows" if needs and fine else "does not show"
    return f"{post_part}; {pre_part}. Xiong et al.'s warmup claim {claim} in these runs."


def verdict_so_far(out: Outcome, finished: bool, warmup_steps: int) -> str:
    """The verdict once it can be read: not while the runs go on (the warmup arm is still behind on purpose), nor
    for runs stopped before the warmup ended."""
    if not finished:
        return "The verdict comes when the runs end."
    if out.step <= warmup_steps:
        return f"Stopped at step {out.step}, within the {warmup_steps} warmup steps: no verdict."
    return out.verdict


def mean_band(logs: dict[str, list[dict]], arm: str, key: str = "train_loss") -> tuple[np.ndarray, np.ndarray]:
    """Per step: an arm's mean and sd over seeds of `key` (train_loss), up to the last step every seed reached."""
    upto = min(len(r) for n, r in logs.items() if split_name(n)[0] == arm)
    values = (
        loss_matrix(logs, arm, upto)
        if key == "train_loss"
        else np.array(
            [[r[key] for r in records[:upto]] for n, records in sorted(logs.items()) if split_name(n)[0] == arm]
        )
    )
    sd = values.std(0, ddof=1) if values.shape[0] > 1 else np.zeros(upto)
    return values.mean(0), sd


def ffn_grad_grid(logs: dict[str, list[dict]], arm: str) -> np.ndarray:
    """[layers, steps]: each layer's FFN gradient norm per step, mean over the arm's seeds."""
    upto = min(len(r) for n, r in logs.items() if split_name(n)[0] == arm)
    grids = [
        np.array([r["ffn_grad"] for r in records[:upto]]).T
        for n, records in sorted(logs.items())
        if split_name(n)[0] == arm
    ]
    return np.mean(grids, 0)


def timed_run(s: Scenario, tokens: torch.Tensor) -> tuple[dict[str, list[dict]], float]:
    started = time.perf_counter()
    return run_scenario(s, tokens), time.perf_counter() - started
