"""The small configurations several test files build, each written once so a test names only what it varies:
Hugging Face GPT-1 and GPT-2 configs of width 32, 2 layers, 4 heads and no dropout; the book's (Raschka's) config
dict; a GPTConfig with its options off their defaults; a Train page form that finishes in seconds."""

from __future__ import annotations

from gptviz import GPTConfig

# what the small Hugging Face models of the format, upload and page tests share
HF_SMALL = dict(n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def hf_gpt1_config(vocab_size: int, n_positions: int, **extra):
    """A small transformers.OpenAIGPTConfig (imported here: callers skip first where transformers is missing)."""
    import transformers

    return transformers.OpenAIGPTConfig(vocab_size=vocab_size, n_positions=n_positions, **HF_SMALL, **extra)


def hf_gpt2_config(vocab_size: int, n_positions: int, **extra):
    """A small transformers.GPT2Config."""
    import transformers

    return transformers.GPT2Config(vocab_size=vocab_size, n_positions=n_positions, **HF_SMALL, **extra)


def raschka_config(vocab_size: int = 101, context_length: int = 16) -> dict:
    """The config dict of the book's GPTModel (tests/reference/raschka.py), a new dict each call."""
    return {
        "vocab_size": vocab_size,
        "context_length": context_length,
        "emb_dim": 32,
        "n_heads": 4,
        "n_layers": 2,
        "drop_rate": 0.0,
        "qkv_bias": False,
    }


# every option the parameter count depends on off its default: RMSNorm, untied head, no qkv bias, d_ff not 4 x d
CUSTOM = GPTConfig(
    vocab_size=1000,
    n_ctx=64,
    d_model=48,
    n_layers=3,
    n_heads=4,
    d_ff=100,
    norm_type="rmsnorm",
    tie_weights=False,
    qkv_bias=False,
    name="your model",
)

# the Train page's form for a run of a few seconds: one layer of width 32, 4 steps, both wirings
TRAIN_FORM = dict(
    train_layers=1,
    train_width=32,
    train_heads=2,
    train_steps=4,
    train_batch=1,
    train_block=16,
    train_warmup=0,
    train_wiring="both",
)
