"""What a training run costs before it starts: the memory it reserves (run_nbytes, from the models' sizes and the
step's activations) and the tokens it trains on (job_tokens, against the server's token budget)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.sizes import activation_nbytes, forward_nbytes
from ..model.params import total_params
from ..training.train import LOSS_ROWS

if TYPE_CHECKING:
    from .background_job import JobSpec

FLOAT32 = 4
# Resident memory a run holds beyond its tensors, as a share of its largest phase: the Heads forming run's RSS grew
# 3,514 MiB where torch's own records peaked at 3,247 MiB (8%), the allocator's pages around its 1.5 GiB logits
# (before its validation computed the LM head in chunks).
RUN_OVERHEAD_SHARE = 0.1


def job_nbytes(spec: "JobSpec") -> int:
    """What a run reserves before it starts: run_nbytes."""
    return run_nbytes(spec)


def _softmax_width(config, settings) -> int:
    """The logits' width in a training step: the whole vocabulary, unless every step normalises over the repeated
    sequences' `copy_vocab` ids only (every row a copy window and every step within corpus_vocab_steps)."""
    copy_only = settings.copy_fraction == 1.0 and settings.copy_vocab and settings.corpus_vocab_steps >= settings.steps
    return min(settings.copy_vocab, config.vocab_size) if copy_only else config.vocab_size


def run_nbytes(spec: "JobSpec") -> int:
    """A run at its peak, phase by phase: every model's weights, gradients and AdamW's two moments (they train side
    by side), beside the largest of one model's training step (what autograd keeps, with logits as wide as its
    softmax: gptviz.training.train.subset_lm_loss) and its validation pass (no gradients; the whole vocabulary's
    logits and their log-softmax for LOSS_ROWS positions at a time: Trainer.evaluate), and the fixed overhead of the
    process's allocator. The Heads forming page's run trains on 2,000 ids but validates on 50,257: its validation
    over the whole batch at once peaked 3,403 MiB above the baseline; in chunks the run peaks at 342 MiB (both
    wirings 506), reserved 522 (626) (tests/test_training_memory.py measures it)."""
    s = spec.settings
    block = s.block_size or min(c.n_ctx for c in spec.configs.values())
    held = sum(FLOAT32 * 4 * total_params(cfg) for cfg in spec.configs.values())
    phases = []
    for cfg in spec.configs.values():
        narrow = cfg.replace(vocab_size=_softmax_width(cfg, s))
        train = activation_nbytes(narrow, s.batch_size, block)
        validate = (2 * FLOAT32 * min(LOSS_ROWS, s.batch_size * block) * cfg.vocab_size  # a chunk's logits, twice
                    + forward_nbytes(cfg, block, s.batch_size, patterns=False, all_logits=False))
        phases.append(max(train, validate))
    return held + int((1 + RUN_OVERHEAD_SHARE) * max(phases))


def job_tokens(spec: "JobSpec") -> int:
    """Tokens a run trains on: steps x batch x block, for each model it trains."""
    s = spec.settings
    block = s.block_size or min(c.n_ctx for c in spec.configs.values())
    return s.steps * s.batch_size * block * len(spec.configs)
