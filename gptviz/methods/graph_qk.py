"""Why does this head attend here: the QK decomposition of one attention score (issue 58).

With the norm scales frozen at their values on the prompt, the query at position i is a sum over sources written at
i (the embeddings, every earlier head through its slice of the out-projection, every earlier attention bias and MLP
output, the norms' betas) plus the query bias, and the key at j likewise at j; the pre-softmax score
q_i . k_j / sqrt(d_head) (before the mask) is then the sum over pairs of `q_source . k_source / sqrt(d_head)`.
Sources are named as in direct logit attribution: `embeddings`, `L{l}H{h}`, `L{l} attn bias`, `L{l} MLP` (its output
bias included), `norm bias` (pre-norm: the beta of the norm this head reads; post-norm: every earlier norm's beta as
it reaches this head), and `query bias` / `key bias`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..model.unit_id import head_id
from .graph_frozen import FrozenModel, has_betas

NORM_BIAS = "norm bias"


class QKDecomposition(NamedTuple):
    layer: int
    head: int
    query: int
    key: int
    score: float  # the real pre-softmax score q_i . k_j / sqrt(d_head), before the mask
    query_sources: list[str]
    key_sources: list[str]
    terms: torch.Tensor  # [query sources, key sources]; terms.sum() equals score

    def top_terms(self, n: int = 5) -> list[tuple[str, str, float]]:
        """The `n` largest terms by size, as (query source, key source, term)."""
        flat = self.terms.flatten()
        order = flat.abs().argsort(descending=True)[:n].tolist()
        k = len(self.key_sources)
        return [(self.query_sources[i // k], self.key_sources[i % k], float(flat[i])) for i in order]


def check_cell(config, T: int, layer: int, head: int, query: int, key: int) -> None:
    """ValueError, in words, for a cell the model does not have or the causal mask hides."""
    for name, value, size in (
        ("layer", layer, config.n_layers),
        ("head", head, config.n_heads),
        ("query", query, T),
        ("key", key, T),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
            raise ValueError(
                f"{name} {value!r} is out of range: the {'prompt' if name in ('query', 'key') else 'model'}"
                f" has {size} {'positions' if name in ('query', 'key') else name + 's'} (0..{size - 1})"
            )
    if key > query:
        raise ValueError(
            f"key {key} is above the diagonal: query {query} cannot attend to a later position "
            "(the causal mask hides it)"
        )


def qk_decomposition(model, ids, layer: int, head: int, query: int, key: int) -> QKDecomposition:
    """The score of (layer, head, query, key) on `ids` split into query-source x key-source terms (see the module)."""
    T = int(torch.as_tensor(ids).numel())
    if T == 0:
        raise ValueError("no tokens: the prompt is empty")
    check_cell(model.config, T, layer, head, query, key)
    fm = FrozenModel(model, ids)
    names, vectors = _sources_at(fm, layer, [query, key])  # vectors [sources, 2, d]
    w = fm.layers[layer]
    q_parts = vectors[:, 0] @ w.Wq[head].T  # [sources, d_head]
    k_parts = vectors[:, 1] @ w.Wk[head].T
    query_names, key_names = list(names), list(names)
    if w.bq is not None:
        q_parts = torch.cat([q_parts, w.bq[head][None]])
        k_parts = torch.cat([k_parts, w.bk[head][None]])
        query_names.append("query bias")
        key_names.append("key bias")
    terms = q_parts @ k_parts.T / math.sqrt(fm.config.d_head)
    x = fm.attn_in[layer]  # what the attention read, as it was
    q = x[query] @ w.Wq[head].T + (w.bq[head] if w.bq is not None else 0)
    k = x[key] @ w.Wk[head].T + (w.bk[head] if w.bk is not None else 0)
    score = float(q @ k) / math.sqrt(fm.config.d_head)
    return QKDecomposition(layer, head, query, key, score, query_names, key_names, terms.cpu())


def _sources_at(fm: FrozenModel, layer: int, positions: list[int]) -> tuple[list[str], torch.Tensor]:
    """Every source of the stream that `layer`'s attention reads, at `positions`, carried through the frozen norms on
    the way (post-norm: each later block norm; pre-norm: the reader's own norm), and the norms' betas together as
    `norm bias`. Returns the names and [sources, len(positions), d_model]."""
    cfg, d = fm.config, fm.config.d_model
    sources: dict[str, torch.Tensor] = {}
    if has_betas(cfg):
        sources[NORM_BIAS] = torch.zeros(len(positions), d, device=fm.emb.device)
    for step in fm.steps:
        if step.op == "read" and step.what == "attn" and step.layer == layer:
            break
        if step.op == "norm":
            norm = fm.norms[step.point]
            sources = {name: norm.linear(v, positions) for name, v in sources.items()}
        elif step.op == "write":
            _add_written(fm, step.point, positions, sources)
    if cfg.norm == "pre":
        norm = fm.norms[("ln_1", layer)]
        sources = {name: norm.linear(v, positions) for name, v in sources.items()}
        if norm.beta is not None:
            sources[NORM_BIAS] = sources[NORM_BIAS] + norm.beta
    names = [n for n in sources if n != NORM_BIAS] + ([NORM_BIAS] if NORM_BIAS in sources else [])
    return names, torch.stack([sources[n] for n in names])


def _add_written(fm: FrozenModel, point, positions: list[int], sources: dict) -> None:
    what, layer = point
    if what == "embed":
        sources["embeddings"] = fm.emb[positions]
    elif what == "attn":
        w = fm.layers[layer]
        heads = torch.einsum("phk,hkd->hpd", fm.z[layer][positions], w.Wo)
        for h in range(fm.config.n_heads):
            sources[head_id(layer, h)] = heads[h]
        sources[f"L{layer} attn bias"] = w.bo.expand(len(positions), -1)
    elif what == "mlp":
        sources[f"L{layer} MLP"] = fm.written[point][positions]
    else:  # a post-norm block norm's beta, written into the stream
        sources[NORM_BIAS] = sources[NORM_BIAS] + fm.written[point][positions]
