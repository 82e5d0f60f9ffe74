"""Architectures gptviz does not run, named in one sentence instead of a traceback or a wrong model.

gptviz's GPT has learned absolute positions, full multi-head attention (as many key/value heads as query heads),
sequential blocks (attention, then the MLP) and a plain MLP. Models that differ in any of these would load into it
as something else, so they are recognised from config.json or from their tensor names and refused.
"""

from __future__ import annotations

SUPPORTED = (
    "gptviz reads GPT-style models with learned positions, full multi-head attention and sequential "
    "blocks: its own checkpoints, Hugging Face GPT-2 and GPT-1 (openai-gpt) folders, nanoGPT's ckpt.pt, "
    "the GPTModel of Raschka's book (model.pth), and llm.c's .bin checkpoints"
)

_ROTARY_GQA = "rotary positions, grouped-query attention and a gated MLP"
_BY_MODEL_TYPE = {  # what each family has that gptviz's GPT does not
    "llama": _ROTARY_GQA,
    "mistral": _ROTARY_GQA + " (and sliding-window attention)",
    "mixtral": _ROTARY_GQA + " (and mixture-of-experts layers)",
    "qwen2": _ROTARY_GQA,
    "qwen3": _ROTARY_GQA,
    "gemma": _ROTARY_GQA,
    "gemma2": _ROTARY_GQA,
    "gemma3": _ROTARY_GQA,
    "olmo": _ROTARY_GQA,
    "olmo2": _ROTARY_GQA,
    "gpt_neox": "rotary positions and parallel blocks",
    "gptj": "rotary positions and parallel blocks",
    "phi": "rotary positions and parallel blocks",
    "falcon": "rotary positions, parallel blocks and multi-query attention",
    "gpt_neo": "local attention layers",
    "bloom": "ALiBi positions",
    "mpt": "ALiBi positions",
    "gpt_bigcode": "multi-query attention",
    "opt": "OPT's position offset and layout",
}
_CONFIG_SIGNS = (  # (config.json key, test of its value, what it means) for model types not listed above
    ("rope_theta", lambda v: v is not None, "rotary positions"),
    ("rotary_dim", lambda v: v is not None, "rotary positions"),
    ("rotary_pct", lambda v: v is not None, "rotary positions"),
    ("position_embedding_type", lambda v: v in ("rotary", "rope", "alibi"), "rotary or ALiBi positions"),
    ("use_parallel_residual", lambda v: v is True, "parallel blocks"),
    ("parallel_attn", lambda v: v is True, "parallel blocks"),
    ("multi_query", lambda v: v is True, "multi-query attention"),
)
_KEY_SIGNS = (  # (a piece of a tensor name, what it means)
    ("rotary_emb", "rotary positions"),
    ("inv_freq", "rotary positions"),
    ("self_attn.q_proj", "a Llama-style layout (rotary positions, separate q_proj, k_proj and v_proj)"),
    ("attention.wq", "a Llama-style layout (Meta's consolidated checkpoint, rotary positions)"),
    ("query_key_value", "a GPT-NeoX or Falcon layout (rotary positions, parallel blocks)"),
    ("mlp.fc_in", "a GPT-J layout (rotary positions, parallel blocks)"),
    ("mlp.gate_proj", "a gated MLP"),
    ("block_sparse_moe", "mixture-of-experts layers"),
)


def _sentence(what: str) -> str:
    return f"{what} is not supported: {SUPPORTED}."


def unsupported_config(hf: dict) -> str | None:
    """The refusal for a Hugging Face config.json of an architecture gptviz does not run; None when nothing in it
    says so (GPT-2 and GPT-1 configs, and unknown ones that the caller refuses in its own words)."""
    model_type = hf.get("model_type")
    if isinstance(model_type, str) and model_type in _BY_MODEL_TYPE:
        return _sentence(f"model_type {model_type!r} ({_BY_MODEL_TYPE[model_type]})")
    for key, sign, meaning in _CONFIG_SIGNS:
        if key in hf and sign(hf[key]):
            return _sentence(f"A model with {meaning} ({key} in config.json)")
    heads, kv_heads = hf.get("num_attention_heads", hf.get("n_head")), hf.get("num_key_value_heads")
    if isinstance(kv_heads, int) and isinstance(heads, int) and kv_heads != heads:
        return _sentence(f"Grouped-query attention ({kv_heads} key and value heads for {heads} query heads)")
    if isinstance(model_type, str) and model_type not in ("gpt2", "openai-gpt"):
        return _sentence(f"model_type {model_type!r}")
    return None


def unsupported_keys(names) -> str | None:
    """The refusal for a state dict whose tensor names give away an architecture gptviz does not run."""
    names = list(names)
    for piece, meaning in _KEY_SIGNS:
        if any(piece in name for name in names):
            return _sentence(f"A checkpoint with {meaning}")
    return None


def unknown_layout(what: str) -> str:
    """The refusal for a file of no layout gptviz recognises."""
    return f"{what} is in no layout gptviz recognises. {SUPPORTED}."
