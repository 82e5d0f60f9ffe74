"""The Attention page's computations on its capture: the head detectors, how long a prompt the page keeps, and what
the step-by-step, value-weighted and entropy views read (recomputed from the capture with the weights, so no view
or layer switch reruns the model). Plain data in and out; the capture, the detectors and the induction test are cached
(gptviz.app.model_service, the results cache)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ... import methods as analysis
from ...methods.head_steps import (
    HeadSteps,
    attention_input_name,
    first_token_chance,
    first_token_scores,
    head_steps,
    row_shares,
    value_weighted,
    values_from_input,
)
from ...model.config import GPTConfig
from ...model.heads import head_or_mean
from ...model.hooks import ActivationCache
from ...model.model import GPT
from .. import model_service
from . import cached

CAPTURE_BYTES = 256 * 2**20  # most memory the cached weights of one prompt may take (layers x heads x T x T)
# The detectors the page may open on, most telling first: a head is worth opening on when its score is at least
# WORTH_A_LOOK and WORTH_OVER_CHANCE times uniform attention's. Previous-token heads come last: every prompt has them.
OPENING_ORDER = ("induction, on this prompt", "duplicate-token", "previous-token")
WORTH_A_LOOK, WORTH_OVER_CHANCE = 0.3, 3.0


def longest_prompt(cfg: GPTConfig) -> int:
    """The most tokens whose attention weights of every layer and head fit CAPTURE_BYTES (they dominate the capture)."""
    return int(math.sqrt(CAPTURE_BYTES / (4 * cfg.n_layers * cfg.n_heads)))


@dataclass
class Detector:
    """One head detector on this page's prompt: its name, every head's score and uniform attention's score."""

    name: str
    scores: torch.Tensor  # [layers, heads]
    chance: float
    on_prompt: bool = True  # measured on the page's prompt (False: on a sequence of its own)

    @property
    def column(self) -> str:
        return f"{self.name} (chance {self.chance:.3f})"

    def best(self) -> tuple[int, int, float]:
        return analysis.head_ranking(self.scores, 1)[0]


@cached
def detectors(
    spec: model_service.ModelSpec, cfg: GPTConfig, ids: tuple[int, ...], _patterns: torch.Tensor
) -> list[Detector]:
    """Every detector on the prompt's patterns [layers, heads, T, T], and induction on its own repeated sequence.
    The patterns are the capture of `spec` on `ids`, so those are the key: every full run of the page scored them
    again (a wiring toggle back to a model already seen, issue 60)."""
    patterns = _patterns
    T = len(ids)
    found = [
        Detector(
            "induction, on this prompt",
            analysis.prompt_induction_scores(patterns, ids),
            analysis.prompt_induction_chance(ids),
        ),
        Detector("previous-token", analysis.previous_token_scores(patterns), analysis.previous_token_chance(T)),
        Detector(
            "duplicate-token", analysis.duplicate_token_scores(patterns, ids), analysis.duplicate_token_chance(ids)
        ),
        Detector("first token (sink)", first_token_scores(patterns), first_token_chance(T)),
    ]
    length = model_service.induction_length(cfg.n_ctx)
    if length >= 2:
        found.append(
            Detector(
                f"induction, {length} random tokens repeated",
                model_service.induction_scores(spec, length),
                analysis.induction_chance(length),
                on_prompt=False,
            )
        )
    return found


def head_worth_a_look(found: list[Detector]) -> tuple[int, int, Detector] | None:
    """The first detector in OPENING_ORDER whose best head clears the bar, and that head; None when none does."""
    by_name = {d.name: d for d in found}
    for name in OPENING_ORDER:
        layer, head, score = by_name[name].best()
        if score >= WORTH_A_LOOK and score >= WORTH_OVER_CHANCE * by_name[name].chance:
            return layer, head, by_name[name]
    return None


def short_name(d: Detector) -> str:
    """A detector's name without its qualifier ("induction, on this prompt" is "induction")."""
    return d.name.split(",")[0]


def head_notes(found: list[Detector], n_layers: int, n_heads: int) -> list[list[str]]:
    """What each head does on this prompt, in a line for the map's title: its detector furthest above chance (score
    over chance), with the score beside the chance level; the head worth a look says so. The mean of the heads gets
    no line. Only the detectors measured on the prompt: the note is about the map it sits on. [layers][heads + 1]
    strings."""
    best = head_worth_a_look(found)
    scored = [d for d in found if d.on_prompt and math.isfinite(d.chance) and d.chance > 0]
    notes = []
    for layer in range(n_layers):
        row = []
        for head in range(n_heads):
            ratios = [
                (float(d.scores[layer, head]) / d.chance, d)
                for d in scored
                if math.isfinite(float(d.scores[layer, head]))
            ]
            if not ratios:
                row.append("")
                continue
            worth = best is not None and (layer, head) == best[:2]
            d = best[2] if worth else max(ratios, key=lambda r: r[0])[1]  # the worth-a-look head: its detector
            line = f"{short_name(d)} {float(d.scores[layer, head]):.2f} (chance {d.chance:.2f})"
            row.append(("Worth a look: " if worth else "") + line)
        notes.append(row + [""])
    return notes


def steps_of_head(model: GPT, cache: ActivationCache, layer: int, head: int, query: int) -> HeadSteps:
    """One head's computation for one query, step by step, with the model's weights (gptviz.methods.head_steps)."""
    return head_steps(model, cache, layer, head, query)


def value_weighted_shares(
    model: GPT, cache: ActivationCache, patterns: torch.Tensor, layer: int, head: int | None
) -> torch.Tensor:
    """Kobayashi et al.'s weight x ‖value · W_O‖ as a share of each row [T, T], for one head or (None) their mean."""
    v = values_from_input(model, layer, cache[attention_input_name(layer, model.config.norm)])
    vw = value_weighted(model, layer, v, patterns[layer])  # [heads, T, T]
    return row_shares(head_or_mean(vw, head))


def sinks(patterns_of_layer: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Each head's mean weight on the first token [heads], and uniform attention's."""
    return first_token_scores(patterns_of_layer), first_token_chance(patterns_of_layer.shape[-1])


def entropy(patterns: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Attention entropy [layers, heads, query] in nats, and a uniform row's over the prompt's length."""
    return analysis.attention_entropy(patterns), analysis.uniform_attention_entropy(patterns.shape[-1])
