"""Matching the heads of two models by what they do, not by their index.

Two separately trained models (the bundled pre- and post-norm twins) grow the same kinds of heads in different
places: the pre-norm twin's previous-token heads sit in layer 0, the post-norm twin's in layer 1. Comparing "layer 1,
head 0" of each compares unrelated heads. Here each head is described by its attention pattern on one probe both
models read (a random sequence repeated once, where previous-token, induction and first-token heads each draw their
own shape), and heads are paired one to one by the cosine similarity of those patterns.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class HeadMatch(NamedTuple):
    a: tuple[int, int]  # (layer, head) in the first model
    b: tuple[int, int]  # its partner in the second
    similarity: float  # cosine of the two heads' patterns on the probe, in [0, 1] (weights are >= 0)


def pattern_similarity(patterns_a: torch.Tensor, patterns_b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every head of A with every head of B, [La * Ha, Lb * Hb], from their patterns on the
    same tokens ([layers, heads, T, T] each; rows in layer-major order)."""
    if patterns_a.shape[-2:] != patterns_b.shape[-2:]:
        raise ValueError(
            f"the patterns must come from the same probe: {tuple(patterns_a.shape[-2:])} against "
            f"{tuple(patterns_b.shape[-2:])} tokens"
        )
    a = torch.nn.functional.normalize(patterns_a.float().flatten(0, 1).flatten(1), dim=1)
    b = torch.nn.functional.normalize(patterns_b.float().flatten(0, 1).flatten(1), dim=1)
    return a @ b.T


def match_heads(patterns_a: torch.Tensor, patterns_b: torch.Tensor) -> list[HeadMatch]:
    """Pair each head of A with a different head of B, most similar pairs first (greedy one-to-one assignment on
    pattern_similarity); heads left over when the models differ in size stay unmatched. Sorted by A's head."""
    sim = pattern_similarity(patterns_a, patterns_b)
    heads_a, heads_b = patterns_a.shape[1], patterns_b.shape[1]
    order = torch.argsort(sim.flatten(), descending=True).tolist()
    used_a, used_b, pairs = set(), set(), []
    for flat in order:
        i, j = divmod(flat, sim.shape[1])
        if i in used_a or j in used_b:
            continue
        used_a.add(i)
        used_b.add(j)
        pairs.append(HeadMatch(divmod(i, heads_a), divmod(j, heads_b), float(sim[i, j])))
        if len(pairs) == min(sim.shape):
            break
    return sorted(pairs, key=lambda m: m.a)
