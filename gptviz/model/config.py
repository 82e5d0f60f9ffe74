"""GPTConfig: one frozen, validated description of a GPT, and the named presets."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

NORMS = ("pre", "post")
NORM_TYPES = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


class ConfigError(ValueError):
    """A GPTConfig field holds a value that makes no valid model; the message names the field."""


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50257  # GPT-2 BPE: 50,000 merges + 256 bytes + <|endoftext|>
    n_ctx: int = 1024  # longest sequence; the number of learned positions
    d_model: int = 768  # width of the residual stream
    n_layers: int = 12
    n_heads: int = 12  # d_model is split evenly between heads
    d_ff: int | None = None  # MLP hidden width; None means 4 * d_model
    norm: str = "pre"  # "pre" (GPT-2: norm before each sub-layer + final norm) or "post" (GPT-1)
    norm_type: str = "layernorm"  # or "rmsnorm" (no mean subtraction, no bias)
    activation: str = "gelu"  # "gelu" (exact erf), "gelu_tanh" (GPT-2's approximation), "relu"
    tie_weights: bool = True  # LM head shares the token-embedding matrix
    qkv_bias: bool = True  # bias on the fused Q/K/V projection
    dropout: float = 0.0  # on embeddings, attention weights and residual branches while training
    ln_eps: float = 1e-5
    bias: bool = True  # biases in every linear layer and LayerNorm; False is nanoGPT's bias=False
    final_norm: bool = True  # a norm (ln_f) after the last block, as GPT-2; GPT-1 has none
    name: str = field(default="custom", compare=False)  # a label for people; not part of the model

    def __post_init__(self) -> None:
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        _validate(self)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def replace(self, **changes: Any) -> GPTConfig:
        """A validated copy with some fields changed (d_ff follows d_model unless given)."""
        if "d_model" in changes and "d_ff" not in changes and self.d_ff == 4 * self.d_model:
            changes["d_ff"] = None
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown GPTConfig field(s): {', '.join(unknown)}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate(cfg: GPTConfig) -> None:
    for name in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "d_ff"):
        value = getattr(cfg, name)
        if not _is_int(value):
            raise ConfigError(f"{name} must be a whole number, got {value!r}")
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    if cfg.d_model % cfg.n_heads:
        raise ConfigError(
            f"d_model ({cfg.d_model}) must be divisible by n_heads ({cfg.n_heads}) so each head gets "
            f"an equal slice; try n_heads in {_divisors(cfg.d_model)}"
        )
    if cfg.norm not in NORMS:
        raise ConfigError(f"norm must be one of {NORMS}, got {cfg.norm!r}")
    if cfg.norm_type not in NORM_TYPES:
        raise ConfigError(f"norm_type must be one of {NORM_TYPES}, got {cfg.norm_type!r}")
    if cfg.activation not in ACTIVATIONS:
        raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {cfg.activation!r}")
    for name in ("tie_weights", "qkv_bias", "bias", "final_norm"):
        if not isinstance(getattr(cfg, name), bool):
            raise ConfigError(f"{name} must be True or False, got {getattr(cfg, name)!r}")
    if not cfg.bias and cfg.qkv_bias:
        raise ConfigError("bias=False removes every bias, the Q/K/V projection's too: set qkv_bias=False as well")
    if not isinstance(cfg.dropout, (int, float)) or not 0.0 <= cfg.dropout < 1.0:
        raise ConfigError(f"dropout must be in [0, 1), got {cfg.dropout!r}")
    if not isinstance(cfg.ln_eps, (int, float)) or not cfg.ln_eps > 0:
        raise ConfigError(f"ln_eps must be a positive number, got {cfg.ln_eps!r}")


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, min(n, 64) + 1) if n % d == 0]
    return small[-8:]


def _preset(name: str, **fields: Any) -> GPTConfig:
    return GPTConfig(name=name, **fields)


_GPT2 = dict(vocab_size=50257, n_ctx=1024, activation="gelu_tanh")

# Parameter totals of the big presets are checked against ../shared/data/README.md in the tests.
PRESETS: dict[str, GPTConfig] = {
    # GPT-1 (Radford et al. 2018), post-norm, 40,000-token vocabulary. Our model keeps a final norm in both
    # wirings so that one set of weights runs either way; the reference count (116,169,216) includes it.
    "gpt1": _preset(
        "gpt1", vocab_size=40000, n_ctx=512, d_model=768, n_layers=12, n_heads=12, norm="post", activation="gelu_tanh"
    ),  # GPT-1 used the tanh approximation of GELU
    "gpt2-small": _preset("gpt2-small", d_model=768, n_layers=12, n_heads=12, **_GPT2),
    "gpt2-medium": _preset("gpt2-medium", d_model=1024, n_layers=24, n_heads=16, **_GPT2),
    "gpt2-large": _preset("gpt2-large", d_model=1280, n_layers=36, n_heads=20, **_GPT2),
    "gpt2-xl": _preset("gpt2-xl", d_model=1600, n_layers=48, n_heads=25, **_GPT2),
    "gpt2-small-untied-noqkvbias": _preset(
        "gpt2-small-untied-noqkvbias", d_model=768, n_layers=12, n_heads=12, tie_weights=False, qkv_bias=False, **_GPT2
    ),
    "gpt2-small-rmsnorm": _preset(
        "gpt2-small-rmsnorm", d_model=768, n_layers=12, n_heads=12, norm_type="rmsnorm", **_GPT2
    ),
    # Small models that run instantly on a laptop CPU (full GPT-2 vocabulary, so the real tokenizer works).
    "tiny": _preset("tiny", vocab_size=50257, n_ctx=128, d_model=64, n_layers=2, n_heads=4),
    "small-4l": _preset("small-4l", vocab_size=50257, n_ctx=128, d_model=128, n_layers=4, n_heads=4),
    "deep-narrow": _preset("deep-narrow", vocab_size=50257, n_ctx=128, d_model=64, n_layers=12, n_heads=4),
}


def get_preset(name: str) -> GPTConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
