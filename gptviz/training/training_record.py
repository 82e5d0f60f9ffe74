"""A checkpoint's training record (config.json's "training": stages, each continued run naming its parent) read as
stages, and how two twins' records differ (the Norms page's caveat and the model cards say so)."""

from __future__ import annotations

import dataclasses

from ..methods.wiring import differing_settings
from .train import TrainSettings


def training_stages(training: dict) -> list[dict]:
    """A checkpoint's training record as its stages, oldest first (each continued run names its parent)."""
    stages, stage = [], training
    while stage:
        stages.append(stage)
        stage = stage.get("continued_from")
    return stages[::-1]


def stage_init(stage: dict) -> str:
    """A training stage's random init (`train --init`); a record from before that option ran GPT-2's."""
    return stage.get("init", "gpt2")


def recipe_differences(pre: dict, post: dict) -> list[str]:
    """How two checkpoints' training records differ, past post-norm's warmup (which twins may differ in):
    the number of stages, the data, and each stage's settings (compared by wiring.differing_settings, a setting
    missing from a record standing at its default), as short phrases; [] when trained alike."""
    a, b = training_stages(pre), training_stages(post)
    if len(a) != len(b):
        return [f"the pre-norm model trained in {len(a)} stage{'s' * (len(a) != 1)}, the post-norm one in {len(b)}"]
    found = []
    # a setting added after a stage was trained is absent from its record: its default is what ran then
    defaults = dataclasses.asdict(TrainSettings())
    for i, (x, y) in enumerate(zip(a, b, strict=True), 1):
        if stage_init(x) != stage_init(y):
            found.append(f"stage {i}: init {stage_init(x)} against {stage_init(y)}")
        if x.get("data") != y.get("data"):
            found.append(f"stage {i}: data {x.get('data')} against {y.get('data')}")
        differ = differing_settings(
            {"pre": {**defaults, **x.get("settings", {})}, "post": {**defaults, **y.get("settings", {})}}
        )
        found += [
            f"stage {i}: {key.replace('_', ' ')} {v['pre']} against {v['post']}"
            for key, v in differ.items()
            if key != "warmup"
        ]
    return found


INIT_NAMES = {"gpt2": "GPT-2's normal(0, 0.02)", "xavier": "Xavier's"}


def twins_caveat(pre: dict, post: dict) -> str | None:
    """One sentence saying that two twins' training records (pre-norm's, post-norm's) differ and how: each stage
    whose random init differs, named, then recipe_differences' other phrases; None when they were trained alike."""
    a, b = training_stages(pre), training_stages(post)
    # twins may have trained in different numbers of stages: the stages both have are compared, oldest first, and
    # recipe_differences (below) says the counts differ
    inits = [
        f"stage {i} started pre-norm from {INIT_NAMES.get(stage_init(x), stage_init(x))} random weights and "
        f"post-norm from {INIT_NAMES.get(stage_init(y), stage_init(y))}"
        for i, (x, y) in enumerate(zip(a, b, strict=False), 1)
        if stage_init(x) != stage_init(y)
    ]
    others = [d for d in recipe_differences(pre, post) if ": init " not in d]
    if not inits and not others:
        return None
    return "Not trained alike: " + "; ".join(inits + others) + ", so not every difference is the wiring's."
