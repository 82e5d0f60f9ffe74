"""Head detectors: previous-token, duplicate-token and induction scores on attention patterns, their chance
levels, and the ranking of heads by score.

Patterns are [layers, heads, query, key] (no batch axis) unless said otherwise.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..model.hooks import act_name, capture
from ..model.model import GPT


def previous_token_scores(patterns: torch.Tensor) -> torch.Tensor:
    """[layers, heads]: mean attention from each token to the one just before it (positions 1..T-1)."""
    return patterns.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def duplicate_token_scores(patterns: torch.Tensor, ids) -> torch.Tensor:
    """[layers, heads]: mean attention mass a token puts on earlier copies of itself, over the positions
    that have an earlier copy (0 where none has)."""
    ids = torch.as_tensor(list(ids))
    T = len(ids)
    same = (ids[:, None] == ids[None, :]) & torch.ones(T, T, dtype=torch.bool).tril(-1)
    has_copy = same.any(-1)
    if not has_copy.any():
        return torch.zeros(patterns.shape[:2])
    return _masked_row_mass(patterns, same)[..., has_copy].mean(-1)


def _after_earlier_copies(ids) -> torch.Tensor:
    """[T, T] bool: key k follows an earlier copy of query q's token (ids[k - 1] == ids[q], k - 1 < q, k <= q)."""
    ids = torch.as_tensor(list(ids))
    T = len(ids)
    follows = torch.zeros(T, T, dtype=torch.bool)
    if T > 1:
        follows[:, 1:] = (ids[:, None] == ids[None, :-1]) & torch.ones(T, T - 1, dtype=torch.bool).tril(-1)
    return follows


def prompt_induction_scores(patterns: torch.Tensor, ids) -> torch.Tensor:
    """[layers, heads]: induction on the prompt itself: the mean attention mass a token puts on the tokens that
    followed earlier copies of it, over the positions that have an earlier copy (0 where none has). A prompt that
    repeats a passage shows it; induction_scores measures it on a sequence made for it."""
    follows = _after_earlier_copies(ids)
    has_copy = follows.any(-1)
    if not has_copy.any():
        return torch.zeros(patterns.shape[:2])
    return _masked_row_mass(patterns, follows)[..., has_copy].mean(-1)


def _masked_row_mass(patterns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[..., T]: each row's weight on the keys `mask` [T, T] marks, one slice of the leading axis at a time, so the
    masked copy is a layer's, not the whole capture's (256 MiB for 12 x 12 heads at 682 tokens, issue 43)."""
    return torch.stack([(part * mask).sum(-1) for part in patterns.unbind(0)])


def prompt_induction_chance(ids) -> float:
    """Chance level of prompt_induction_scores: uniform attention puts (keys after earlier copies) / (q + 1)
    there, averaged over the queries that have an earlier copy (0 where none has)."""
    follows = _after_earlier_copies(ids)
    queries = [q for q in range(len(follows)) if follows[q].any()]
    return sum(int(follows[q].sum()) / (q + 1) for q in queries) / len(queries) if queries else 0.0


def uniform_attention_chance(queries) -> float:
    """What a head detector scores for a head that spreads every listed query evenly over its allowed keys
    (query q may attend to keys 0..q, so it puts 1/(q + 1) on any one of them): the chance level."""
    queries = list(queries)
    return sum(1 / (q + 1) for q in queries) / len(queries)


def previous_token_chance(T: int) -> float:
    """Chance level of the previous-token score on T tokens (queries 1..T-1)."""
    return uniform_attention_chance(range(1, T))


def duplicate_token_chance(ids) -> float:
    """Chance level of the duplicate-token score: uniform attention puts (earlier copies) / (q + 1) on the
    copies of query q's token, averaged over the queries that have one (0 where none has)."""
    ids = list(ids)
    shares = [ids[:q].count(t) / (q + 1) for q, t in enumerate(ids) if t in ids[:q]]
    return sum(shares) / len(shares) if shares else 0.0


def induction_sequence(
    vocab_size: int,
    length: int = 50,
    seed: int = 0,
    low: int = 1000,
    high: int = 20000,
    ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Random tokens repeated once: [r_1..r_n, r_1..r_n]. Drawn from `ids` when given (a trained model's
    training vocabulary: ids it never saw have untrained embeddings it cannot tell apart), else from
    [low, high), a common range of real words and pieces rather than rare bytes."""
    g = torch.Generator().manual_seed(seed)
    if ids is not None:
        half = torch.as_tensor(ids)[torch.randint(0, len(ids), (length,), generator=g)]
    else:
        high = min(high, vocab_size)
        if low >= high:  # a vocabulary smaller than the common range: every id (not one id repeated)
            low = 0
        half = torch.randint(low, high, (length,), generator=g)
    return torch.cat([half, half])


def induction_queries(length: int) -> range:
    """The queries an induction score averages over: every token of the second half (positions length..
    2 * length - 1), each of which has an earlier copy at position q - length."""
    return range(length, 2 * length)


def induction_scores_from(patterns: torch.Tensor, length: int) -> torch.Tensor:
    """[layers, heads]: on a sequence repeated once (halves of `length`), the mean attention from each
    token of the second half to the token after its earlier copy (query q, key q - length + 1). The
    diagonal at that offset starts one query earlier, at the last token of the first half, which has no
    earlier copy; it is left out."""
    return patterns.diagonal(offset=1 - length, dim1=-2, dim2=-1)[..., 1:].mean(-1)


def induction_chance(length: int) -> float:
    """Chance level of the induction score on a sequence of `length` repeated once."""
    return uniform_attention_chance(induction_queries(length))


@torch.no_grad()
def induction_scores(
    model: GPT, length: int | None = None, seed: int = 0, ids: torch.Tensor | None = None
) -> torch.Tensor:
    """[layers, heads] induction scores on a repeated random token sequence that fits the context."""
    return induction_test(model, length, seed, ids).scores


class InductionTest(NamedTuple):
    scores: torch.Tensor  # [layers, heads]
    repeat_loss: float  # nats/token on the second half's predictable tokens
    length: int
    chance: float


@torch.no_grad()
def induction_test(
    model: GPT, length: int | None = None, seed: int = 0, ids: torch.Tensor | None = None
) -> InductionTest:
    """Induction scores and the loss on the repeated half: after r_1..r_n r_1, each next token of the
    second half is the one that followed its earlier copy (positions length..2 * length - 2 predict them)."""
    length = length or min(50, model.config.n_ctx // 2)
    if 2 * length > model.config.n_ctx:
        raise ValueError(f"a repeated sequence of {2 * length} tokens does not fit n_ctx={model.config.n_ctx}")
    seq = induction_sequence(model.config.vocab_size, length, seed, ids=ids)
    names = [act_name("pattern", i) for i in range(model.config.n_layers)]
    logits, cache = capture(model, seq[None], names)
    log_probs = F.log_softmax(logits[0, length:-1].float(), -1)
    loss = -log_probs.gather(-1, seq[length + 1 :, None]).mean()
    return InductionTest(
        induction_scores_from(cache.patterns()[:, 0], length), float(loss), length, induction_chance(length)
    )


def head_ranking(scores: torch.Tensor, top: int = 3) -> list[tuple[int, int, float]]:
    """The `top` heads by score as (layer, head, score)."""
    flat = scores.flatten()
    values, idx = flat.topk(min(top, flat.numel()))
    n_heads = scores.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads, float(v)) for v, i in zip(values, idx, strict=True)]
