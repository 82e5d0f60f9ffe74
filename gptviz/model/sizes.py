"""How many bytes a job will hold at its peak, from the config and the sizes alone, before anything runs: float32
tensors counted where they peak. The server reserves these before it admits work (gptviz.serve.memory); the tests
check each one against the resident memory's measured growth (tests/serve/test_memory_runs.py and its neighbours).
The estimates of the methods' own jobs (patching, saliency, the attribution graph, the Norms measurement, a neuron
scan) sit beside their methods and build on these."""

from __future__ import annotations

from collections.abc import Iterable

FLOAT32 = 4


def forward_nbytes(config, T: int, batch: int = 1, *, patterns: bool = True, all_logits: bool = True) -> int:
    """Working memory of one forward pass over `batch` sequences of T tokens, beyond the weights: the residual
    stream and what one block holds at once (norm, q/k/v, the attention's output, the MLP's hidden units twice),
    one layer's attention scores and weights when they are materialised (`patterns`: hooks record them; the fused
    kernel does not), and the logits (every position's, or the last one's)."""
    per_token = 10 * config.d_model + 2 * config.d_ff
    attention = 3 * config.n_heads * T * T if patterns else 0
    logits = (T if all_logits else 1) * config.vocab_size
    return FLOAT32 * batch * (T * per_token + attention + logits)


def capture_work_nbytes(config, names: Iterable[str], T: int) -> int:
    """A capture at its peak: what it keeps (hooks.capture_nbytes, with the logits) plus the forward pass's
    working memory beside it (the logits counted once)."""
    from .hooks import capture_nbytes

    names = list(names)
    materialised = any(n.endswith(("attn.hook_pattern", "attn.hook_attn_scores")) for n in names)
    working = forward_nbytes(config, T, patterns=materialised, all_logits=False)
    # What a capture keeps is allocated between the forward pass's short-lived blocks, so the heap cannot reuse every
    # hole they leave: measured as resident growth in fresh processes (tests/support/rss_growth.py page_capture,
    # gpt2-small), the overhead beyond what was kept grows with the prompt, past the working memory itself at a few
    # hundred tokens (counted once, the estimate fell short in CI). Counted twice when anything is kept; a plain
    # forward pass keeps nothing between its blocks.
    fragmentation = working - FLOAT32 * config.vocab_size if names else 0
    return capture_nbytes(config, names, T) + working + fragmentation


def kv_cache_nbytes(config, batch: int = 1, itemsize: int = FLOAT32) -> int:
    """A KV cache: keys and values of every layer for the whole context (allocated at once: model.KVCache)."""
    return 2 * config.n_layers * batch * config.n_ctx * config.d_model * itemsize


def generation_nbytes(config, prompt_tokens: int, new_tokens: int) -> int:
    """A live generation with attention recorded: its KV cache, the first step's forward pass over the prompt
    with every layer's patterns captured, and the steps it keeps (each the predicting row of every layer's
    attention and the next-token distribution)."""
    T = min(prompt_tokens, config.n_ctx)
    first = forward_nbytes(config, T, all_logits=False) + FLOAT32 * config.n_layers * config.n_heads * T * T
    step = FLOAT32 * (config.n_layers * config.n_heads * config.n_ctx + 3 * config.vocab_size)
    return kv_cache_nbytes(config) + first + new_tokens * step


def activation_nbytes(config, batch: int, block: int, *, patterns: bool = False) -> int:
    """What autograd keeps of a forward pass for the backward: each block's inputs, norms, q/k/v, attention output,
    MLP hidden units, and the attention scores and weights where they are materialised (`patterns`: hooks record
    them; the fused kernel keeps none); the logits, their softmax and gradient."""
    per_layer = batch * block * (12 * config.d_model + 3 * config.d_ff)
    if patterns:
        per_layer += 3 * batch * config.n_heads * block * block
    return FLOAT32 * (config.n_layers * per_layer + 3 * batch * block * config.vocab_size)


def training_nbytes(config, batch: int, block: int) -> int:
    """One model in training: weights, gradients and AdamW's two moments (4 copies of the parameters) and the
    activations of one batch."""
    from .params import total_params

    return FLOAT32 * 4 * total_params(config) + activation_nbytes(config, batch, block)


def model_build_nbytes(config, itemsize: int = FLOAT32) -> int:
    """A model being built: its weights, allocated once (GPT is made on the meta device), and the row-major buffer
    its largest tensor is drawn into before being copied in (gptviz.model.model._draw; one tensor at a time). gpt2-xl
    peaks at 1.05x its weights by this count, an embedding-heavy model far above (a 2-layer gpt2-small's embedding is
    most of its weights, so a flat tenth more, the earlier rule, fell short). `python -m benchmarks build` measures
    each preset's peak against this."""
    from .params import total_params

    d = config.d_model
    largest = max(config.vocab_size * d, config.n_ctx * d, 3 * d * d, config.d_ff * d)
    return itemsize * (total_params(config) + largest)


def sampling_nbytes(config, prompt_tokens: int, new_tokens: int) -> int:
    """generate() without attention recorded (a continuation): its KV cache (two once the context is full: the new
    one is made before the old one is dropped), a forward pass over the window for the last position's logits, and
    one step's logits, probabilities and mask (generate keeps no step)."""
    window = max(1, min(prompt_tokens + max(new_tokens - 1, 0), config.n_ctx))
    caches = 2 if prompt_tokens + new_tokens > config.n_ctx else 1
    return (
        caches * kv_cache_nbytes(config)
        + forward_nbytes(config, window, patterns=False, all_logits=False)
        + FLOAT32 * 3 * config.vocab_size
    )


def lens_nbytes(config, T: int) -> int:
    """The logit lens on a capture of T tokens (gptviz.methods.logit_lens): the stacked residual states (layers
    + 1) and one normed copy, and per state its [T, vocab] logits and probabilities beside the previous state's
    probabilities (the loop decodes one state at a time)."""
    return FLOAT32 * ((config.n_layers + 2) * T * config.d_model + 3 * T * config.vocab_size)


def direct_effect_nbytes(config) -> int:
    """A unit's direct effect on the logits (gptviz.index.direct_effect, head_direct_effect): a residual direction
    through the norms after it (a few d_model vectors each) and its product with the unembedding, [vocab], beside
    its negation for the bottom k."""
    return FLOAT32 * (2 * config.vocab_size + (2 * config.n_layers + 6) * config.d_model)
