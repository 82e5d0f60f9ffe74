"""The Pre-norm vs post-norm page's computations: one set of random weights measured both ways, the paper's
setting (gptviz.training.xiong), the bundled twins' captures, matched heads, records and histories, and their sampling.
Each reserves what it holds in flight (gptviz.serve.memory), keeps its result in the results cache, and returns plain
data the page and its views (gptviz/app/views/norms_*.py) draw."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from ... import PRESETS, GPTConfig
from ... import methods as analysis
from ...methods import bigram_baseline, wiring
from ...model import sizes, weights
from ...model.generate import generate
from ...model.params import total_params
from ...model.tokenizer import token_labels
from ...serve import limits, memory
from ...training import recipe_trials, training_log, xiong
from ...training.evaluate import corpus_of, recipe_differences
from ...training.evaluate import twins_caveat as caveat_of_records
from ...training.snapshots import formed_step, load_snapshots
from .. import keys as K
from .. import model_service
from . import cached

GPT2_VOCAB = 50257
PAPER_BASE = "small-4l"  # the vocabulary, activation and MLP ratio of the bundled twins; shape from xiong.PAPER
FORMED_DETECTORS = ("previous-token", "induction")  # the heads whose forming the history marks
PROBE_LENGTH = 50  # the matching probe: this many random training ids (fewer in a short context), then again
SIDE_TOP_K = 5


# ---- same weights, two wirings --------------------------------------------------------------------------------


@cached
def measure_both(config_json: str, ids: tuple[int, ...], seed: int, init: str) -> dict[str, wiring.WiringStats]:
    """Both wirings of one set of weights (built once and shared), measured on `ids`."""
    config = GPTConfig.from_dict(json.loads(config_json))
    with memory.reserve(sizes.measuring_nbytes(config, len(ids)), f"measuring {config.name} both ways"):
        stats = wiring.compare_wirings(config, ids, seed, init)
    for s in stats.values():  # half precision is plenty for drawing; it halves what the cache holds
        s.patterns = s.patterns.astype(np.float16)
    return stats


def random_ids(n: int, vocab_size: int, seed: int) -> tuple[int, ...]:
    """Seeded tokens drawn uniformly from the vocabulary (no structure at all)."""
    return tuple(int(i) for i in wiring.random_tokens(n, vocab_size, seed))


def width_choices(config: GPTConfig) -> list[int]:
    """Widths that keep the preset's head count (halving down from its d_model)."""
    out = []
    for k in range(6):
        width = config.d_model // 2**k
        if config.d_model % 2**k == 0 and width % config.n_heads == 0 and width >= 2 * config.n_heads:
            out.append(width)
    return out or [config.d_model]


def fmt_params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"


def measuring_refusal(config: GPTConfig, what: str) -> str | None:
    """Why measuring `config` does not fit the server's memory, or None when it does."""
    need, allowed = sizes.norms_model_nbytes(config), limits.server_limits().memory_mb
    if need <= allowed * 2**20:
        return None
    return (
        f"{what} has {fmt_params(total_params(config))} parameters: measuring it needs about "
        f"{need / 2**30:,.1f} GiB, more than the {allowed:,} MiB this server allows. Choose a smaller width or "
        "depth."
    )


def attention_difference(pre: np.ndarray, post: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The wirings' attention [L, H, T, T] compared: the mean total-variation distance of their rows per head, and
    each wiring's mean entropy as a share of a uniform row's."""
    return (
        wiring.attention_tv_distance(pre, post),
        float(wiring.relative_entropy(pre).mean()),
        float(wiring.relative_entropy(post).mean()),
    )


# ---- the bundled twins ------------------------------------------------------------------------------------------


def training_records(bundled: dict, names: dict[str, str]) -> dict[str, dict]:
    """Each twin's training record from its config.json."""
    return {
        norm: json.loads((bundled[name] / "config.json").read_text()).get("training", {})
        for norm, name in names.items()
    }


def recipe_of(bundled: dict, names: dict[str, str]) -> list[str]:
    """How the twins' training recipes differ (evaluate.recipe_differences); [] when trained alike."""
    records = training_records(bundled, names)
    return recipe_differences(records["pre"], records["post"])


def other_recipe_trial(bundled: dict, names: dict[str, str]) -> list[dict[str, str]] | None:
    """The pre-norm twin retrained on post-norm's recipe, checked, beside both bundled twins' checks (a row per bar);
    None where any of the three check.json files is missing."""
    folders = {norm: Path(bundled[name]) for norm, name in names.items()}
    checks = {
        "pre-norm on post-norm's recipe": recipe_trials.read_check(folders["pre"] / recipe_trials.OTHER_RECIPE_CHECK),
        "post-norm (bundled)": recipe_trials.read_check(folders["post"] / "check.json"),
        "pre-norm (bundled)": recipe_trials.read_check(folders["pre"] / "check.json"),
    }
    return recipe_trials.bar_rows(checks) if all(checks.values()) else None


def other_recipe_probe(bundled: dict, names: dict[str, str]) -> tuple[float, float, int] | None:
    """The post-norm twin on pre-norm's recipe: its logged induction score at the start and at best (trial logs)."""
    return recipe_trials.logged_induction(Path(bundled[names["post"]]) / recipe_trials.OTHER_RECIPE_LOG)


def twins_caveat(bundled: dict, names: dict[str, str]) -> str | None:
    """evaluate.twins_caveat on the two bundled models' training records (their config.json)."""
    records = training_records(bundled, names)
    return caveat_of_records(records["pre"], records["post"])


def probe_length(cfg: GPTConfig) -> int:
    return min(PROBE_LENGTH, cfg.n_ctx // 2)


def twins_captures(specs: dict[str, model_service.ModelSpec], ids: dict[str, tuple[int, ...]], n_layers: int) -> dict:
    """Each model's (logits [T, vocab], cache of every layer's attention, [T, ...] tensors) on its ids for the prompt
    (the same ids for the bundled twins; each its own tokenizer's for a pair that differ): the one prompt of each
    batched capture in the capture cache (logits[0], cache.prompt(0): views), as the figures and tables read it."""
    captures = {
        norm: model_service.capture_cache(spec, ids[norm], model_service.pattern_names(n_layers))
        for norm, spec in specs.items()
    }
    return {norm: (logits[0], cache.prompt(0)) for norm, (logits, cache) in captures.items()}


@cached
def head_matches(specs: dict[str, model_service.ModelSpec], cfg: GPTConfig) -> tuple[list, dict, float]:
    """The twins' heads paired by their patterns on one probe both read (analysis.match_heads), each head's
    previous-token and induction scores there ({"pre"/"post": (prev [L, H], induction [L, H])}), and the median
    similarity of every pre-norm head with every post-norm head (what a pair picked blindly scores)."""
    length = probe_length(cfg)  # random ids both vocabularies have (GPT-1's 40,478 are fewer than GPT-2's)
    vocab = min(model_service.load_model(spec).config.vocab_size for spec in specs.values())
    seq = tuple(analysis.induction_sequence(vocab, length, ids=model_service.training_vocab(specs["pre"])).tolist())
    pats = {
        norm: model_service.capture_cache(spec, seq, model_service.pattern_names(cfg.n_layers))[1].prompt(0).patterns()
        for norm, spec in specs.items()
    }
    scores = {
        norm: (analysis.previous_token_scores(p), analysis.induction_scores_from(p, length)) for norm, p in pats.items()
    }
    typical = float(analysis.pattern_similarity(pats["pre"], pats["post"]).median())
    return analysis.match_heads(pats["pre"], pats["post"]), scores, typical


def top_tokens(
    logits: torch.Tensor, k: int = SIDE_TOP_K, labels=token_labels
) -> tuple[torch.Tensor, list[tuple[str, float]]]:
    """The next-token probabilities after the last position (softmax of its logits) and the k likeliest (`labels`:
    the model's own tokenizer's)."""
    probs = torch.softmax(logits[-1].float(), -1)
    top = probs.topk(k)
    return probs, list(zip(labels(top.indices.tolist()), top.values.tolist(), strict=True))


def next_token_at(logits: torch.Tensor, pos: int, labels=token_labels) -> tuple[list[tuple[str, float]], float]:
    """The ten likeliest next tokens after position `pos`, and the entropy of the full distribution (nats)."""
    probs = torch.softmax(logits[pos].float(), -1)
    top = probs.topk(10)
    return (
        [(label, float(p)) for label, p in zip(labels(top.indices.tolist()), top.values, strict=True)],
        float(-(probs * probs.clamp_min(1e-30).log()).sum()),
    )


@cached
def generate_cached(
    spec: model_service.ModelSpec,
    ids: tuple[int, ...],
    new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
) -> list[int]:
    model = model_service.load_model(spec)
    with memory.reserve(
        sizes.sampling_nbytes(model.config, len(ids), new_tokens),
        f"a continuation of {new_tokens} tokens on {spec.name}",
    ):
        return generate(model, list(ids), new_tokens, temperature, top_k, None, seed)


@cached
def reference_losses(model_name: str) -> dict[str, float]:
    """Uniform guess and the bigram baseline on the held-out text the bundled model validated on."""
    corpus = corpus_of(json.loads((weights.bundled_models()[model_name] / "config.json").read_text()))
    bigram = bigram_baseline(corpus.train, corpus.val, GPT2_VOCAB)
    return {"uniform guess, ln 50257": math.log(GPT2_VOCAB), "bigram baseline": bigram["nats"]}


def histories(bundled: dict, names: dict[str, str]) -> dict[str, dict | None]:
    """Each twin's history.json (None where there is none readable)."""
    return {norm: wiring.load_history(bundled[name]) for norm, name in names.items()}


def val_losses(history: dict) -> list[float]:
    """The validation losses of a training history, in step order."""
    return [r["val_loss"] for r in history["history"] if r.get("val_loss") is not None]


def train_logs(bundled: dict, names: dict[str, str]) -> dict:
    """Each twin's train.log, every stage."""
    return {norm: training_log.read_train_log(bundled[name]) for norm, name in names.items()}


@cached
def formed_at(folder: Path) -> dict[str, int | None]:
    """The step each kind of head formed in a bundled model (snapshots.formed_step over its stage-1 snapshots, the
    rule Heads forming uses); all None when it has no snapshots."""
    try:
        snaps = load_snapshots(folder)
    except (OSError, ValueError, KeyError):
        return dict.fromkeys(FORMED_DETECTORS)
    return {what: (found[0] if (found := formed_step(snaps, what)) else None) for what in FORMED_DETECTORS}


# ---- the paper's setting ----------------------------------------------------------------------------------------


@cached
def paper_gradients(setting: xiong.ProbeSetting) -> xiong.FFNGradients:
    from ...serve.training_jobs import corpus_tokens

    return xiong.measure_ffn_gradients(setting, PRESETS[PAPER_BASE], corpus_tokens())


@cached
def paper_scaling(setting: xiong.ProbeSetting, depths: tuple[int, ...], matrix: str) -> xiong.DepthScaling:
    from ...serve.training_jobs import corpus_tokens

    return xiong.depth_scaling(setting, PRESETS[PAPER_BASE], corpus_tokens(), depths, matrix)


@cached
def twins_gradients(pre: str, post: str, setting: xiong.ProbeSetting) -> xiong.FFNGradients:
    from ...serve.training_jobs import corpus_tokens

    loaded = {
        n: model_service.load_model(model_service.ModelSpec(K.SOURCE_BUNDLED, name, n))
        for n, name in (("pre", pre), ("post", post))
    }
    return xiong.trained_ffn_gradients(loaded, corpus_tokens(), setting)


def paper_twins() -> wiring.TrainedTwins | None:
    """The first bundled pre/post pair, which the paper's measurement adds beside its own settings."""
    pairs = wiring.trained_twins(list(weights.bundled_models()))
    return pairs[0] if pairs else None


def paper_deepest() -> GPTConfig:
    """The depth scaling's deepest model at xiong.PAPER's shape."""
    return xiong.PAPER.config(PRESETS[PAPER_BASE], max(xiong.PAPER_DEPTHS))
