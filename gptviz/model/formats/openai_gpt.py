"""Hugging Face GPT-1 folders (`OpenAIGPTLMHeadModel`, model_type "openai-gpt"): config.json onto a GPTConfig.

GPT-1 is post-norm (`x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))`) with no final norm, a tied LM head and GPT-2's
module names inside each block; only the embeddings differ (tokens_embed, positions_embed: checkpoint.py renames
them). Its `afn: "gelu"` is the tanh approximation (transformers' ACT_FNS maps it to gelu_new), unlike GPT-2's
"gelu", which is the exact erf form.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError, GPTConfig
from .base import CheckpointError, hf_name, hf_sizes

MODEL_TYPE = "openai-gpt"
_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu"}  # ACT_FNS's others (silu, swish) have no gptviz equivalent


def config_from_openai_gpt(hf: dict) -> GPTConfig:
    """A GPTConfig from a Hugging Face GPT-1 config.json dict (CheckpointError naming the field otherwise)."""
    act = hf.get("afn", "gelu")
    if not isinstance(act, str) or act not in _ACTIVATIONS:
        raise CheckpointError(f"afn {act!r} is not supported (GPT-1 folders with afn 'gelu' or 'relu' are)")
    try:
        return GPTConfig(
            **hf_sizes(hf, n_ctx=512),
            norm="post",
            activation=_ACTIVATIONS[act],
            final_norm=False,
            name=hf_name(hf, MODEL_TYPE),
        )
    except KeyError as err:
        raise CheckpointError(f"the GPT-1 config has no {err} field") from None
    except (TypeError, ConfigError) as err:
        raise CheckpointError(f"config.json: {err}") from None


def model_tokenizer(folder: Path, config: GPTConfig):
    """The tokenizer a Hugging Face GPT-1 folder brings (vocab.json and merges.txt: its own 40,478-id BPE), which then
    travels with the loaded model (`model.tokenizer`, read through gptviz.model.tokenizer.tokenizer_for); None for
    any other folder, and for a GPT-1 folder without those files (it reads GPT-2's ids). CheckpointError when the
    files are unreadable or their vocabulary is not the size of the model's embedding."""
    try:
        model_type = json.loads((Path(folder) / "config.json").read_text()).get("model_type")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return None  # read_config has refused it already, or reads it as not GPT-1
    if model_type != MODEL_TYPE:
        return None
    from ..gpt1_tokenizer import folder_tokenizer

    try:
        tok = folder_tokenizer(folder)
    except ValueError as err:
        raise CheckpointError(f"GPT-1's tokenizer: {err}") from None
    if tok is not None and tok.n_vocab != config.vocab_size:
        raise CheckpointError(
            f"GPT-1's tokenizer (vocab.json) has {tok.n_vocab:,} ids but the model's token "
            f"embedding has {config.vocab_size:,} rows: they are not one model's files"
        )
    return tok
