"""The whole forward pass at one position, as plain numbers: how big the residual stream is after every step, what
each block's attention looks at most, what the logit lens reads off each block's output, and the next-token
probabilities (the Overview page draws them). Reads one prompt of a capture ([T, ...] tensors: ActivationCache.prompt(0)
of gptviz.app.model_service's batched capture) and recomputes nothing the capture holds: one query's attention
weights come from the captured queries and keys (not [T, T] patterns, which grow with the square of the prompt), the
lens from lens.lens_logits on the states at that position only.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..model.hooks import act_name
from .lens import lens_logits

TOP_K = 5  # next-token candidates listed at the end


def overview_hook_names(n_layers: int, norm: str) -> tuple[str, ...]:
    """What forward_overview reads: the embeddings, every residual state, sub-layer output and norm output, and each
    attention's queries and keys (one query's weights are recomputed from them instead of capturing [T, T] patterns).
    The same names in either wiring: `norm` is kept for callers that name it."""
    names = [act_name("embed"), act_name("pos_embed")]
    for i in range(n_layers):
        names += [
            act_name(kind, i)
            for kind in ("resid_pre", "ln1", "q", "k", "attn_out", "resid_mid", "ln2", "mlp_out", "resid_post")
        ]
    return tuple(names + [act_name("ln_final")])


class BlockStep(NamedTuple):
    """One block at the chosen position. Norms are L2 norms of the vector at that position."""

    layer: int
    resid_in: float  # ||hook_resid_pre||: the stream entering the block
    ln_1: float  # ||ln_1's output|| (pre-norm: of resid_in; post-norm: of resid_in + attn_out)
    attn_out: float  # ||hook_attn_out||: what attention adds
    attn_sum: float  # ||resid_in + attn_out||: the stream right after the addition
    resid_mid: float  # ||hook_resid_mid|| (pre-norm: = attn_sum; post-norm: = ln_1)
    ln_2: float  # ||ln_2's output||
    mlp_out: float  # ||hook_mlp_out||
    mlp_sum: float  # ||resid_mid + mlp_out||
    resid_out: float  # ||hook_resid_post||: the stream leaving the block
    head: int  # the head with the largest single attention weight from this position
    target: int  # the position that head looks at most
    weight: float  # that weight
    lens_id: int  # the logit lens on the stream leaving the block: its most likely next token
    lens_prob: float  # and that token's probability


class ForwardOverview(NamedTuple):
    norm: str  # the model's wiring, "pre" or "post"
    position: int  # the position shown
    token_id: int  # the token at that position
    embed: float  # ||hook_embed||: the token embedding
    pos_embed: float  # ||hook_pos_embed||: the position embedding
    resid_0: float  # ||embed + pos_embed||: the stream entering block 0
    embed_lens_id: int  # the logit lens on the embeddings alone
    embed_lens_prob: float
    blocks: tuple[BlockStep, ...]
    ln_f: float  # ||ln_f's output||: what the unembedding reads
    top_ids: tuple[int, ...]  # the most likely next tokens, most likely first
    top_probs: tuple[float, ...]  # their probabilities: softmax of the logits at the position
    next_id: int | None  # the prompt's real next token (None at the last position)
    next_prob: float | None
    next_rank: int | None  # 1 = the model's first choice
    attn_chance: float  # one attention weight under uniform attention: 1 / (position + 1)
    uniform_prob: float  # one token's probability under uniform guessing: 1 / vocab


def _norm(x: torch.Tensor) -> float:
    return torch.linalg.vector_norm(x.float()).item()


def attention_row(cache, layer: int, position: int) -> torch.Tensor:
    """[heads, position + 1]: each head's weights from `position` over the tokens it may see, as the model computes
    them (softmax of q.k / sqrt(d_head) under the causal mask), from the captured queries and keys."""
    q = cache[act_name("q", layer)][position].float()  # [heads, d_head]
    k = cache[act_name("k", layer)][: position + 1].float()  # [position + 1, heads, d_head]
    scores = torch.einsum("hd,khd->hk", q / math.sqrt(q.shape[-1]), k)
    return scores.softmax(-1)


def strongest_attention(cache, layer: int, position: int) -> tuple[int, int, float]:
    """(head, target position, weight): the largest single weight any head of `layer` puts on one token from
    `position`."""
    row = attention_row(cache, layer, position)
    best = int(row.argmax())
    return best // row.shape[1], best % row.shape[1], row.flatten()[best].item()


def forward_overview(
    model, cache, logits: torch.Tensor, position: int, top_k: int = TOP_K, ids=None
) -> ForwardOverview:
    """The forward pass at `position` from one prompt's capture (overview_hook_names) and its logits [T, vocab].
    `ids`: the prompt, for its real next token (optional)."""
    cfg = model.config
    T = logits.shape[0]
    if not 0 <= position < T:
        raise ValueError(f"position {position} is outside the prompt's {T} tokens")
    p = position
    at = lambda name: cache[name][p].float()  # noqa: E731 - one position of a captured tensor
    embed, pos = at(act_name("embed")), at(act_name("pos_embed"))
    # the lens reads each state as if it were the last: the embeddings', then every block's output
    states = torch.stack([at(act_name("resid_pre", 0))] + [at(act_name("resid_post", i)) for i in range(cfg.n_layers)])
    lens_probs = lens_logits(model, states).softmax(-1)  # [layers + 1, vocab]
    lens_p, lens_i = lens_probs.max(-1)
    blocks = []
    for i in range(cfg.n_layers):
        resid_in, attn_out = at(act_name("resid_pre", i)), at(act_name("attn_out", i))
        resid_mid, mlp_out = at(act_name("resid_mid", i)), at(act_name("mlp_out", i))
        head, target, weight = strongest_attention(cache, i, p)
        blocks.append(
            BlockStep(
                i,
                _norm(resid_in),
                _norm(at(act_name("ln1", i))),
                _norm(attn_out),
                _norm(resid_in + attn_out),
                _norm(resid_mid),
                _norm(at(act_name("ln2", i))),
                _norm(mlp_out),
                _norm(resid_mid + mlp_out),
                _norm(at(act_name("resid_post", i))),
                head,
                target,
                weight,
                int(lens_i[i + 1]),
                lens_p[i + 1].item(),
            )
        )
    probs = logits[p].float().softmax(-1)
    top = probs.topk(min(top_k, probs.numel()))
    next_id = int(ids[p + 1]) if ids is not None and p + 1 < len(ids) else None
    next_prob = probs[next_id].item() if next_id is not None else None
    next_rank = int((probs > probs[next_id]).sum()) + 1 if next_id is not None else None
    token_id = int(ids[p]) if ids is not None else -1
    return ForwardOverview(
        cfg.norm,
        p,
        token_id,
        _norm(embed),
        _norm(pos),
        _norm(embed + pos),
        int(lens_i[0]),
        lens_p[0].item(),
        tuple(blocks),
        _norm(at(act_name("ln_final"))),
        tuple(top.indices.tolist()),
        tuple(top.values.tolist()),
        next_id,
        next_prob,
        next_rank,
        1.0 / (p + 1),
        1.0 / probs.numel(),
    )
