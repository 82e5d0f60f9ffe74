"""How many bytes a job will hold at its peak, from the config and the sizes alone, before anything runs: float32
tensors counted where they peak. Every job a visitor can start has its estimate here: a capture, a generation or
continuation, the logit lens, patching, saliency, the attribution graph and its contributors, the Norms measurement,
a unit's values and examples, an export, a model's build and load, a neuron scan (gptviz.index.scan_nbytes counts
the corpus's frequent tokens and asks index_scan_nbytes); a training run's, which reads the server's job spec and the
trainer's chunking, is gptviz.serve.job_sizes.
The server reserves these before it admits work (gptviz.serve.memory); the tests check each one against the resident
memory's measured growth (tests/serve/test_memory_runs.py and its neighbours), and `python -m benchmarks sizes` prints
each beside its measured peak."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from .hooks import act_name, direct_attribution_names, unit_hook_names
from .params import param_count, total_params

FLOAT32 = 4
ATTENTION_HOOKS = ("attn.hook_attn_scores", "attn.hook_pattern")  # [heads, T, T] each: quadratic in the length


# ---- captures and forward passes --------------------------------------------------------------------------------


def hook_numel(config, name: str, T: int) -> int:
    """Elements hook point `name` records for one sequence of T tokens (batch 1), from the config alone, so a
    capture's size is known before it runs."""
    if name.endswith(ATTENTION_HOOKS):
        return config.n_heads * T * T
    if name.endswith(("mlp.hook_pre", "mlp.hook_post")):
        return T * config.d_ff
    if name == "hook_logits":
        return T * config.vocab_size
    return T * config.d_model  # embeddings, residual stream, norms' outputs, q/k/v/z, sub-layer outputs


def capture_nbytes(config, names: Iterable[str], T: int, *, logits: bool = True) -> int:
    """Float32 bytes of a capture of `names` for T tokens, plus the logits it returns (unless `logits=False`:
    what is kept of it without them, e.g. an exported file)."""
    return FLOAT32 * (sum(hook_numel(config, n, T) for n in names) + (T * config.vocab_size if logits else 0))


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
    """A capture at its peak: what it keeps (capture_nbytes, with the logits) plus the forward pass's working memory
    beside it (the logits counted once)."""
    names = list(names)
    materialised = any(n.endswith(ATTENTION_HOOKS) for n in names)
    working = forward_nbytes(config, T, patterns=materialised, all_logits=False)
    # What a capture keeps is allocated between the forward pass's short-lived blocks, so the heap cannot reuse every
    # hole they leave: measured as resident growth in fresh processes (tests/support/rss_growth.py page_capture,
    # gpt2-small), the overhead beyond what was kept grows with the prompt, past the working memory itself at a few
    # hundred tokens (counted once, the estimate fell short in CI). Counted twice when anything is kept; a plain
    # forward pass keeps nothing between its blocks.
    fragmentation = working - FLOAT32 * config.vocab_size if names else 0
    return capture_nbytes(config, names, T) + working + fragmentation


# ---- generation -------------------------------------------------------------------------------------------------


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


LIVE_CONTRIBUTORS_BATCH_BYTES = 16 * 2**20  # a batch's table of every node of every step in it, at most
LIVE_CONTRIBUTORS_MAX_BATCH = 32
LIVE_CONTRIBUTORS_HELD_BYTES = 32 * 2**20  # the KV caches waiting steps past the context keep alive, at most


def _position_nodes(config) -> int:
    """The attribution graph's nodes at one position: its embeddings, every head and neuron, up to four biases a
    layer."""
    return 1 + config.n_layers * (config.n_heads + config.d_ff + 4)


def live_contributors_batch(config) -> int:
    """Steps gptviz.serve.live_contributors takes at once, at most: the most whose table of every node fits."""
    per_step = FLOAT32 * _position_nodes(config)
    return max(1, min(LIVE_CONTRIBUTORS_MAX_BATCH, LIVE_CONTRIBUTORS_BATCH_BYTES // per_step))


def live_contributors_nbytes(config, prompt_tokens: int, new_tokens: int) -> int:
    """What a live generation's contributors add at their peak: the first step's capture over the whole prompt (the
    direct hooks: head outputs, neurons, post-norm's stream around each sub-layer, the embeddings and final stream),
    a batch of steps waiting, and its table of every node with twice as much for the products it is made from; past
    the context, the KV caches' values that waiting steps keep alive (each makes a cache of its own): up to the bound,
    and the step that passes it."""
    d = config.d_model
    per_layer = d + config.d_ff + (4 * d if config.norm == "post" else 0)
    per_step = FLOAT32 * (config.n_layers * per_layer + 3 * d)
    first = min(prompt_tokens, config.n_ctx) * per_step
    batch = live_contributors_batch(config)
    held = 0
    if prompt_tokens + new_tokens > config.n_ctx:
        held = LIVE_CONTRIBUTORS_HELD_BYTES + kv_cache_nbytes(config) // 2  # a cache's values: half of it
    return first + batch * per_step + 3 * batch * FLOAT32 * _position_nodes(config) + held


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


# ---- training, building and loading a model ------------------------------------------------------------------------


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
    return FLOAT32 * 4 * total_params(config) + activation_nbytes(config, batch, block)


def model_build_nbytes(config, itemsize: int = FLOAT32) -> int:
    """A model being built: its weights, allocated once (GPT is made on the meta device), and the row-major buffer
    its largest tensor is drawn into before being copied in (gptviz.model.model._draw; one tensor at a time). gpt2-xl
    peaks at 1.05x its weights by this count, an embedding-heavy model far above (a 2-layer gpt2-small's embedding is
    most of its weights, so a flat tenth more, the earlier rule, fell short). `python -m benchmarks build` measures
    each preset's peak against this."""
    d = config.d_model
    largest = max(config.vocab_size * d, config.n_ctx * d, 3 * d * d, config.d_ff * d)
    return itemsize * (total_params(config) + largest)


def load_nbytes(config, weights_file_bytes: int | None = None) -> int:
    """Loading a checkpoint at its peak, before it is read: a folder's weights file (`weights_file_bytes`, read
    whole) beside the model being built from its config (model_build_nbytes: its float32 weights and a transient
    buffer as large as its largest tensor, which the file and the weights alone left out; `python -m benchmarks
    sizes` measures it); a single checkpoint file (None) memory-mapped, the tensors read from it at most as many
    bytes again as the float32 model."""
    if weights_file_bytes is None:
        return 2 * FLOAT32 * param_count(config)
    return weights_file_bytes + model_build_nbytes(config)


# ---- the methods' jobs --------------------------------------------------------------------------------------------


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


def direct_attribution_nbytes(config, T: int) -> int:
    """What direct_logit_attribution holds at its peak on T tokens: its capture and the forward pass beside it."""
    return capture_work_nbytes(config, direct_attribution_names(config.n_layers), T)


def block_rate_nbytes(config, T: int) -> int:
    """Timing token-block passes on this server (gptviz.methods.attribution.block_pass_rate): a forward pass over a
    batch of 4 prompts of T tokens, the last position's logits only."""
    return forward_nbytes(config, T, batch=4, patterns=False, all_logits=False)


# Activations one batch of a patching sweep may hold at once. A sweep runs T (or layers x heads) edited copies of
# the corrupted prompt; all at once, with every position's logits, that grows with T² x the vocabulary (gigabytes
# for a 128-token pair). `python -m benchmarks patching` measures a sweep's peak memory.
SWEEP_BATCH_BYTES = 192 * 2**20


def sweep_row_bytes(config, T: int) -> int:
    """Float32 bytes one edited copy of a T-token prompt holds at its peak inside a block (the residual stream and
    its norms, q/k/v/z, one layer's attention weights, the MLP's hidden units) plus its last position's logits."""
    return FLOAT32 * (T * (10 * config.d_model + 2 * config.d_ff + 2 * config.n_heads * T) + config.vocab_size)


def sweep_rows_per_batch(config, T: int, budget: int | None = None) -> int:
    """Edited copies one batch runs: as many as fit `budget` (SWEEP_BATCH_BYTES), at least one."""
    return max(1, (SWEEP_BATCH_BYTES if budget is None else budget) // sweep_row_bytes(config, T))


def patching_nbytes(config, T: int) -> int:
    """What residual_patching and head_patching hold at their peak on a T-token pair: the clean and corrupted runs'
    logits and captures (residual stream, keys, values, heads' outputs), one forward pass's working memory, and one
    batch of edited copies (within SWEEP_BATCH_BYTES, at least one copy)."""
    rows = min(sweep_rows_per_batch(config, T), max(T, config.n_layers * config.n_heads))
    captured = FLOAT32 * 4 * config.n_layers * T * config.d_model  # resid_pre, k, v (or z) of every layer
    return (
        2 * FLOAT32 * T * config.vocab_size
        + captured
        + forward_nbytes(config, T, patterns=False)
        + rows * sweep_row_bytes(config, T)
    )


def saliency_nbytes(config, T: int, batch: int = 16) -> int:
    """What integrated_gradients holds at its peak: one batch of `batch` scaled copies of the prompt with what
    autograd keeps of their forward pass."""
    return activation_nbytes(config, batch, T)


EDGE_WALK_BYTES = 64 * 2**20  # what one batch of the edge walk may hold: rows of [T, d_model], a few copies each


def edge_rows(config, T: int) -> int:
    """Targets one edge walk carries: [rows, T, d_model] a few times over within EDGE_WALK_BYTES."""
    return max(1, EDGE_WALK_BYTES // (4 * FLOAT32 * T * config.d_model))


def _frozen_pass(config, T: int) -> int:
    """Floats the attribution graph's frozen pass holds: the forward kept for the backward, the probes and their
    gradients (per layer: norms, q/k/v/z, pre/act/ratio, scores and pattern)."""
    L, H, d, d_ff = config.n_layers, config.n_heads, config.d_model, config.d_ff
    points = 1 + L * (4 if config.norm == "post" else 2)
    per_layer = T * (12 * d + 6 * d_ff) + 3 * H * T * T
    return 2 * L * per_layer + 3 * points * T * d


def _frozen_records(config, T: int) -> int:
    """Floats the frozen model records: z, attention input, activation and ratio, patterns (without the points'
    stream copies)."""
    L, H, d, d_ff = config.n_layers, config.n_heads, config.d_model, config.d_ff
    return L * (T * (2 * d + 2 * d_ff) + H * T * T)


def graph_nbytes(config, T: int, max_nodes: int = 200, ablations: int = 10, itemsize: int = FLOAT32) -> int:
    """Bytes the attribution graph holds at its peak on T tokens, from the config alone (float32 unless said): the
    frozen pass with what autograd keeps of it and its backward, the frozen model's records, three numbers for every
    node and the pruning's copy, one edge walk, and the ablation check (an unedited capture of the stream, keys and
    values, then the removals, the last position's logits only)."""
    L, H, d, d_ff, V = config.n_layers, config.n_heads, config.d_model, config.d_ff, config.vocab_size
    points = 1 + L * (4 if config.norm == "post" else 2)
    records = _frozen_records(config, T) + 2 * points * T * d
    nodes = 6 * L * T * (H + d_ff + 4)  # influence, direct, bias part, the flat copy
    rows = min(edge_rows(config, T), max_nodes)
    walk = 4 * rows * T * d + max_nodes * (max_nodes + d)  # V and its copies, the weights, the outputs
    per_row = T * (10 * d + 2 * d_ff + 2 * H * T)  # one copy of the prompt inside a block
    forward = per_row + T * V + 3 * L * T * d + ablations * (per_row + V)  # the unedited capture, the removals
    weights_copy = 0 if itemsize == FLOAT32 else L * (4 * d * d + 2 * d * d_ff)  # the blocks' matrices as float32
    return FLOAT32 * (_frozen_pass(config, T) + records + nodes + walk + forward + weights_copy)


def node_removal_nbytes(config, T: int) -> int:
    """Removing one graph node from the real model (gptviz.methods.graph_ablation.ablation_actuals): the unedited
    capture of every layer's stream, keys and values, and the edited pass beside it."""
    names = [act_name(kind, layer) for layer in range(config.n_layers) for kind in ("resid_pre", "k", "v")]
    return 2 * capture_work_nbytes(config, names, T)


def stream_bias_count(config) -> int:
    """The constants written into the stream at every position (gptviz.methods.graph_nodes.bias_names): the two
    out-projection biases, and in post-norm blocks the betas of the two norms that write the stream (LayerNorm)."""
    return 2 + (2 if config.norm == "post" and config.norm_type == "layernorm" else 0)


def contributors_nbytes(config, T: int) -> int:
    """Bytes `top_contributors` holds at its peak on T tokens: the frozen pass with what autograd keeps and its
    backward (graph_nbytes' first terms), and one number per node twice over."""
    L, H, d_ff = config.n_layers, config.n_heads, config.d_ff
    frozen = _frozen_pass(config, T) + _frozen_records(config, T)
    nodes = 2 * (T + L * T * (H + d_ff + stream_bias_count(config)))
    return FLOAT32 * (frozen + nodes)


SUM_CHUNK = 2**20  # elements the Norms measurement sums at a time in float64 (gptviz.methods.wiring)
# What the process's resident memory grows by beyond the tensors (torch's thread workspaces, the allocator's
# bookkeeping) during one measurement: not a function of the size, and it varies between runs of one size (by tens of
# MiB for the smallest models, whose growth is mostly this), so a fixed allowance with room above what
# tests/serve/test_wiring_memory.py measures across the sizes the page offers, in a quiet process and in a busy suite.
MEASURE_OVERHEAD = 128 * 2**20


def measuring_nbytes(config, T: int) -> int:
    """compare_wirings at its peak on T tokens, what the Norms page reserves before it runs: one set of weights the
    twins share; then the larger of the build's draw buffer (its largest tensor, gptviz.model.model) and one wiring's
    measurement: the gradient of every parameter, two more copies of a tied token embedding's gradient while
    autograd adds its two uses (the lookup's and the LM head's), and what the forward pass keeps for the backward
    (its attention patterns recorded) and what it records; the first wiring's patterns kept beside the second's run;
    the float64 chunks its sums use; a fixed overhead. Checked against the resident memory's measured growth at
    every preset, every width and several depths (tests/serve/test_wiring_memory.py)."""
    L, d, H = config.n_layers, config.d_model, config.n_heads
    weights = FLOAT32 * total_params(config)
    largest = FLOAT32 * max(config.vocab_size * d, config.n_ctx * d, 3 * d * d, config.d_ff * d)
    tied = 2 * FLOAT32 * config.vocab_size * d if config.tie_weights else 0
    measure = weights + tied + activation_nbytes(config, 1, T, patterns=True)
    recorded = FLOAT32 * L * (3 * T * d + H * T * T)  # one wiring's captures
    kept = FLOAT32 * L * H * T * T  # the first wiring's patterns (WiringStats)
    return weights + max(largest, measure + recorded) + kept + 2 * 8 * SUM_CHUNK + MEASURE_OVERHEAD


def norms_model_nbytes(config) -> int:
    """What measuring one wiring of `config` holds whatever the prompt: weights, gradients and a margin for
    activations, float32. The Norms page refuses a model (its depth sweep's and paper check's deepest included)
    beyond the server's memory by it, before a prompt is chosen."""
    return total_params(config) * FLOAT32 * 3


# ---- a neuron index's reads -------------------------------------------------------------------------------------


def units_at_nbytes(config, T: int) -> int:
    """What units_at holds at its peak on T tokens: the capture of every unit's hook with the forward pass beside
    it, each head's writes [T, heads, d_model] for one layer, and every unit's value and rank."""
    n_units = config.n_layers * (config.d_ff + config.n_heads)
    return capture_work_nbytes(config, unit_hook_names(config), T) + FLOAT32 * T * (
        config.n_heads * config.d_model + 2 * n_units
    )


def example_contexts_nbytes(config, unit, windows: int, T: int) -> int:
    """What example_contexts holds at its peak for one unit (a gptviz.model.unit_id.Unit) on a batch of `windows`
    windows of up to T tokens (gptviz.index.read.context_batch): the captured unit hook (and the head's pattern), the
    forward pass's working memory without the LM head, and a head's per-head writes."""
    if not windows:
        return 0
    head = unit.kind == "head"
    hooks = [unit.hook] + ([act_name("pattern", unit.layer)] if head else [])
    writes = T * config.n_heads * config.d_model if head else 0
    forward = (
        forward_nbytes(config, T, windows, patterns=head, all_logits=False) - FLOAT32 * windows * config.vocab_size
    )
    return windows * capture_nbytes(config, hooks, T, logits=False) + FLOAT32 * windows * writes + forward  # no LM head


# ---- exports ------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _hook_names(config) -> tuple[str, ...]:
    """A config's hook names, read off its module tree on the meta device (no weights; once per config)."""
    import torch

    from .model import GPT

    with torch.device("meta"):
        return tuple(GPT(config).hook_names)


def _export_names(config, include_attention: bool) -> list[str]:
    return [n for n in _hook_names(config) if include_attention or not n.endswith(ATTENTION_HOOKS)]


def export_nbytes(config, T: int, include_attention: bool = True) -> int:
    """Float32 bytes of gptviz.export.prompt_capture_npz's arrays for T tokens (before compression): every hook
    point, less the attention scores and patterns unless `include_attention`, no logits. Counted by capture_nbytes,
    the rule the app's capture cache checks its budget with."""
    return capture_nbytes(config, _export_names(config, include_attention), T, logits=False)


def prompt_capture_npz_nbytes(config, T: int, include_attention: bool = True) -> int:
    """What prompt_capture_npz holds at its peak: its capture with the forward pass beside it (gptviz.serve.memory), and
    the file twice (the zip's buffer and the bytes copied out of it; compressed, each is at most about the arrays'
    size)."""
    names = _export_names(config, include_attention)
    return capture_work_nbytes(config, names, T) + 2 * export_nbytes(config, T, include_attention)


def index_scan_nbytes(config, frequent: int, batch: int, *, top_k: int, bins: int, sample: int) -> int:
    """About the most memory a neuron index scan takes beyond the model: the running sums per unit and per frequent
    token (`frequent` of them), the histograms, the top K and the sample with their copies while merging, and one
    batch's activations and unit values (`batch` windows of n_ctx)."""
    L, F, H, n_ctx = config.n_layers, config.d_ff, config.n_heads, config.n_ctx
    U = L * (F + H)
    # sums, means and z; counts; the top K and the sample, and their copies while merging
    per_unit = U * ((frequent + 1) * 4 * 3 + bins * 8 * 2 + top_k * 12 * 3 + sample * 20 * 2 + 96)
    tokens = batch * n_ctx
    activations = tokens * 4 * L * (F + config.d_model * 8 + H * n_ctx)  # captured post and z, the forward's
    return int(per_unit + tokens * U * 4 * 4 + activations)
