"""Embedding geometry: cosine similarities, principal components, and a fixed sample of the vocabulary."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


def cosine_similarity_matrix(x: torch.Tensor) -> torch.Tensor:
    """[n, n] cosine similarity between the rows of x [n, d] (0 for a zero row)."""
    unit = F.normalize(x.double(), dim=-1)
    return (unit @ unit.T).float()


class PCA(NamedTuple):
    coords: torch.Tensor  # [n, k] the rows of x projected on the components
    explained_variance_ratio: torch.Tensor  # [k] share of the total variance, largest first
    components: torch.Tensor  # [k, d] unit directions
    mean: torch.Tensor  # [d] subtracted before projecting


def pca(x: torch.Tensor, k: int = 2) -> PCA:
    """Principal components of the rows of x [n, d], by SVD of the centred data (in float64)."""
    x = x.double()
    mean = x.mean(0)
    centred = x - mean
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    k = min(k, vh.shape[0])
    total = s.pow(2).sum()
    ratio = s[:k].pow(2) / total if total > 0 else torch.zeros(k, dtype=x.dtype)
    components = vh[:k]
    return PCA((centred @ components.T).float(), ratio.float(), components.float(), mean.float())


def vocab_sample(
    vocab_size: int, n: int = 2000, seed: int = 0, low: int = 0, ids: torch.Tensor | None = None
) -> torch.Tensor:
    """n distinct token ids drawn uniformly from [low, vocab_size), or from `ids` when given (for a trained
    model, the ids its training text used), sorted (a fixed sample per seed)."""
    g = torch.Generator().manual_seed(seed)
    if ids is not None:
        ids = torch.unique(torch.as_tensor(ids))
        return ids[torch.randperm(len(ids), generator=g)[: min(n, len(ids))]].sort().values
    low = min(low, vocab_size - 1)
    n = min(n, vocab_size - low)
    return (torch.randperm(vocab_size - low, generator=g)[:n] + low).sort().values
