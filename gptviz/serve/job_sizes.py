"""What a training run costs before it starts: the memory it reserves (run_nbytes, from the models' sizes and the
step's activations) and the tokens it trains on (job_tokens, against the server's token budget)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.params import total_params
from ..model.sizes import activation_nbytes, forward_nbytes
from ..training.train import LOSS_ROWS, trains_copy_rows_only

if TYPE_CHECKING:
    from .background_job import JobSpec

FLOAT32 = 4
# Resident memory a run holds beyond its tensors, as a share of its largest phase: the heap's pages around them in the
# run's own thread (its arena), the page's figures drawn beside it. The Heads forming run as the server runs it, its
# freed memory given back after each step (background_job.Job._on_step), peaked at about what a share of 0.1 reserved
# and was still creeping up, hence a quarter (issue 57; `python -m benchmarks grow -- --memory` measures the peak
# against the reservation). Without the trimming it grew faster still.
RUN_OVERHEAD_SHARE = 0.25
# ...and a part that does not shrink with the run's shapes (the thread's arena and its OpenMP workers, the snapshot
# recorder, the page's figures). With the page's run at windows of 64 (issue 60) its activations shrank, and the share
# alone reserved less than the run grew by, for every wiring (tests/serve/test_training_memory.py failed; `python -m
# benchmarks grow -- --memory` gives the peaks against this).
RUN_FIXED_OVERHEAD = 192 * 2**20


def job_nbytes(spec: JobSpec) -> int:
    """What a run reserves before it starts: run_nbytes."""
    return run_nbytes(spec)


def _softmax_width(config, settings) -> int:
    """The logits' width in a training step: the whole vocabulary, unless every step normalises over the repeated
    sequences' `copy_vocab` ids only (every row a copy window and every step within corpus_vocab_steps)."""
    copy_only = settings.copy_fraction == 1.0 and settings.copy_vocab and settings.corpus_vocab_steps >= settings.steps
    return min(settings.copy_vocab, config.vocab_size) if copy_only else config.vocab_size


def _held_nbytes(config, settings) -> int:
    """One model's weights, and the gradients and AdamW's two moments of what its optimiser steps: every parameter, or,
    where the run trains its copy ids' embedding rows alone (gptviz.training.train.Trainer.trained_rows), those rows
    (a copy of them beside the weights) in the whole embedding's place."""
    params = total_params(config)
    if not (trains_copy_rows_only(settings, config) and settings.copy_vocab and not settings.copy_any_share):
        return FLOAT32 * 4 * params  # (copy_any_share's rows are every training id: not known before it starts)
    rows = min(settings.copy_vocab, config.vocab_size) * config.d_model
    stepped = params - config.vocab_size * config.d_model + rows
    return FLOAT32 * (params + rows + 3 * stepped)


def run_nbytes(spec: JobSpec) -> int:
    """A run at its peak, phase by phase: every model's weights, gradients and AdamW's two moments (_held_nbytes; they
    train side by side), beside the largest of one model's training step (what autograd keeps, with logits as wide as
    its softmax: gptviz.training.train.subset_lm_loss) and its validation pass (no gradients; the whole vocabulary's
    logits and their log-softmax for LOSS_ROWS positions at a time: Trainer.evaluate), and the overhead of the process's
    allocator (a share of the largest phase, and a fixed part: RUN_FIXED_OVERHEAD). The Heads forming page's run trains
    on its copy ids but validates on 50,257: its validation over the whole batch at once peaked gigabytes above the
    baseline; in chunks, as the server runs it (its own thread, the page drawn beside it, freed memory given back after
    each step), a few hundred MiB, within what this reserves (tests/serve/test_training_memory.py and `python -m
    benchmarks grow -- --memory` measure it)."""
    s = spec.settings
    block = s.block_size or min(c.n_ctx for c in spec.configs.values())
    held = sum(_held_nbytes(cfg, s) for cfg in spec.configs.values())
    phases = []
    for cfg in spec.configs.values():
        narrow = cfg.replace(vocab_size=_softmax_width(cfg, s))
        train = activation_nbytes(narrow, s.batch_size, block)
        validate = (
            2 * FLOAT32 * min(LOSS_ROWS, s.batch_size * block) * cfg.vocab_size  # a chunk's logits, twice
            + forward_nbytes(cfg, block, s.batch_size, patterns=False, all_logits=False)
        )
        phases.append(max(train, validate))
    return held + int((1 + RUN_OVERHEAD_SHARE) * max(phases)) + RUN_FIXED_OVERHEAD


def job_tokens(spec: JobSpec) -> int:
    """Tokens a run trains on: steps x batch x block, for each model it trains."""
    s = spec.settings
    block = s.block_size or min(c.n_ctx for c in spec.configs.values())
    return s.steps * s.batch_size * block * len(spec.configs)
