"""Sampling (temperature, top-k, top-p), a key/value cache, and stream(): one record per new token.

The KV cache is preallocated to n_ctx, so each step costs one token's forward pass. Past n_ctx the
sequence keeps its last n_ctx tokens and the cache is rebuilt (learned positions cannot shift), which the
record reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .hooks import act_name, capturing, edits_by_hook
from .model import GPT
from .tokenizer import EOT_ID, token_label, tokenizer_for


class KeyValues:
    """The values of the keys a step saw, layer by layer: `values[layer]` is [heads, keys, d_head]. Read from the KV
    cache when asked (a view of it, made only for the layers read): the cache's first `length` rows never change,
    and one rebuilt past n_ctx is a new cache, so the rows stay those of this step."""

    def __init__(self, layers: list[torch.Tensor], length: int | None = None):
        self._layers, self._length = layers, length  # [1, heads, n_ctx, d_head] rows of a cache, or [heads, T, d]

    def __getitem__(self, layer: int) -> torch.Tensor:
        value = self._layers[layer]
        return value if self._length is None else value[0, :, : self._length]

    def __len__(self) -> int:
        return len(self._layers)

    @property
    def storage_size(self) -> int:
        """Bytes of the tensors these values keep alive (a whole cache's values, not only the rows seen)."""
        return sum(t.untyped_storage().nbytes() for t in self._layers)


@dataclass
class StepRecord:
    step: int  # 0 for the first new token
    token_id: int
    piece: str  # the token's display label (readable even for partial UTF-8)
    position: int  # index of the new token in the whole sequence (prompt + generated)
    logits: torch.Tensor  # [vocab] raw logits that produced this token
    probs: torch.Tensor  # [vocab] probabilities after temperature (temperature 0: plain softmax)
    allowed: torch.Tensor  # [vocab] bool: kept by top-k/top-p (greedy: only the argmax)
    attention: torch.Tensor | None  # [layers, heads, keys]: the predicting query's row, when asked for
    context_shifted: bool  # the context was full: this step ran on the last n_ctx tokens only
    window_start: int  # position of the first token the model saw this step
    # with `capture`: each hook's value at the predicting (last) position, by hook name, and every layer's values of
    # the keys the model saw (KeyValues)
    captured: dict[str, torch.Tensor] | None = None
    values: KeyValues | None = None

    def top(self, n: int = 20) -> list[tuple[int, float, bool]]:
        """The n most probable tokens as (id, probability, allowed), most probable first."""
        probs, ids = self.probs.topk(min(n, self.probs.numel()))
        # whole-tensor conversions: one per column, not three tensor ops per token (this runs once per new token)
        return list(zip(ids.tolist(), probs.tolist(), self.allowed[ids].tolist(), strict=True))


def check_sampling(
    temperature: float, top_k: int | None, top_p: float | None, max_new_tokens: int | None = None
) -> None:
    """Raise ValueError naming the setting that is out of range."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 (or None for no limit), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] (or None for no limit), got {top_p!r}")
    if max_new_tokens is not None and (
        isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0
    ):
        raise ValueError(f"max_new_tokens must be a whole number >= 0, got {max_new_tokens!r}")


def sampling_distribution(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities after temperature, mask of tokens allowed by top-k then top-p) for 1-D logits."""
    check_sampling(temperature, top_k, top_p)
    logits = logits.float()
    if temperature == 0:
        probs = F.softmax(logits, dim=-1)
        allowed = torch.zeros_like(probs, dtype=torch.bool)
        allowed[logits.argmax()] = True
        return probs, allowed
    # shifted first, so a tiny temperature sends the others to -inf (the argmax's limit) instead of inf - inf = NaN;
    # one below float32's smallest normal number would round to 0 in the division (0 / 0 = NaN at the argmax)
    probs = F.softmax((logits - logits.max()) / max(temperature, torch.finfo(logits.dtype).tiny), dim=-1)
    allowed = torch.ones_like(probs, dtype=torch.bool)
    if top_k is not None and top_k < probs.numel():
        allowed = torch.zeros_like(allowed)
        allowed[probs.topk(top_k).indices] = True
    if top_p is not None and top_p < 1:
        kept = torch.where(allowed, probs, torch.zeros_like(probs))
        allowed &= nucleus_mask(kept / kept.sum(), top_p)
    return probs, allowed


def nucleus_mask(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest most-probable prefix whose mass reaches top_p: a token stays if the mass of the tokens ranked
    before it is < top_p. Ranked with topk over a growing prefix rather than a sort of the whole vocabulary (a sort
    of GPT-2's 50,257 probabilities was a third of a generated token's time on the bundled model, whose nucleus
    at top_p 0.9 is a median 173 tokens); the prefix and its running sums are those a full descending sort gives,
    so the mask is the same (up to the order of exactly equal probabilities, which a sort leaves open too)."""
    n = probs.numel()
    # no token holds more than the largest probability, so at least top_p / max of them are needed. Where that
    # bound is already past a sixteenth of the vocabulary (a flat distribution: random weights, ~5,000 of GPT-2's
    # 50,257) a topk would fall short and the sort follow, so sort at once
    need = math.ceil(top_p / max(float(probs.max()), 1e-30))
    k = n if need > n // 16 else max(256, need)
    while True:
        ranked, order = probs.topk(k) if k < n else torch.sort(probs, descending=True)
        mass = torch.cumsum(ranked, dim=0)
        reached = float(mass[-1])
        if k == n or reached >= top_p:  # the (k+1)-th token and every later one have >= top_p before them
            break
        # the ranked probabilities only fall, so the first m tokens hold at most m/k of this prefix's mass:
        # at least k * top_p / reached are needed. A topk of up to a quarter of the vocabulary still costs under
        # half a sort, so the prefix grows eightfold before giving up on it
        need = math.ceil(k * top_p / max(reached, 1e-30))
        k = n if need > n // 4 else min(n, max(8 * k, need))
    nucleus = torch.zeros(n, dtype=torch.bool)
    nucleus[order[(mass - ranked) < top_p]] = True
    return nucleus


def _sample(probs: torch.Tensor, allowed: torch.Tensor, greedy: bool, generator: torch.Generator) -> int:
    if greedy:
        return int(allowed.nonzero()[0])
    weights = torch.where(allowed, probs, torch.zeros_like(probs))
    return int(torch.multinomial(weights, 1, generator=generator))


def stream(
    model: GPT,
    ids,
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop_at_eos: bool = False,
    attention: bool = False,
    use_cache: bool = True,
    edits=None,
    capture=(),
) -> Iterator[StepRecord]:
    """Yield one StepRecord per new token. `attention=True` adds each step's attention row for every
    layer and head. `use_cache=False` recomputes the whole sequence each step (for checking the cache).
    `edits` (gptviz.methods.interventions) apply at every step; with the cache, to the new token only.
    `capture`: hook names whose values at the predicting position each record carries, with the keys' values
    (what gptviz.methods.graph_direct reads). Settings and the prompt are checked here, when called, not at the
    first next()."""
    check_sampling(temperature, top_k, top_p, max_new_tokens)
    seq = _as_list(ids)
    if not seq:
        raise ValueError("the prompt has no tokens; generation needs at least one to condition on")
    bad = [i for i in seq if not 0 <= i < model.config.vocab_size]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {model.config.vocab_size})")
    edits = edits_by_hook(edits, model.hook_names)
    unknown = sorted(set(capture) - set(model.hook_names))
    if unknown:
        raise ValueError(f"no hook point named {unknown[0]!r}")
    capture = frozenset(capture)
    return _stream(
        model, seq, max_new_tokens, temperature, top_k, top_p, seed, stop_at_eos, attention, use_cache, edits, capture
    )


def _as_list(ids) -> list[int]:
    """One prompt as a list of ids, from a list, a [T] tensor or a [1, T] tensor."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() > 2 or (ids.dim() == 2 and ids.shape[0] != 1):
            raise ValueError(f"generation takes one sequence, [T] or [1, T]; got shape {tuple(ids.shape)}")
        return [int(i) for i in ids.flatten().tolist()]
    return [int(i) for i in ids]


@torch.no_grad()
def _stream(
    model: GPT,
    seq: list[int],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int | None,
    stop_at_eos: bool,
    attention: bool,
    use_cache: bool,
    edits: dict,
    capture: frozenset[str],
) -> Iterator[StepRecord]:
    n_ctx = model.config.n_ctx
    generator = torch.Generator()  # sampling runs on the CPU copy of the logits, whatever the model's device
    generator.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,))))
    pattern_names = [act_name("pattern", i) for i in range(model.config.n_layers)]
    wanted = (frozenset(pattern_names) if attention else frozenset()) | capture
    value_names = [act_name("v", i) for i in range(model.config.n_layers)]
    if capture and not use_cache:
        wanted |= frozenset(value_names)  # without a cache the keys' values come from this step's own pass
    enc = tokenizer_for(model)  # its own pieces (GPT-1's BPE for a GPT-1 folder)
    cache, window_start = None, 0

    for step in range(max_new_tokens):
        shifted = len(seq) > n_ctx or (cache is not None and cache.length >= n_ctx)
        with capturing(wanted, edits) as store:
            if use_cache and cache is not None and not shifted:
                logits = model(torch.tensor([seq[-1:]]), kv_cache=cache)
            else:  # first step, no cache, or a full context: run on the last n_ctx tokens
                window_start = max(0, len(seq) - n_ctx)
                cache = model.new_kv_cache() if use_cache else None
                logits = model(torch.tensor([seq[window_start:]]), kv_cache=cache, last_only=True)
        logits = logits[0, -1].float().cpu()
        probs, allowed = sampling_distribution(logits, temperature, top_k, top_p)
        token = _sample(probs, allowed, temperature == 0, generator)
        rows = None
        if attention:  # the predicting (last) query's row in every layer: [layers, heads, keys]
            rows = torch.stack([store[name][0, :, -1, :] for name in pattern_names])
        captured = values = None
        if capture:
            # a copy where the step ran over the whole prompt: a view would keep every position's values
            captured = {name: _last(store[name]) for name in capture}
            if cache is not None:
                values = KeyValues([layer.v for layer in cache.layers], cache.length)
            else:
                values = KeyValues([store[name][0].transpose(0, 1) for name in value_names])
        piece = token_label(enc.decode_single_token_bytes(token)) if token < enc.n_vocab else f"<{token}>"
        yield StepRecord(
            step=step,
            token_id=token,
            piece=piece,
            position=len(seq),
            logits=logits,
            probs=probs,
            allowed=allowed,
            attention=rows,
            context_shifted=shifted,
            window_start=window_start,
            captured=captured,
            values=values,
        )
        seq.append(token)
        if stop_at_eos and token == EOT_ID:
            return


def _last(value: torch.Tensor) -> torch.Tensor:
    """A hook's value at the last position of the first sequence, [1, T, ...] -> [1, ...]; a copy when T > 1."""
    return value[0, -1:].clone() if value.shape[1] > 1 else value[0]


def generate(
    model: GPT,
    ids,
    max_new_tokens: int = 32,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop_at_eos: bool = False,
    use_cache: bool = True,
    edits=None,
) -> list[int]:
    """The prompt's ids followed by the new ones. temperature 0 is greedy; the same seed gives the same text."""
    seq = _as_list(ids)
    for record in stream(
        model, seq, max_new_tokens, temperature, top_k, top_p, seed, stop_at_eos, use_cache=use_cache, edits=edits
    ):
        seq.append(record.token_id)
    return seq


class StepSummary(NamedTuple):
    """One generation step, compact enough to keep in session state (no full-vocabulary tensors)."""

    token_id: int
    piece: str
    position: int  # index of the new token in prompt + generated
    prob: float  # its probability after temperature
    rank: int  # 1 = the most probable token
    entropy: float  # of the distribution after temperature, in nats
    top: list  # [(id, probability, kept by top-k/top-p)], most probable first
    n_allowed: int  # tokens kept by top-k/top-p (1 when greedy)
    kept_mass: float  # their total probability
    attention: torch.Tensor | None  # [layers, heads, keys]: the predicting query's row
    window_start: int  # position of the first key the model saw
    context_shifted: bool


def step_summary(record, top_n: int = 20) -> StepSummary:
    """Summarise a gptviz.model.generate.StepRecord: the sampled token's probability, rank and the entropy."""
    probs, token = record.probs.float(), int(record.token_id)
    p = float(probs[token])
    # one fused op each where possible: this runs once per new token, beside the model (entr(0) = 0)
    return StepSummary(
        token_id=token,
        piece=record.piece,
        position=int(record.position),
        prob=p,
        rank=int((probs > p).sum()) + 1,
        entropy=float(torch.special.entr(probs).sum()),
        top=record.top(top_n),
        n_allowed=int(record.allowed.sum()),
        kept_mass=float(torch.where(record.allowed, probs, 0.0).sum()),
        attention=None if record.attention is None else record.attention.float().cpu(),
        window_start=int(record.window_start),
        context_shifted=bool(record.context_shifted),
    )
