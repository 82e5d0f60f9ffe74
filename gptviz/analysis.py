"""Derived views of a capture: head detectors, baselines and other measurements pages and scripts share.

Patterns are [layers, heads, query, key] (no batch axis) unless said otherwise.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

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


def induction_sequence(vocab_size: int, length: int = 50, seed: int = 0, low: int = 1000,
                       high: int = 20000, ids: torch.Tensor | None = None) -> torch.Tensor:
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
def induction_scores(model: GPT, length: int | None = None, seed: int = 0,
                     ids: torch.Tensor | None = None) -> torch.Tensor:
    """[layers, heads] induction scores on a repeated random token sequence that fits the context."""
    return induction_test(model, length, seed, ids).scores


class InductionTest(NamedTuple):
    scores: torch.Tensor        # [layers, heads]
    repeat_loss: float          # nats/token on the second half's predictable tokens
    length: int
    chance: float


@torch.no_grad()
def induction_test(model: GPT, length: int | None = None, seed: int = 0,
                   ids: torch.Tensor | None = None) -> InductionTest:
    """Induction scores and the loss on the repeated half: after r_1..r_n r_1, each next token of the
    second half is the one that followed its earlier copy (positions length..2 * length - 2 predict them)."""
    length = length or min(50, model.config.n_ctx // 2)
    if 2 * length > model.config.n_ctx:
        raise ValueError(f"a repeated sequence of {2 * length} tokens does not fit n_ctx={model.config.n_ctx}")
    seq = induction_sequence(model.config.vocab_size, length, seed, ids=ids)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.config.n_layers)]
    logits, cache = capture(model, seq[None], names)
    log_probs = F.log_softmax(logits[0, length:-1].float(), -1)
    loss = -log_probs.gather(-1, seq[length + 1:, None]).mean()
    return InductionTest(induction_scores_from(cache.patterns()[:, 0], length), float(loss), length,
                         induction_chance(length))


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


# ---- residual stream, norms, logit lens, neurons, embeddings (Activations and Embeddings pages) --------
# Captures here are ActivationCache objects whose tensors have NO batch axis (as ui.capture_cache returns).

def residual_norms(cache) -> torch.Tensor:
    """[layers + 1, T]: L2 norm of the residual stream entering each block, then leaving the last one."""
    return torch.linalg.vector_norm(cache.resid_stream(), dim=-1)


def branch_norms(cache, suffix: str) -> torch.Tensor:
    """[layers, T]: L2 norm of what one sub-layer adds, e.g. suffix "hook_attn_out" or "hook_mlp_out"."""
    return torch.linalg.vector_norm(cache.stack(suffix), dim=-1)


def norm_inputs(cache, config) -> dict[str, torch.Tensor]:
    """{norm name: [T, d_model] input}, in forward order (blocks.i.ln_1, blocks.i.ln_2, ..., ln_f).

    Pre-norm normalises the stream before each sub-layer: ln_1 sees resid_pre, ln_2 sees resid_mid.
    Post-norm normalises after each residual addition: ln_1 sees resid_pre + attn_out, ln_2 sees
    resid_mid + mlp_out. Both wirings end with ln_f on the last block's output."""
    out = {}
    for i in range(config.n_layers):
        b = f"blocks.{i}"
        if config.norm == "pre":
            out[f"{b}.ln_1"] = cache[f"{b}.hook_resid_pre"]
            out[f"{b}.ln_2"] = cache[f"{b}.hook_resid_mid"]
        else:
            out[f"{b}.ln_1"] = cache[f"{b}.hook_resid_pre"] + cache[f"{b}.hook_attn_out"]
            out[f"{b}.ln_2"] = cache[f"{b}.hook_resid_mid"] + cache[f"{b}.hook_mlp_out"]
    out["ln_f"] = cache[f"blocks.{config.n_layers - 1}.hook_resid_post"]
    return out


class NormStats(NamedTuple):
    names: list[str]            # norm modules in forward order
    mean: torch.Tensor          # [norms, T] mean over d_model of each position's input
    var: torch.Tensor           # [norms, T] variance over d_model (biased, as LayerNorm divides by it)
    mean_square: torch.Tensor   # [norms, T] mean of squares (what RMSNorm divides by)


def norm_input_stats(cache, config) -> NormStats:
    """Mean, variance and mean square over d_model of every norm's input, per position."""
    inputs = norm_inputs(cache, config)
    x = torch.stack(list(inputs.values())).double()  # [norms, T, d]
    return NormStats(list(inputs), x.mean(-1).float(), x.var(-1, unbiased=False).float(),
                     x.pow(2).mean(-1).float())


@torch.no_grad()
def lens_logits(model: GPT, resid: torch.Tensor) -> torch.Tensor:
    """Decode a residual-stream state [..., d_model] as the model decodes its last one: ln_f, then
    lm_head. Float32 on the CPU."""
    p = model.lm_head.weight
    return model.lm_head(model.ln_f(resid.to(device=p.device, dtype=p.dtype))).float().cpu()


class LogitLens(NamedTuple):
    top_ids: torch.Tensor       # [layers + 1, T] most likely next token read off each state
    top_probs: torch.Tensor     # [layers + 1, T] its probability
    target_ids: torch.Tensor    # [T] the model's final prediction (argmax of its real logits)
    target_probs: torch.Tensor  # [layers + 1, T] probability of that final prediction at each state


@torch.no_grad()
def logit_lens(model: GPT, cache) -> LogitLens:
    """The logit lens: every residual state (entering each block, then the output of the last) decoded
    through the final norm and the unembedding. The last row is the model's real output.

    Takes one prompt's cache, with its batch axis of 1 (`capture(model, [ids])`) or without one (the pages'
    caches); a batch of several prompts raises ValueError."""
    states = cache.resid_stream()  # [layers + 1, T, d], or [layers + 1, batch, T, d] with the batch axis
    if states.dim() == 4:
        if states.shape[1] != 1:
            raise ValueError(f"logit_lens reads one prompt: got a batch of {states.shape[1]}; capture one prompt "
                             "(capture(model, [ids])) or pass the cache of one row")
        states = states[:, 0]
    target = lens_logits(model, states[-1]).argmax(-1)  # the model's own prediction at each position
    top_ids, top_probs, target_probs = [], [], []
    for state in states:  # one state at a time: [T, vocab] each, never [layers, T, vocab] at once
        probs = lens_logits(model, state).softmax(-1)
        p, i = probs.max(-1)
        top_ids.append(i)
        top_probs.append(p)
        target_probs.append(probs.gather(-1, target[:, None])[:, 0])
    return LogitLens(torch.stack(top_ids), torch.stack(top_probs), target, torch.stack(target_probs))


def top_neurons(post: torch.Tensor, position: int, k: int = 10) -> list[tuple[int, int, float]]:
    """The k most active MLP neurons at one position across all layers, as (layer, neuron, activation).
    post: [layers, T, d_ff] (the stacked mlp.hook_post)."""
    acts = post[:, position]  # [layers, d_ff]
    values, idx = acts.flatten().topk(min(k, acts.numel()))
    d_ff = acts.shape[1]
    return [(int(i) // d_ff, int(i) % d_ff, float(v)) for v, i in zip(values, idx)]


def activation_histograms(post: torch.Tensor, bins: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts [layers, bins], edges [bins + 1]): one histogram per layer of its MLP outputs, on shared
    bins spanning every value. post: [layers, ...]."""
    flat = post.reshape(post.shape[0], -1).float()
    lo, hi = float(flat.min()), float(flat.max())
    if hi <= lo:  # every value equal: one visible bin around it
        lo, hi = lo - 0.5, hi + 0.5
    edges = torch.linspace(lo, hi, bins + 1)
    counts = torch.stack([torch.histogram(row, bins=edges).hist for row in flat])
    return counts, edges


def cosine_similarity_matrix(x: torch.Tensor) -> torch.Tensor:
    """[n, n] cosine similarity between the rows of x [n, d] (0 for a zero row)."""
    unit = F.normalize(x.double(), dim=-1)
    return (unit @ unit.T).float()


class PCA(NamedTuple):
    coords: torch.Tensor                     # [n, k] the rows of x projected on the components
    explained_variance_ratio: torch.Tensor   # [k] share of the total variance, largest first
    components: torch.Tensor                 # [k, d] unit directions
    mean: torch.Tensor                       # [d] subtracted before projecting


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


def vocab_sample(vocab_size: int, n: int = 2000, seed: int = 0, low: int = 0,
                 ids: torch.Tensor | None = None) -> torch.Tensor:
    """n distinct token ids drawn uniformly from [low, vocab_size), or from `ids` when given (for a trained
    model, the ids its training text used), sorted (a fixed sample per seed)."""
    g = torch.Generator().manual_seed(seed)
    if ids is not None:
        ids = torch.unique(torch.as_tensor(ids))
        return ids[torch.randperm(len(ids), generator=g)[:min(n, len(ids))]].sort().values
    low = min(low, vocab_size - 1)
    n = min(n, vocab_size - low)
    return (torch.randperm(vocab_size - low, generator=g)[:n] + low).sort().values


def causal_mask(n: int) -> torch.Tensor:
    """[n, n] bool: True where query i may attend to key j; the very mask the model's attention uses."""
    from .model import _causal_mask
    return _causal_mask(n, 0, "cpu")


def activation_curves(x: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{activation: (f(x), f'(x))} for the model's own activation functions (gptviz.model.activate),
    derivatives by autograd."""
    from .model import activate
    from .config import ACTIVATIONS
    out = {}
    for name in ACTIVATIONS:
        xs = x.detach().double().clone().requires_grad_(True)
        y = activate(xs, name)
        (dy,) = torch.autograd.grad(y.sum(), xs)
        out[name] = (y.detach(), dy.detach())
    return out


def regions_where(mask: torch.Tensor, x: torch.Tensor) -> list[tuple[float, float]]:
    """Contiguous runs of True in mask (over sorted x) as (x_start, x_end) intervals."""
    runs, start = [], None
    for i, flag in enumerate(mask.tolist()):
        if flag and start is None:
            start = i
        if not flag and start is not None:
            runs.append((float(x[start]), float(x[i - 1])))
            start = None
    if start is not None:
        runs.append((float(x[start]), float(x[-1])))
    return runs


def attention_entropy(patterns: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row, [..., query]: 0 when a query looks at one key only,
    ln(q + 1) when query q spreads evenly over every key it can see. Masked (zero) weights add nothing."""
    p = patterns.float()
    return (-(p * torch.log(p.clamp_min(1e-30))).sum(-1)).clamp_min(0.0)


def uniform_attention_entropy(T: int) -> float:
    """Mean over queries 0..T-1 of ln(q + 1): the entropy of a head that spreads evenly over all it sees."""
    return math.lgamma(T + 1) / T if T > 0 else 0.0


class StepSummary(NamedTuple):
    """One generation step, compact enough to keep in session state (no full-vocabulary tensors)."""
    token_id: int
    piece: str
    position: int                  # index of the new token in prompt + generated
    prob: float                    # its probability after temperature
    rank: int                      # 1 = the most probable token
    entropy: float                 # of the distribution after temperature, in nats
    top: list                      # [(id, probability, kept by top-k/top-p)], most probable first
    n_allowed: int                 # tokens kept by top-k/top-p (1 when greedy)
    kept_mass: float               # their total probability
    attention: torch.Tensor | None  # [layers, heads, keys]: the predicting query's row
    window_start: int              # position of the first key the model saw
    context_shifted: bool


def step_summary(record, top_n: int = 20) -> StepSummary:
    """Summarise a gptviz.generate.StepRecord: the sampled token's probability, rank and the entropy."""
    probs, token = record.probs.float(), int(record.token_id)
    p = float(probs[token])
    # one fused op each where possible: this runs once per new token, beside the model (entr(0) = 0)
    return StepSummary(
        token_id=token, piece=record.piece, position=int(record.position), prob=p,
        rank=int((probs > p).sum()) + 1, entropy=float(torch.special.entr(probs).sum()),
        top=record.top(top_n), n_allowed=int(record.allowed.sum()),
        kept_mass=float(torch.where(record.allowed, probs, 0.0).sum()),
        attention=None if record.attention is None else record.attention.float().cpu(),
        window_start=int(record.window_start), context_shifted=bool(record.context_shifted))
