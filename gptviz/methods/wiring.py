"""Same weights, two wirings: measurements that compare a pre-norm and a post-norm run of one set of weights.

`twin_models` builds one set of random weights and two GPTs that share it (config.replace(norm=...)).
`measure_wiring` runs one of them on a prompt with a single forward and a single backward pass for the
language-model loss and returns, per layer: the residual stream's norm and standard deviation, the standard
deviation of what each sub-layer adds, the gradient norm of the layer's weights, and the attention patterns.
`describe_gradients` turns two such measurements into plain statements computed from the numbers, set
against Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture".

Gradients come from torch.autograd.grad, so no `.grad` is written on the model: a model shared between
threads (a Streamlit server) stays untouched.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..model.config import GPTConfig
from ..model.hooks import act_name, capturing
from ..model.model import GPT
from ..model.sizes import SUM_CHUNK

INITS = {
    "gpt2": "GPT-2: normal(0, 0.02), residual projections / sqrt(2L)",
    "xavier": "Xavier-uniform matrices (Xiong et al. 2020)",
}
# Parameter groups inside a block, by the start of the parameter's name after "blocks.{i}.".
GROUPS = {"attention": ("attn.",), "MLP": ("mlp.",), "norms": ("ln_1.", "ln_2.")}
# The FFN matrices Xiong et al. plot (their W^1, W^2): our c_fc and c_proj weights.
FFN_WEIGHTS = ("mlp.c_fc.weight", "mlp.c_proj.weight")
# A trend whose last/first ratio stays within these bounds is called level.
LEVEL_BAND = (0.8, 1.25)


def twin_models(config: GPTConfig, seed: int = 0, init: str = "gpt2") -> dict[str, GPT]:
    """{"pre": GPT, "post": GPT}: one set of random weights (drawn once, from `seed`) wired both ways.

    The post-norm model is built on the meta device and given the pre-norm model's tensors
    (load_state_dict(assign=True)), so the two share storage: same state_dict, no second copy."""
    pre = GPT(config.replace(norm="pre"), init=init, seed=seed).eval()
    with torch.device("meta"):
        post = GPT(config.replace(norm="post"), init=init)
    post.load_state_dict(pre.state_dict(), assign=True)
    if config.tie_weights:  # assign=True gives lm_head its own Parameter; tie it again
        post.lm_head.weight = post.wte.weight
    return {"pre": pre, "post": post.eval()}


def random_tokens(n: int, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """n token ids drawn uniformly from the vocabulary (a prompt with no structure at all)."""
    return torch.randint(0, vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


@dataclass
class WiringStats:
    """One wiring's measurements on one prompt. Arrays are numpy (picklable, cheap to cache)."""

    norm: str
    n_layers: int
    loss: float  # mean next-token cross-entropy over the prompt (nats)
    resid_norm: np.ndarray  # [L + 1] mean L2 norm per position: embeddings, then after each block
    resid_std: np.ndarray  # [L + 1] standard deviation of the residual stream's entries
    attn_out_std: np.ndarray  # [L] std of what each attention sub-layer adds
    mlp_out_std: np.ndarray  # [L] std of what each MLP sub-layer adds
    grad_norm: np.ndarray  # [L] L2 norm of the gradient of all of block i's parameters
    grad_by_group: dict[str, np.ndarray]  # {"attention"|"MLP"|"norms": [L]}
    grad_by_param: dict[str, np.ndarray]  # {"mlp.c_fc.weight": [L], ...}
    embed_grad_norm: float  # token + position embeddings (the token matrix is the tied LM head)
    patterns: np.ndarray  # [L, H, T, T] attention weights
    n_tokens: int
    n_params: int
    weights_checksum: float  # sum of |w| over every parameter: equal for twins
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def grad(self, which: str = "block") -> np.ndarray:
        """Per-layer gradient norms: "block" (all of a block's parameters), a group name, or "ffn"
        (the FFN weight matrices, as in Xiong et al.)."""
        if which == "block":
            return self.grad_norm
        if which == "ffn":
            return np.sqrt(sum(self.grad_by_param[p] ** 2 for p in FFN_WEIGHTS))
        return self.grad_by_group[which]


# Elements summed in float64 at a time: a whole-matrix .double() of gpt2-small's token embedding is 295 MiB, and the
# squares another 295 MiB, which the Norms page's reservation does not count; chunks keep that to 16 MiB
# (tests/serve/test_wiring_memory.py checks the reservation against the resident memory's growth).


def _chunked_sum(t: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """sum(fn(t)) in float64, SUM_CHUNK elements at a time."""
    return float(sum(fn(chunk.double()).sum() for chunk in t.detach().reshape(-1).split(SUM_CHUNK)))


def sum_of_squares(t: torch.Tensor) -> float:
    return _chunked_sum(t, torch.square)


def weights_checksum(model: GPT) -> float:
    return sum(_chunked_sum(p, torch.abs) for p in model.parameters())


def measure_wiring(model: GPT, ids: Sequence[int] | torch.Tensor) -> WiringStats:
    """One forward and one backward pass of the LM loss on `ids` (one sequence, at least 2 tokens)."""
    started = time.perf_counter()
    ids = torch.as_tensor(list(ids) if not isinstance(ids, torch.Tensor) else ids).flatten()
    if ids.numel() < 2:
        raise ValueError("the language-model loss needs at least two tokens (one to predict the next)")
    ids = model.check_ids(ids)  # [1, T], with a clear message on out-of-range ids or a too-long prompt
    L = model.config.n_layers
    names = [
        f"blocks.{i}.{h}"
        for i in range(L)
        for h in ("hook_resid_pre", "hook_attn_out", "hook_mlp_out", "attn.hook_pattern")
    ]
    names.append(act_name("resid_post", L - 1))
    block_params = [[(n, p) for n, p in block.named_parameters()] for block in model.blocks]
    flat = [p for params in block_params for _, p in params]
    embeds = [model.wte.weight, model.wpe.weight]
    with capturing(frozenset(names)) as store, torch.enable_grad():
        logits = model(ids)
        loss = F.cross_entropy(logits[0, :-1].float(), ids[0, 1:].to(logits.device))
        grads = torch.autograd.grad(loss, flat + embeds)
    block_grads, embed_grads = grads[: len(flat)], grads[len(flat) :]

    resid = [store[act_name("resid_pre", i)][0] for i in range(L)] + [store[act_name("resid_post", L - 1)][0]]
    grad_norm = np.zeros(L)
    by_group = {g: np.zeros(L) for g in GROUPS}
    by_param: dict[str, np.ndarray] = {}
    k = 0
    for i, params in enumerate(block_params):
        sq_total = 0.0
        for name, _ in params:
            sq = sum_of_squares(block_grads[k])
            k += 1
            sq_total += sq
            by_param.setdefault(name, np.zeros(L))[i] = math.sqrt(sq)
            for group, prefixes in GROUPS.items():
                if name.startswith(prefixes):
                    by_group[group][i] += sq
        grad_norm[i] = math.sqrt(sq_total)
    by_group = {g: np.sqrt(v) for g, v in by_group.items()}
    return WiringStats(
        norm=model.config.norm,
        n_layers=L,
        loss=float(loss.detach()),
        resid_norm=np.array([float(r.norm(dim=-1).mean()) for r in resid]),
        resid_std=np.array([float(r.std()) for r in resid]),
        attn_out_std=np.array([float(store[act_name("attn_out", i)].std()) for i in range(L)]),
        mlp_out_std=np.array([float(store[act_name("mlp_out", i)].std()) for i in range(L)]),
        grad_norm=grad_norm,
        grad_by_group=by_group,
        grad_by_param=by_param,
        embed_grad_norm=math.sqrt(sum(sum_of_squares(g) for g in embed_grads)),
        patterns=torch.stack([store[act_name("pattern", i)][0] for i in range(L)]).numpy(),
        n_tokens=int(ids.shape[1]),
        n_params=sum(p.numel() for p in model.parameters()),
        weights_checksum=weights_checksum(model),
        seconds=time.perf_counter() - started,
    )


def compare_wirings(
    config: GPTConfig, ids, seed: int = 0, init: str = "gpt2", progress: Callable[[str], None] | None = None
) -> dict[str, WiringStats]:
    """Build twins from one set of weights and measure both on `ids`: {"pre": ..., "post": ...}."""
    say = progress or (lambda message: None)
    say(f"Drawing one set of random weights ({init} init, seed {seed})")
    twins = twin_models(config, seed, init)
    out = {}
    for norm in ("pre", "post"):
        say(f"{norm}-norm: forward and backward pass")
        out[norm] = measure_wiring(twins[norm], ids)
    return out


# ---- attention differences -------------------------------------------------------------------------------


def attention_tv_distance(pre: np.ndarray, post: np.ndarray) -> np.ndarray:
    """[L, H]: mean over query positions of the total-variation distance between the two wirings'
    attention rows (0 = same weights, 1 = disjoint). Inputs are [L, H, T, T] patterns."""
    return 0.5 * np.abs(post - pre).sum(-1).mean(-1)


def relative_entropy(patterns: np.ndarray) -> np.ndarray:
    """[L, H]: mean over query positions 1..T-1 of each attention row's entropy divided by that of a
    uniform row over the same keys, ln(i + 1): 1 = uniform attention, 0 = all weight on one key."""
    T = patterns.shape[-1]
    if T < 2:
        return np.ones(patterns.shape[:2])
    p = np.clip(patterns[..., 1:, :], 1e-30, 1.0)
    entropy = -(patterns[..., 1:, :] * np.log(p)).sum(-1)  # [L, H, T - 1]
    return (entropy / np.log(np.arange(2, T + 1))).mean(-1)


# ---- what the gradient measurement shows ---------------------------------------------------------------


@dataclass
class Trend:
    first: float
    last: float
    ratio: float  # last / first
    per_layer: float  # factor per layer from a least-squares fit of log(value) against layer
    word: str  # "shrinks", "grows", "stays roughly level" or "has no clear trend"
    outlier: int | None  # the layer furthest from the fit when it sits > 3x away from it, else None


def trend(values: Sequence[float], band: tuple[float, float] = LEVEL_BAND) -> Trend:
    """How a positive per-layer quantity changes from the first layer to the last. The endpoints and
    the fitted slope must agree before a curve is said to move; when they disagree (one layer far from
    the rest, say) the trend is "has no clear trend"."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError("trend needs positive, finite values")
    ratio = float(v[-1] / v[0])
    x, logv = np.arange(v.size), np.log(v)
    slope, intercept = np.polyfit(x, logv, 1) if v.size > 1 else (0.0, float(logv[0]))
    per_layer = float(np.exp(slope))
    fitted = per_layer ** (v.size - 1)
    lo, hi = band
    if ratio < lo and fitted < lo:
        word = "shrinks"
    elif ratio > hi and fitted > hi:
        word = "grows"
    elif lo <= ratio <= hi and lo <= fitted <= hi:
        word = "stays roughly level"
    else:
        word = "has no clear trend"
    residual = np.abs(logv - (intercept + slope * x))
    outlier = int(residual.argmax()) if v.size > 2 and residual.max() > math.log(3) else None
    return Trend(float(v[0]), float(v[-1]), ratio, per_layer, word, outlier)


@dataclass
class GradientReading:
    pre: Trend
    post: Trend
    ratio: Trend  # post / pre, layer by layer
    statements: list[str]  # what this measurement shows, in words, from the numbers
    paper: list[tuple[str, bool]]  # (a claim of Xiong et al., whether this measurement agrees)


_PLURAL = {
    "shrinks": "shrink",
    "grows": "grow",
    "stays roughly level": "stay roughly level",
    "has no clear trend": "show no clear trend",
}


def _say(name: str, t: Trend, plural: bool = False, unit: str = "") -> str:
    text = (
        f"{name} {_PLURAL[t.word] if plural else t.word} from the first layer to the last: "
        f"{t.first:.3g}{unit} → {t.last:.3g}{unit} "
        f"(×{t.ratio:.2f}; the fitted line gives ×{t.per_layer:.3f} per layer)."
    )
    if t.outlier is not None:
        text += f" Layer {t.outlier} stands apart from the others."
    return text


def describe_gradients(pre: Sequence[float], post: Sequence[float]) -> GradientReading:
    """Compare per-layer gradient norms of the two wirings (input side first) and say what they show,
    beside the claims of Xiong et al. (2020)."""
    pre, post = np.asarray(pre, float), np.asarray(post, float)
    if pre.shape != post.shape:
        raise ValueError("the two wirings must have the same number of layers")
    if pre.size < 2:
        raise ValueError("a trend across layers needs at least two layers")
    t_pre, t_post, t_ratio = trend(pre), trend(post), trend(post / pre)
    statements = [
        _say("Pre-norm gradient norms", t_pre, plural=True),
        _say("Post-norm gradient norms", t_post, plural=True),
        _say("The post/pre ratio", t_ratio),
    ]
    bigger = "larger" if post[-1] > pre[-1] else "smaller"
    statements.append(
        f"At the last layer post-norm's gradient is {bigger} than pre-norm's "
        f"(×{post[-1] / pre[-1]:.2f}); at the first layer ×{post[0] / pre[0]:.2f}."
    )
    paper = [
        ("Near the output, post-norm's gradients are larger than pre-norm's", bool(post[-1] > pre[-1])),
        (
            "Post-norm's gradients are large relative to pre-norm's near the output: the post/pre ratio "
            "grows from the first layer to the last",
            t_ratio.word == "grows",
        ),
        ("Post-norm's gradient norms grow toward the output (their Figure 3)", t_post.word == "grows"),
        ("Pre-norm's gradient norms stay level across layers (their Figure 3)", t_pre.word == "stays roughly level"),
    ]
    return GradientReading(t_pre, t_post, t_ratio, statements, paper)


def depth_exponent(depths: Sequence[int], values: Sequence[float]) -> float:
    """b in value ≈ a · depth^b (least squares on log-log); Xiong et al.: pre-norm b = -1/2, post-norm 0."""
    d, v = np.asarray(depths, float), np.asarray(values, float)
    if d.size < 2 or np.any(v <= 0):
        raise ValueError("an exponent needs at least two depths and positive values")
    return float(np.polyfit(np.log(d), np.log(v), 1)[0])


# ---- depth sweep: the 1/sqrt(L) claim ----------------------------------------------------------------------


def depth_sweep(
    config: GPTConfig,
    depths: Sequence[int],
    ids,
    seed: int = 0,
    init: str = "gpt2",
    which: str = "ffn",
    progress: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """Last-layer gradient norm of both wirings at several depths (same width, same prompt):
    {"depth": [n], "pre": [n], "post": [n]}. Xiong et al. bound the pre-norm value by O(1/sqrt(L))."""
    say = progress or (lambda message: None)
    out = {"depth": np.array(list(depths)), "pre": np.zeros(len(depths)), "post": np.zeros(len(depths))}
    for j, depth in enumerate(depths):
        say(f"{depth} layers")
        stats = compare_wirings(config.replace(n_layers=int(depth)), ids, seed, init)
        for norm in ("pre", "post"):
            out[norm][j] = stats[norm].grad(which)[-1]
    return out


# ---- trained twins -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainedTwins:
    stem: str  # "shakespeare" for shakespeare-pre / shakespeare-post
    pre: str  # the bundled models' names
    post: str


def trained_twins(names: Sequence[str]) -> list[TrainedTwins]:
    """Pairs of model names "<stem>-pre" / "<stem>-post" (e.g. from weights.bundled_models())."""
    names = set(names)
    return [
        TrainedTwins(name[:-4], name, f"{name[:-4]}-post")
        for name in sorted(names)
        if name.endswith("-pre") and f"{name[:-4]}-post" in names
    ]


def load_history(folder) -> dict | None:
    """A model folder's history.json ({"settings", "final", "history": [step records]}), or None when
    it is missing or unreadable."""
    path = Path(folder) / "history.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("history"), list) or not data["history"]:
        return None
    return data


def differing_settings(settings: dict[str, dict]) -> dict[str, dict[str, object]]:
    """Training settings that differ between runs: {setting: {run: value}} (empty when they all agree); a setting
    only some runs have is None for the others. Values compare as JSON data (the records are JSON): a tuple like
    a list, 1 like 1.0, nested dicts by content. evaluate.recipe_differences compares checkpoints' stages with it."""
    keys = sorted({k for s in settings.values() for k in s})
    values = {k: {run: s.get(k) for run, s in settings.items()} for k in keys}
    return {k: by_run for k, by_run in values.items() if _differ(list(by_run.values()))}


def _differ(values: list) -> bool:
    data = [json.loads(json.dumps(v, sort_keys=True)) for v in values]
    return any(d != data[0] for d in data[1:])
