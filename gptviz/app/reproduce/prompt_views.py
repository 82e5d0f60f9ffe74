"""Copy as Python for the views of one prompt: Attention, Generation, the whole model, Activations, Embeddings."""

from __future__ import annotations

from .. import keys as K
from ..model_service import ModelSpec
from .core import prompt_lines, snippet


def attention(spec: ModelSpec, ids, layer: int, head: int | None, text: str | None, query: int | None = None) -> str:
    """The Attention page: the picked head's map (head None: the mean of the layer's heads), each head's detector
    scores, and what the other tabs compute from them: the value-weighted shares, the head's steps for the query
    token and every head's entropy."""
    pick = f"patterns[{layer}].mean(0)" if head is None else f"patterns[{layer}, {head}]"
    query = len(ids) - 1 if query is None else query
    steps = (
        [f"    'inside the head': head_steps(model, one, {layer}, {head}, {query}),   # query {query}, step by step"]
        if head is not None
        else []
    )
    return snippet(
        "the Attention page",
        spec,
        prompt_lines(ids, text, spec=spec),
        "logits, cache = capture(model, [ids])",
        "one = cache.prompt(0)                              # the prompt's own [T, ...] tensors (views)",
        "patterns = one.patterns()                          # [layers, heads, query, key]",
        f"values = values_from_input(model, {layer}, one[attention_input_name({layer}, model.config.norm)])",
        f"weighted = value_weighted(model, {layer}, values, patterns[{layer}])   # [heads, query, key]",
        "result = {",
        f"    'map': {pick},                # the map on the page: rows query, columns key",
        "    'induction, on this prompt': prompt_induction_scores(patterns, ids),   # [layers, heads]",
        "    'previous-token': previous_token_scores(patterns),",
        "    'duplicate-token': duplicate_token_scores(patterns, ids),",
        "    'first token (sink)': first_token_scores(patterns),",
        f"    'value-weighted': row_shares(weighted{'.mean(0)' if head is None else f'[{head}]'}),"
        "  # weight x |value W_O|",
        *steps,
        "    'entropy': attention_entropy(patterns),          # [layers, heads, query], in nats",
        "}",
        imports="from gptviz.methods import (attention_entropy, duplicate_token_scores, previous_token_scores,\n"
        "    prompt_induction_scores)\n"
        "from gptviz.methods.head_steps import (attention_input_name, first_token_scores, head_steps, row_shares,\n"
        "    value_weighted, values_from_input)",
    )


def next_token(spec: ModelSpec, ids, settings: dict, text: str | None) -> str:
    """The Generation page before generating: the distribution the first new token is drawn from, after the
    sampling settings (the top 20 as the bars show them)."""
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(settings.items()) if k != "max_new_tokens")
    return snippet(
        "the Generation page's next-token distribution",
        spec,
        prompt_lines(ids, text, spec=spec),
        f"step = step_summary(next(stream(model, ids, max_new_tokens=1, {args})))",
        "result = step.top                                  # [(token id, probability, ...)], most likely first",
        imports="from gptviz import stream\nfrom gptviz.methods import step_summary",
    )


def overview(spec: ModelSpec, ids, position: int, text: str | None) -> str:
    """The whole model at a glance: the forward pass at one position, every number the diagram writes."""
    return snippet(
        "the whole model at a glance",
        spec,
        prompt_lines(ids, text, spec=spec),
        "logits, cache = capture(model, [ids], overview_hook_names(model.config.n_layers, model.config.norm))",
        f"result = forward_overview(model, cache.prompt(0), logits[0], position={position}, ids=ids)  # prompt 0",
        "# result.blocks[i]: the stream's norms, the strongest attention weight and the lens at each block",
        imports="from gptviz.methods.overview import forward_overview, overview_hook_names",
    )


def activations(spec: ModelSpec, ids, focus: int, top: int, text: str | None) -> str:
    """The Activations page: the residual stream's norms, the branches', the MLP's histograms and top neurons at the
    focus token, what each norm receives and the logit lens."""
    return snippet(
        "the Activations page",
        spec,
        prompt_lines(ids, text, spec=spec),
        "logits, batched = capture(model, [ids])",
        "cache = batched.prompt(0)                           # the prompt's own [T, ...] tensors (views)",
        "post = cache.stack('mlp.hook_post')                 # [layers, T, d_ff]",
        "result = {",
        "    'residual stream': residual_norms(cache),                # [layers + 1, T]",
        "    'attention output': branch_norms(cache, 'hook_attn_out'),  # [layers, T]",
        "    'MLP output': branch_norms(cache, 'hook_mlp_out'),",
        "    'MLP histograms': activation_histograms(post),            # (counts [layers, bins], edges)",
        f"    'top neurons': top_neurons(post, {focus}, {top}),         # (layer, neuron, value) at the focus token",
        "    'norm inputs': norm_input_stats(cache, model.config),",
        "    'logit lens': logit_lens(model, cache),",
        "}",
        imports="from gptviz.methods import (activation_histograms, "
        "branch_norms, logit_lens, norm_input_stats,\n    residual_norms, top_neurons)",
    )


def embeddings(spec: ModelSpec, prompt_ids, n_sample: int) -> str:
    """The Embeddings page's weights-only views: every learned position against every other, and the PCA of a
    vocabulary sample with the prompt's distinct tokens."""
    if spec.source == K.SOURCE_BUNDLED:
        vocab = (
            f"vocab = training_vocab(bundled_models()[{spec.name!r}])   # the ids its training text used",
            "from gptviz.model.checkpoint import training_vocab\nfrom gptviz.model.weights import bundled_models",
        )
    else:
        vocab = ("vocab = None                                          # the whole vocabulary", "")
    return snippet(
        "the Embeddings page",
        spec,
        vocab[0],
        f"prompt_ids = {list(prompt_ids)!r}                # the prompt's distinct tokens",
        "wte = model.wte.weight.detach().float()",
        f"sample = [i for i in vocab_sample(wte.shape[0], {n_sample}, seed=0, ids=vocab).tolist()"
        " if i not in prompt_ids]",
        "fit = pca(wte[sample + prompt_ids], k=2)",
        "result = {",
        "    'position similarity': cosine_similarity_matrix(model.wpe.weight.detach().float()),  # [n_ctx, n_ctx]",
        "    'pca': (sample, fit.coords, fit.explained_variance_ratio),  # the sample, then the prompt's tokens",
        "}",
        imports="from gptviz.methods import cosine_similarity_matrix, pca, vocab_sample"
        + (f"\n{vocab[1]}" if vocab[1] else ""),
    )
