"""gptviz: see inside a GPT."""
from .config import PRESETS, ConfigError, GPTConfig, get_preset
from .model import GPT
from .tokenizer import get_tokenizer
from .params import param_table
from .hooks import capture
from .generate import generate, stream
from .weights import load_pretrained

__all__ = ["GPTConfig", "PRESETS", "ConfigError", "get_preset", "GPT", "get_tokenizer", "param_table",
           "capture", "generate", "stream", "load_pretrained"]
