"""Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture", measured at their setting.

Their Figure 3 and Theorem 1 are expectations at initialisation: Xavier-initialised weights, the gradient norm
of each layer's FFN weight matrices (W^1, W^2: our `mlp.c_fc` and `mlp.c_proj`), averaged over data. They claim
(a) post-norm's FFN gradient norm grows toward the output layers, (b) pre-norm's stays level across layers and
(c) pre-norm's (last-layer) gradient shrinks with depth like d·sqrt(ln d / L), i.e. as L^(-1/2).

`measure_ffn_gradients` draws twin wirings (one set of weights, gptviz.methods.wiring.twin_models) for several seeds and
runs each on several batches of real text; `depth_scaling` repeats that at several depths; `check_claims` turns
the numbers into a verdict per claim with the thresholds stated beside it. `trained_ffn_gradients` measures two
given models (the bundled twins) on the same batches. Nothing writes `.grad`: gradients come from autograd.grad.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..methods.wiring import LEVEL_BAND, trend, twin_models
from ..model.config import GPTConfig
from ..model.hooks import capturing
from ..model.model import GPT
from .train import batches

# The FFN matrices, named as in the paper: W^1 expands d -> 4d (c_fc), W^2 projects back (c_proj).
MATRICES = {"W1": "mlp.c_fc.weight", "W2": "mlp.c_proj.weight"}
# "model": embeddings as drawn (small: the position table is normal(0, 0.02); the token table, tied to the output
# layer, is Xavier-uniform's std 0.006 under Xavier init), so the stream starts small; "unit": the first block's
# input (token + position embedding) divided by its own spread, so it has unit variance per entry, as the paper's
# analysis assumes of the first layer's input. Scaling the two tables by one fixed factor gave a spread of 0.74
# under Xavier init, whose token table is not std 0.02.
INPUT_SCALES = {
    "model": "embeddings as drawn (spread 0.02-0.03)",
    "unit": "first block's input scaled to unit variance (the paper's input)",
}
UNIT_INPUT_HOOK = "blocks.0.hook_resid_pre"
# |b + 1/2| within this of the fitted depth exponent b counts as the paper's L^(-1/2) scaling.
EXPONENT_TOLERANCE = 0.15


@dataclass(frozen=True)
class ProbeSetting:
    """What one measurement runs: the shape, the init, the input scale and how much data it averages over."""

    width: int = 128
    depth: int = 6
    n_heads: int = 4
    init: str = "xavier"
    input_scale: str = "model"
    seeds: int = 3
    n_batches: int = 2
    batch_size: int = 4
    block: int = 32
    data_seed: int = 0

    def __post_init__(self):
        if self.init not in ("gpt2", "xavier"):
            raise ValueError(f"init must be 'gpt2' or 'xavier', got {self.init!r}")
        if self.input_scale not in INPUT_SCALES:
            raise ValueError(f"input_scale must be one of {', '.join(INPUT_SCALES)}, got {self.input_scale!r}")
        for name in ("width", "depth", "n_heads", "seeds", "n_batches", "batch_size", "block"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if self.block < 2:
            raise ValueError("the language-model loss needs windows of at least 2 tokens")

    def config(self, base: GPTConfig, depth: int | None = None) -> GPTConfig:
        """`base` (vocabulary, activation, MLP ratio) at this width and depth, context = block, no dropout."""
        depth = self.depth if depth is None else depth
        return base.replace(
            n_layers=int(depth),
            d_model=self.width,
            n_heads=self.n_heads,
            n_ctx=self.block,
            dropout=0.0,
            name=f"xiong-{depth}L-d{self.width}",
        )


# The setting the Norms page reproduces: the paper's 6 layers and Xavier init; width 128 rather than their 512
# (a 512-wide model's 50,257-token embedding alone makes one pass several seconds on a 2-core CPU); windows of
# 4 x 32 tokens, 3 seeds x 2 batches, so the whole check (three depths besides) takes tens of seconds there.
PAPER = ProbeSetting()
PAPER_DEPTHS = (2, 4, 8)


def text_batches(tokens: torch.Tensor, setting: ProbeSetting) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`n_batches` batches of real text windows (inputs, next-token targets), the same for every seed and wiring."""
    data = batches(tokens, setting.batch_size, setting.block, torch.Generator().manual_seed(setting.data_seed))
    return [next(data) for _ in range(setting.n_batches)]


def _scale_edits(input_scale: str) -> dict:
    if input_scale == "model":
        return {}

    def scale(x: torch.Tensor, offset: int) -> torch.Tensor:
        # a constant for the gradient (detached), as a fixed rescale of the input would be
        return x / x.detach().std()

    return {UNIT_INPUT_HOOK: (scale,)}


def ffn_grad_norms(model: GPT, x: torch.Tensor, y: torch.Tensor, input_scale: str = "model") -> np.ndarray:
    """[L, 2]: the Frobenius norm of the LM loss's gradient for each layer's W^1 and W^2 on one batch."""
    params = [dict(block.named_parameters())[name] for block in model.blocks for name in MATRICES.values()]
    with capturing(frozenset(), _scale_edits(input_scale)), torch.enable_grad():
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten().to(logits.device))
        grads = torch.autograd.grad(loss, params)
    return np.array([float(g.double().norm()) for g in grads]).reshape(model.config.n_layers, len(MATRICES))


@dataclass
class FFNGradients:
    """Per-sample FFN gradient norms of each wiring: {"pre"/"post": [samples, L, 2]}, a sample being one
    (seed, batch) pair; the spread over samples is what the bands show."""

    label: str
    norms: dict[str, np.ndarray]
    samples: str  # what a sample is, for people ("3 seeds x 2 batches")
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def values(self, norm: str, matrix: str = "W2") -> np.ndarray:
        return self.norms[norm][:, :, list(MATRICES).index(matrix)]

    def mean(self, norm: str, matrix: str = "W2") -> np.ndarray:
        return self.values(norm, matrix).mean(0)

    def sd(self, norm: str, matrix: str = "W2") -> np.ndarray:
        v = self.values(norm, matrix)
        return v.std(0, ddof=1) if v.shape[0] > 1 else np.zeros(v.shape[1])

    @property
    def n_layers(self) -> int:
        return next(iter(self.norms.values())).shape[1]


def measure_ffn_gradients(
    setting: ProbeSetting,
    base: GPTConfig,
    tokens: torch.Tensor,
    depth: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> FFNGradients:
    """Twin wirings for seeds 0..seeds-1, each run on the same text batches."""
    say = progress or (lambda message: None)
    started = time.perf_counter()
    config = setting.config(base, depth)
    data = text_batches(tokens, setting)
    out: dict[str, list[np.ndarray]] = {"pre": [], "post": []}
    for seed in range(setting.seeds):
        say(f"{config.n_layers} layers, seed {seed + 1} of {setting.seeds}")
        twins = twin_models(config, seed, setting.init)
        for norm, model in twins.items():
            out[norm] += [ffn_grad_norms(model, x, y, setting.input_scale) for x, y in data]
    return FFNGradients(
        f"{setting.init} init, {config.n_layers} layers, d_model {setting.width}",
        {n: np.stack(v) for n, v in out.items()},
        f"{setting.seeds} seeds × {setting.n_batches} batches of {setting.batch_size}×{setting.block} tokens",
        time.perf_counter() - started,
    )


def trained_ffn_gradients(
    models: dict[str, GPT], tokens: torch.Tensor, setting: ProbeSetting, label: str = "trained twins"
) -> FFNGradients:
    """Two given models ({"pre": ..., "post": ...}) on the setting's batches; the spread is over batches only."""
    started = time.perf_counter()
    data = text_batches(tokens, setting)
    norms = {n: np.stack([ffn_grad_norms(m, x, y) for x, y in data]) for n, m in models.items()}
    return FFNGradients(
        label,
        norms,
        f"{setting.n_batches} batches of {setting.batch_size}×{setting.block} tokens",
        time.perf_counter() - started,
    )


@dataclass
class DepthScaling:
    """The last layer's FFN gradient norm of each wiring at several depths (mean and sd over samples)."""

    depths: np.ndarray
    mean: dict[str, np.ndarray]  # {"pre"/"post": [depths]}
    sd: dict[str, np.ndarray]
    matrix: str

    def exponent(self, norm: str) -> float:
        """b in gradient ≈ a·L^b (least squares on log-log); the paper: pre-norm −1/2, post-norm 0."""
        return float(np.polyfit(np.log(self.depths), np.log(self.mean[norm]), 1)[0])


def depth_scaling(
    setting: ProbeSetting,
    base: GPTConfig,
    tokens: torch.Tensor,
    depths: Sequence[int],
    matrix: str = "W2",
    progress: Callable[[str], None] | None = None,
) -> DepthScaling:
    """measure_ffn_gradients at each depth; the last layer's `matrix` kept."""
    if len(depths) < 2:
        raise ValueError("a depth scaling needs at least two depths")
    depths = sorted(int(d) for d in depths)
    runs = [measure_ffn_gradients(setting, base, tokens, d, progress) for d in depths]
    return DepthScaling(
        np.array(depths),
        {n: np.array([r.mean(n, matrix)[-1] for r in runs]) for n in ("pre", "post")},
        {n: np.array([r.sd(n, matrix)[-1] for r in runs]) for n in ("pre", "post")},
        matrix,
    )


@dataclass
class Claim:
    key: str  # "post grows", "pre level", "pre depth"
    text: str  # the paper's claim, in words
    reproduced: bool
    measured: str  # what the numbers were
    threshold: str  # the rule that decided it


CLAIM_TEXT = {
    "post grows": "Post-norm's FFN gradient norm grows toward the output layers (Figure 3)",
    "pre level": "Pre-norm's FFN gradient norm stays level across layers (Figure 3)",
    "pre depth": "Pre-norm's last-layer FFN gradient shrinks with depth like d·√(ln d / L), i.e. L^(−1/2) (Theorem 1)",
}
LO, HI = LEVEL_BAND


def check_claims(grads: FFNGradients, matrix: str = "W2", scaling: DepthScaling | None = None) -> list[Claim]:
    """Each claim's verdict from the per-layer means (and, for the depth claim, the depth scaling)."""
    rule = f"last/first layer and the fitted line's last/first both above ×{HI}; level: both within ×{LO}–×{HI}"
    post, pre = trend(grads.mean("post", matrix)), trend(grads.mean("pre", matrix))
    claims = [
        Claim(
            "post grows",
            CLAIM_TEXT["post grows"],
            post.word == "grows",
            f"post-norm {matrix} {post.word}: {post.first:.3g} → {post.last:.3g} (×{post.ratio:.2f})",
            rule,
        ),
        Claim(
            "pre level",
            CLAIM_TEXT["pre level"],
            pre.word == "stays roughly level",
            f"pre-norm {matrix} {pre.word}: {pre.first:.3g} → {pre.last:.3g} (×{pre.ratio:.2f})",
            rule,
        ),
    ]
    if scaling is not None:
        b = scaling.exponent("pre")
        claims.append(
            Claim(
                "pre depth",
                CLAIM_TEXT["pre depth"],
                abs(b + 0.5) <= EXPONENT_TOLERANCE,
                f"pre-norm last-layer {scaling.matrix} ∝ L^{b:+.2f} over L = {', '.join(map(str, scaling.depths))} "
                f"(post-norm L^{scaling.exponent('post'):+.2f})",
                f"fitted exponent b within {EXPONENT_TOLERANCE} of −0.5",
            )
        )
    return claims
