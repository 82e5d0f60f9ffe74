"""The Train page's computations beside the background runs (gptviz.app.jobs): the form's values as a job, the
server's training limits, samples from a trained model, and the warmup scenario's outcome read off its runs."""

from __future__ import annotations

from dataclasses import dataclass

from ... import PRESETS
from ...model import sizes
from ...model.generate import generate
from ...serve import limits, memory
from ...serve.limits import ServerLimits
from ...serve.training_jobs import JobSpec, corpus_tokens
from ...training import warmup
from ...training.train import TrainSettings
from . import cached

WIRINGS = {"both": "pre and post, same batches", "pre": "pre-norm only", "post": "post-norm only"}
SAMPLE_TOKENS = 40


@dataclass
class Form:
    """The form's values as it shows them."""

    layers: int
    width: int
    heads: int
    wiring: str  # a key of WIRINGS
    lr: float
    warmup: int
    steps: int
    clip: float
    batch: int
    block: int
    init: str
    seed: int


def build_spec(form: Form) -> JobSpec:
    """The form's values as a job (ValueError / ConfigError naming a bad field)."""
    layers, width, steps, block, lr, clip = form.layers, form.width, form.steps, form.block, form.lr, form.clip
    base = PRESETS["tiny"].replace(
        n_layers=int(layers),
        d_model=int(width),
        n_heads=int(form.heads),
        n_ctx=int(block),
        name=f"shakespeare-{layers}L-d{width}",
    )
    norms = ["pre", "post"] if form.wiring == "both" else [form.wiring]
    configs = {norm: base.replace(norm=norm, name=f"{base.name}-{norm}") for norm in norms}
    settings = TrainSettings(
        steps=int(steps),
        batch_size=int(form.batch),
        block_size=int(block),
        lr=float(lr),
        warmup=int(form.warmup),
        grad_clip=float(clip),
        eval_every=max(5, int(steps) // 10),
        eval_batches=2,
        seed=int(form.seed),
    )
    label = (
        f"{layers}L d{width} {form.heads}h, {WIRINGS[form.wiring]}, lr {lr:g}, warmup {form.warmup}, "
        f"{steps} steps, clip {'off' if not clip else clip}, {form.init} init"
    )
    return JobSpec(configs, settings, form.init, label)


def server_limits() -> ServerLimits:
    """This server's limits (training on or off, tokens and seconds a run, runs a visitor)."""
    return limits.server_limits()


@cached
def sample(job_id: str, name: str, ids: tuple[int, ...], _model) -> list[int]:
    """40 new tokens from a trained model (cached per run, model and prompt; `_model` is the run's `name` model),
    within a reservation of the server's memory."""
    with memory.reserve(
        sizes.sampling_nbytes(_model.config, len(ids), SAMPLE_TOKENS),
        f"a continuation of {SAMPLE_TOKENS} tokens on {job_id}",
    ):
        return generate(_model, list(ids), SAMPLE_TOKENS, temperature=0.8, top_k=40, seed=0)


@cached
def warmup_baseline() -> float:
    """The training text's frequency-only loss, the reference beside the warmup outcome."""
    return warmup.frequency_baseline(corpus_tokens())


@dataclass
class WarmupReading:
    """What the warmup view draws, read off the runs' losses so far."""

    outcome: object | None  # warmup.outcome: the sentence and its rule (None before it can be read)
    verdict: str | None
    baseline: float
    bands: dict  # arm: mean loss band over seeds
    grids: dict  # arm: each layer's FFN gradient norm per step


def warmup_reading(logs: dict, finished: bool, with_warmup: int) -> WarmupReading:
    baseline = warmup_baseline()
    out = warmup.outcome(logs, baseline)
    verdict = warmup.verdict_so_far(out, finished, with_warmup) if out is not None else None
    return WarmupReading(
        out,
        verdict,
        baseline,
        {arm: warmup.mean_band(logs, arm) for arm in warmup.ARMS},
        {arm: warmup.ffn_grad_grid(logs, arm) for arm in warmup.ARMS},
    )
