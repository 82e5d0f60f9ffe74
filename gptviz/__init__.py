"""gptviz: see inside a GPT."""

from .model.config import PRESETS, ConfigError, GPTConfig, get_preset
from .model.generate import generate, stream
from .model.hooks import capture
from .model.model import GPT
from .model.params import param_table
from .model.tokenizer import get_tokenizer, tokenizer_for
from .model.weights import load_pretrained

__all__ = [
    "GPTConfig",
    "PRESETS",
    "ConfigError",
    "get_preset",
    "GPT",
    "get_tokenizer",
    "tokenizer_for",
    "param_table",
    "capture",
    "generate",
    "stream",
    "load_pretrained",
]
