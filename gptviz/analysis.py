"""Derived views of a capture: head detectors, baselines and other measurements pages and scripts share.

Patterns are [layers, heads, query, key] (no batch axis) unless said otherwise.
"""
from __future__ import annotations

import math

import torch

from .hooks import capture
from .model import GPT


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
    mass = (patterns * same).sum(-1)  # [L, H, T]
    return mass[..., has_copy].mean(-1)


def induction_sequence(vocab_size: int, length: int = 50, seed: int = 0, low: int = 1000,
                       high: int = 20000) -> torch.Tensor:
    """Random tokens repeated once: [r_1..r_n, r_1..r_n] (ids from a common range so they are real words
    and pieces rather than rare bytes)."""
    g = torch.Generator().manual_seed(seed)
    high = min(high, vocab_size)
    low = min(low, high - 1)
    half = torch.randint(low, high, (length,), generator=g)
    return torch.cat([half, half])


def induction_scores_from(patterns: torch.Tensor, length: int) -> torch.Tensor:
    """[layers, heads]: on a sequence repeated once (halves of `length`), the mean attention from each
    token of the second half to the token after its earlier copy."""
    return patterns.diagonal(offset=1 - length, dim1=-2, dim2=-1).mean(-1)


@torch.no_grad()
def induction_scores(model: GPT, length: int | None = None, seed: int = 0) -> torch.Tensor:
    """[layers, heads] induction scores on a repeated random token sequence that fits the context."""
    length = length or min(50, model.config.n_ctx // 2)
    if 2 * length > model.config.n_ctx:
        raise ValueError(f"a repeated sequence of {2 * length} tokens does not fit n_ctx={model.config.n_ctx}")
    ids = induction_sequence(model.config.vocab_size, length, seed)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.config.n_layers)]
    _, cache = capture(model, ids[None], names)
    return induction_scores_from(cache.patterns()[:, 0], length)


def head_ranking(scores: torch.Tensor, top: int = 3) -> list[tuple[int, int, float]]:
    """The `top` heads by score as (layer, head, score)."""
    flat = scores.flatten()
    values, idx = flat.topk(min(top, flat.numel()))
    n_heads = scores.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads, float(v)) for v, i in zip(values, idx)]


def bigram_baseline(train: torch.Tensor, val: torch.Tensor, vocab_size: int,
                    lambdas=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95)) -> dict:
    """Cross-entropy (nats/token) on `val` of an interpolated bigram/unigram model counted on `train`:
    p(b|a) = lam * c(a,b)/c(a) + (1 - lam) * p_uni(b), with add-one smoothing on the unigram. lam is picked
    on `val` itself, which flatters the baseline (a stricter bar for the models it is compared with)."""
    train, val = train.long(), val.long()
    uni = torch.bincount(train, minlength=vocab_size).double() + 1.0
    p_uni = uni / uni.sum()
    pair = train[:-1] * vocab_size + train[1:]
    keys, counts = torch.unique(pair, return_counts=True)
    ctx = torch.bincount(train[:-1], minlength=vocab_size).double()
    a, b = val[:-1], val[1:]
    q = a * vocab_size + b
    pos = torch.searchsorted(keys, q).clamp(max=len(keys) - 1)
    c_ab = torch.where(keys[pos] == q, counts[pos].double(), torch.zeros_like(q, dtype=torch.double))
    c_a = ctx[a]
    p_bigram = torch.where(c_a > 0, c_ab / c_a.clamp(min=1), torch.zeros_like(c_ab))
    best = None
    for lam in lambdas:
        lam_eff = torch.where(c_a > 0, torch.full_like(c_a, lam), torch.zeros_like(c_a))
        nll = -torch.log(lam_eff * p_bigram + (1 - lam_eff) * p_uni[b]).mean().item()
        if best is None or nll < best["nats"]:
            best = {"nats": nll, "lambda": lam}
    best["unigram_nats"] = -torch.log(p_uni[b]).mean().item()
    best["perplexity"] = math.exp(best["nats"])
    return best
