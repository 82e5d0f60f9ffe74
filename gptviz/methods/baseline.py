"""A count-based baseline the trained models are compared with: an interpolated bigram/unigram model."""

from __future__ import annotations

import math

import torch


def bigram_baseline(
    train: torch.Tensor, val: torch.Tensor, vocab_size: int, lambdas=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
) -> dict:
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
