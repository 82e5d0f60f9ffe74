"""The Why this token? page's measurements: next-token probabilities with heads ablated, direct attribution,
continuations, an edited layer's attention, the patching sweeps, saliency and the information-flow graph. Each
reserves its working memory first (gptviz.serve.memory), is kept in the results cache, and returns plain data; every
number comes from gptviz.methods.attribution / gptviz.methods.interventions / gptviz.methods.flow."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...methods import attribution, flow
from ...methods.interventions import ablate_heads, run_with_edits
from ...model import sizes
from ...model.config import GPTConfig
from ...model.generate import generate
from ...model.hooks import act_name
from ...model.tokenizer import decode, encode, fit_vocabulary, token_labels
from ...serve import limits, memory
from ...serve.work_clock import WorkClock, too_long
from .. import jobs, model_service
from . import cached

IG_STEPS = 32  # integrated-gradients points (completeness shown beside the result)
RATE_TTL_S = 120  # the block rate is measured again after this long: it is the server's speed now


@dataclass
class Ask:
    """What every tab asks about: the sidebar's model and prompt, and the metric logit(target) - logit(other)."""

    spec: model_service.ModelSpec
    cfg: GPTConfig
    ids: tuple[int, ...]
    labels: list[str]
    probs: torch.Tensor  # next-token probabilities after the prompt
    choices: list[int]  # the most probable tokens, offered as target and rival
    target: int
    other: int
    enc: object = None  # the model's tokenizer (tokenizer_for): GPT-1's BPE for a GPT-1 folder, else GPT-2's


def pieces(ids, enc=None) -> list[str]:
    """Tokens' labels in the model's tokenizer `enc` (default GPT-2's)."""
    return token_labels(list(ids), enc)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where two continuations differ; where one is a prefix of the other, the shorter's length;
    None when they are the same."""
    # not strict: the lengths may differ; zip reads the part both have and the default covers the rest
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
        None if len(a) == len(b) else min(len(a), len(b)),
    )


def piece_at(ids: list[int], i: int, enc=None) -> str:
    """Token i of `ids` as text (token 0's text past the end: one continuation may be shorter)."""
    return pieces(ids[i : i + 1] or [0], enc)[0]


def prompt_ids(text: str, cfg: GPTConfig, enc=None) -> tuple[int, ...]:
    """A typed prompt as the model's ids (in its tokenizer `enc`): past its vocabulary replaced, its context's last
    tokens kept."""
    return tuple(fit_vocabulary(encode(text, enc), cfg.vocab_size)[0][-cfg.n_ctx :])


def corrupted_from(text: str, cfg: GPTConfig, enc=None) -> tuple[str, str] | None:
    """The sidebar's prompt with one token swapped, as the default corrupted prompt: the token after the last
    token's latest earlier copy (what an induction head would copy), else the first; None when no single-token
    swap keeps the length in tokens. Returns (corrupted text, what was swapped)."""
    ids = list(prompt_ids(text, cfg, enc))
    if len(ids) < 2:
        return None
    copies = [j for j in range(len(ids) - 2) if ids[j] == ids[-1]]
    at = copies[-1] + 1 if copies else 0
    for swap in encode(" the", enc) + encode(" and", enc) + encode(" not", enc):
        if swap != ids[at] and swap < cfg.vocab_size:
            changed = ids[:at] + [swap] + ids[at + 1 :]
            corrupted = decode(changed, enc)
            if list(prompt_ids(corrupted, cfg, enc)) == changed:
                return corrupted, f"token {at}, {piece_at(ids, at, enc)!r} -> {piece_at(changed, at, enc)!r}"
    return None


@cached
def next_token(
    spec: model_service.ModelSpec,
    ids: tuple[int, ...],
    edit_heads: tuple[tuple[int, int], ...] = (),
    mode: str = "zero",
) -> torch.Tensor:
    """Next-token probabilities after `ids`, with the listed (layer, head) pairs ablated."""
    model = model_service.load_model(spec)
    edits = head_edits(spec, ids, edit_heads, mode)
    with memory.reserve(
        sizes.capture_work_nbytes(model.config, (), len(ids)),
        f"next-token probabilities for {len(ids)} tokens on {spec.name}",
    ):
        logits, _ = run_with_edits(model, torch.tensor([ids]), edits)
        return torch.softmax(logits[0, -1].float(), -1)


def head_edits(
    spec: model_service.ModelSpec, ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], mode: str
) -> list:
    """One ablation edit per layer; mean ablation's reference is this prompt's own positions."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    reference = None
    if mode == "mean" and heads:
        names = tuple(act_name("z", layer) for layer in sorted(by_layer))
        _, reference = model_service.capture_cache(spec, ids, names)  # hook_z [1, T, heads, d_head], as captured
    return [ablate_heads(layer, hs, mode, reference=reference) for layer, hs in sorted(by_layer.items())]


@cached
def direct_attribution(spec: model_service.ModelSpec, ids: tuple[int, ...], target: int, other: int):
    """From the prompt's capture of the attribution's hook points, cached and shared: another target or rival runs
    no model (it ran the forward pass again for every pair: most of a target switch's time; issue 60, timed by
    `python -m benchmarks latency`)."""
    model = model_service.load_model(spec)
    names = tuple(attribution.direct_attribution_names(model.config.n_layers))
    logits, cache = model_service.capture_cache(spec, ids, names)
    return attribution.direct_logit_attribution_of(model, logits[0], cache.prompt(0).__getitem__, target, other)


@cached
def continuation(
    spec: model_service.ModelSpec,
    ids: tuple[int, ...],
    heads: tuple[tuple[int, int], ...],
    mode: str,
    n: int,
    temperature: float,
    seed: int,
) -> list[int]:
    model = model_service.load_model(spec)
    edits = head_edits(spec, ids, heads, mode)
    with memory.reserve(
        sizes.sampling_nbytes(model.config, len(ids), n), f"a continuation of {n} tokens on {spec.name}"
    ):
        return generate(model, list(ids), n, temperature=temperature, seed=seed, edits=edits)[len(ids) :]


@cached
def edited_pattern(
    spec: model_service.ModelSpec, ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], mode: str, layer: int
) -> torch.Tensor:
    name, model = act_name("pattern", layer), model_service.load_model(spec)
    edits = head_edits(spec, ids, heads, mode)
    with memory.reserve(
        sizes.capture_work_nbytes(model.config, [name], len(ids)),
        f"layer {layer}'s attention on {len(ids)} tokens of {spec.name}",
    ):
        _, cache = run_with_edits(model, torch.tensor([ids]), edits, [name])
        return cache[name][0]


@cached
def patching(
    spec: model_service.ModelSpec,
    clean: tuple[int, ...],
    corrupted: tuple[int, ...],
    target: int,
    other: int,
    _clock: WorkClock | None = None,
):
    """Both sweeps; `_clock` (not part of the cache key) stops them past the time limit or when the session ends."""
    model = model_service.load_model(spec)
    with memory.reserve(sizes.patching_nbytes(model.config, len(clean)), "a patching sweep"):
        return (
            attribution.residual_patching(model, clean, corrupted, target, other, _clock),
            attribution.head_patching(model, clean, corrupted, target, other, _clock),
        )


@cached(ttl_s=RATE_TTL_S)
def block_rate(spec: model_service.ModelSpec, T: int) -> float:
    """Token-block passes a second on this server now (one timed batch; measured again every two minutes)."""
    model = model_service.load_model(spec)
    with memory.reserve(
        sizes.block_rate_nbytes(model.config, T),
        f"timing one block on {T} tokens of {spec.name}",
    ):
        return attribution.block_pass_rate(model, T)


@dataclass
class SweepPlan:
    """A long measurement before it starts: its estimated time from the rate measured now, and the limit."""

    estimate_s: float
    rate: float
    limit_s: int
    refusal: str | None  # why it must not run (its estimate passes the operator's limit), or None


def sweep_plan(what: str, work: int, T: int, spec: model_service.ModelSpec) -> SweepPlan:
    """`work` token-block passes at the rate measured on this server now, against GPTVIZ_SWEEP_SECONDS."""
    limit = limits.server_limits().sweep_seconds
    rate = block_rate(spec, T)
    estimate = work / rate
    return SweepPlan(estimate, rate, limit, too_long(estimate, limit, what))


def sweep_clock(what: str, limit_s: int) -> WorkClock:
    """The clock a sweep runs under: stopped past `limit_s` or when this browser session ends."""
    sid = jobs.session_id()
    return WorkClock(limit_s, what, alive=lambda: jobs.session_alive(sid))


@cached
def flow_graph(spec: model_service.ModelSpec, ids: tuple[int, ...], threshold: float):
    """Through the server's bounded capture cache (a capture over its budget is refused before the model runs)."""
    model = model_service.load_model(spec)
    _, cache = model_service.capture_cache(spec, ids, flow.hook_names(model.config.n_layers))
    return flow.flow_from_capture(model, cache.prompt(0), threshold)


@cached
def saliency(
    spec: model_service.ModelSpec, ids: tuple[int, ...], target: int, other: int, _clock: WorkClock | None = None
):
    model = model_service.load_model(spec)
    with memory.reserve(sizes.saliency_nbytes(model.config, len(ids)), "integrated gradients"):
        return (
            attribution.integrated_gradients(model, ids, target, other, steps=IG_STEPS, clock=_clock),
            attribution.gradient_x_input(model, ids, target, other),
        )
