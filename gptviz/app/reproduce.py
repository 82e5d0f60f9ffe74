"""Copy as Python: each view's numbers as the library calls that reproduce them in a notebook, with the visitor's
model, prompt and settings (issue 45). A snippet imports only the library (never gptviz.app or Streamlit), and its
last line binds `result`, the numbers the view shows; tests/test_copy_as_python.py runs each page's snippet and
compares `result` with what the page drew.

Every visitor string enters a snippet through repr(), so no prompt can end the string it sits in.
"""
from __future__ import annotations

import re

import streamlit as st

from ..model.tokenizer import encode
from . import keys as K
from .models import ModelSpec

MARK = "# gptviz: "  # a snippet's first line: "# gptviz: <the view>, reproduced"
LIBRARY_NAMES = ("GPT", "PRESETS", "capture", "get_tokenizer", "load_pretrained")  # from gptviz, when a snippet uses them


def model_lines(spec: ModelSpec) -> str:
    """The lines that build the model `spec` names, as the app built it."""
    if spec.source == K.SOURCE_PRESET:
        line = f"model = GPT(PRESETS[{spec.name!r}].replace(norm={spec.norm!r}), seed={spec.seed}).eval()"
    elif spec.source == K.SOURCE_BUNDLED:
        line = f"model = load_pretrained({spec.name!r})"
    elif spec.source == K.SOURCE_TRAINED:  # it lives in the server's memory only
        line = ("# this model was trained in your session: download its checkpoint on the Train page, then\n"
                "model = load_pretrained('path/to/the/downloaded/folder')")
    else:
        line = f"model = load_pretrained({spec.name!r}, norm={spec.norm!r})"
    if (spec.device, spec.dtype) != ("cpu", "float32"):
        line += f"\nmodel = model.to(device={spec.device!r}, dtype=getattr(torch, {spec.dtype!r}))"
    return line


def prompt_lines(ids: tuple[int, ...] | list[int], text: str | None = None, name: str = "ids") -> str:
    """`ids = ...` for the tokens a view read: from the prompt's text where encoding it gives them (its last ones when
    the page kept only those), else the ids themselves."""
    ids = list(ids)
    if text is not None:
        encoded = encode(text)
        if encoded[len(encoded) - len(ids):] == ids and ids:
            cut = f"[-{len(ids)}:]" if len(encoded) > len(ids) else ""
            return f"{name} = get_tokenizer().encode({text!r}){cut}"
    return f"{name} = {ids!r}"


def snippet(view: str, spec: ModelSpec, *body: str, imports: str = "") -> str:
    """A whole snippet: the mark, the imports it uses, the model, then `body`'s lines (the last binds `result`)."""
    code = "\n".join([model_lines(spec), *body])
    used = [name for name in LIBRARY_NAMES if re.search(rf"\b{name}\b", code)]
    head = [f"{MARK}{view}, reproduced"] + (["import torch"] if "torch." in code else [])
    head += [f"from gptviz import {', '.join(used)}"] if used else []
    return "\n".join(head + ([imports] if imports else []) + [code]) + "\n"


def show(code: str) -> None:
    """The closed "Copy as Python" box (st.code has its own copy button)."""
    with st.expander("Copy as Python", icon=":material/code:"):
        st.caption("The library calls that reproduce this view's numbers in a notebook or script "
                   "(`pip install gptviz`); `result` holds them.")
        st.code(code, language="python")


def prompt_text() -> str | None:
    """The sidebar's prompt text, for prompt_lines."""
    text = st.session_state.get(K.PROMPT)
    return text if isinstance(text, str) else None


# ---- the views ------------------------------------------------------------------------------------------------

def attention(spec: ModelSpec, ids, layer: int, head: int | None, text: str | None) -> str:
    """The Attention page: the picked head's map (head None: the mean of the layer's heads) and each head's
    detector scores on the prompt."""
    pick = f"patterns[{layer}].mean(0)" if head is None else f"patterns[{layer}, {head}]"
    return snippet(
        "the Attention page", spec, prompt_lines(ids, text),
        "logits, cache = capture(model, [ids])",
        "patterns = cache.patterns()[:, 0]                 # [layers, heads, query, key]",
        "result = {",
        f"    'map': {pick},                # the map on the page: rows query, columns key",
        "    'induction, on this prompt': prompt_induction_scores(patterns, ids),   # [layers, heads]",
        "    'previous-token': previous_token_scores(patterns),",
        "    'duplicate-token': duplicate_token_scores(patterns, ids),",
        "    'first token (sink)': first_token_scores(patterns),",
        "}",
        imports="from gptviz.methods import duplicate_token_scores, previous_token_scores, prompt_induction_scores\n"
                "from gptviz.methods.head_steps import first_token_scores")


def next_token(spec: ModelSpec, ids, settings: dict, text: str | None) -> str:
    """The Generation page before generating: the distribution the first new token is drawn from, after the
    sampling settings (the top 20 as the bars show them)."""
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(settings.items()) if k != "max_new_tokens")
    return snippet(
        "the Generation page's next-token distribution", spec, prompt_lines(ids, text),
        f"step = step_summary(next(stream(model, ids, max_new_tokens=1, {args})))",
        "result = step.top                                  # [(token id, probability, ...)], most likely first",
        imports="from gptviz import stream\nfrom gptviz.methods import step_summary")


def config_line(cfg) -> str:
    """`config = ...`: a preset by its name when it is one unchanged, else the whole GPTConfig."""
    from ..model.config import PRESETS
    if PRESETS.get(cfg.name) == cfg:
        return f"config = PRESETS[{cfg.name!r}]"
    return f"config = {cfg!r}"


def parameters(view: str, cfg) -> str:
    """The Parameters page's breakdown of one configuration: the counts by component and their shares."""
    return (f"{MARK}{view}, reproduced\nfrom gptviz import GPTConfig, PRESETS, param_table\n"
            "from gptviz.model.params import by_component\n"
            f"{config_line(cfg)}\nresult = by_component(param_table(config))   # count and share by component\n")


def parameters_of_presets(names: list[str]) -> str:
    """The Parameters page's presets side by side: each one's counts by group."""
    return (f"{MARK}the Parameters page's presets, reproduced\nfrom gptviz import PRESETS, param_table\n"
            "from gptviz.figures.params import group_counts\n"
            f"result = {{name: group_counts(param_table(PRESETS[name])) for name in {list(names)!r}}}\n")


def overview(spec: ModelSpec, ids, position: int, text: str | None) -> str:
    """The whole model at a glance: the forward pass at one position, every number the diagram writes."""
    return snippet(
        "the whole model at a glance", spec, prompt_lines(ids, text),
        "logits, cache = capture(model, [ids], overview_hook_names(model.config.n_layers, model.config.norm))",
        "one_prompt = {name: value[0] for name, value in cache.items()}   # drop the batch axis",
        f"result = forward_overview(model, one_prompt, logits[0], position={position}, ids=ids)",
        "# result.blocks[i]: the stream's norms, the strongest attention weight and the lens at each block",
        imports="from gptviz.methods.overview import forward_overview, overview_hook_names")


def direct_attribution(spec: ModelSpec, ids, target: int, other: int, text: str | None) -> str:
    """Why this token?, direct attribution: every part's push toward `target` over `other`, read through the
    unembedding (the parts sum to the model's logit difference)."""
    return snippet(
        "Why this token?, direct attribution", spec, prompt_lines(ids, text),
        f"target, other = {target}, {other}           # {_pieces(target, other)}",
        "result = direct_logit_attribution(model, torch.tensor([ids]), target, other)",
        "# result.labels and result.values: each part's push; result.logit_diff: the model's own difference",
        imports="from gptviz.methods.attribution import direct_logit_attribution")


def ablation(spec: ModelSpec, ids, heads, mode: str, text: str | None) -> str:
    """Why this token?, ablate heads: the next-token probabilities with the chosen heads removed (mean ablation's
    reference: this prompt's own positions)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    reference = ("_, reference = capture(model, [ids], " + repr([f"blocks.{l}.attn.hook_z" for l in sorted(by_layer)])
                 + ")" if mode == "mean" else "reference = None")
    return snippet(
        "Why this token?, ablate heads", spec, prompt_lines(ids, text), reference,
        f"edits = [ablate_heads(layer, heads, {mode!r}, reference=reference) for layer, heads in {by_layer!r}.items()]",
        "logits, _ = run_with_edits(model, torch.tensor([ids]), edits)",
        "result = logits[0, -1].softmax(-1)                  # next-token probabilities without those heads",
        imports="from gptviz.methods.interventions import ablate_heads, run_with_edits")


def patching(spec: ModelSpec, clean, corrupted, goal: int, rival: int, texts: tuple) -> str:
    """Why this token?, patching: the corrupted run with one piece of the clean run copied in, at every layer and
    position of the residual stream and for every head's output (1 = the clean prediction restored)."""
    return snippet(
        "Why this token?, patching", spec, prompt_lines(clean, texts[0], "clean"),
        prompt_lines(corrupted, texts[1], "corrupted"),
        f"goal, rival = {goal}, {rival}           # {_pieces(goal, rival)}: clean's top against corrupted's",
        "resid = residual_patching(model, clean, corrupted, goal, rival)",
        "by_head = head_patching(model, clean, corrupted, goal, rival)",
        "result = {'residual stream': resid.scores,           # [layers, positions]",
        "          'heads': by_head.scores,                   # [layers, heads]",
        "          'logit difference': (resid.clean, resid.corrupted)}",
        imports="from gptviz.methods.attribution import head_patching, residual_patching")


def saliency(spec: ModelSpec, ids, target: int, other: int, steps: int, text: str | None) -> str:
    """Why this token?, saliency: integrated gradients and gradient x input on the prompt's tokens."""
    return snippet(
        "Why this token?, saliency", spec, prompt_lines(ids, text),
        f"target, other = {target}, {other}           # {_pieces(target, other)}",
        f"ig = integrated_gradients(model, ids, target, other, steps={steps})",
        "result = {'integrated gradients': ig.scores,      # one per prompt token; they sum to ig.metric - "
        "ig.baseline_metric",
        "          'gradient x input': gradient_x_input(model, ids, target, other).scores}",
        imports="from gptviz.methods.attribution import gradient_x_input, integrated_gradients")


def flow(spec: ModelSpec, ids, threshold: float, text: str | None) -> str:
    """Why this token?, information flow: the parts the last token's output is built from, above the threshold."""
    return snippet(
        "Why this token?, information flow", spec, prompt_lines(ids, text),
        f"result = information_flow(model, torch.tensor([ids]), threshold={threshold!r})",
        "# result.edges: .kind (attention, mlp or residual), .layer, .source, .target, .importance, .head",
        imports="from gptviz.methods.flow import information_flow")


def _pieces(*token_ids: int) -> str:
    """Token ids as text for a comment: repr'd and on one line, so no text ends the comment."""
    from ..model.tokenizer import decode
    return ", ".join(repr(decode([t])) for t in token_ids).replace("\n", "\\n")


def activations(spec: ModelSpec, ids, focus: int, top: int, text: str | None) -> str:
    """The Activations page: the residual stream's norms, the branches', the MLP's histograms and top neurons at the
    focus token, what each norm receives and the logit lens."""
    return snippet(
        "the Activations page", spec, prompt_lines(ids, text),
        "logits, batched = capture(model, [ids])",
        "cache = ActivationCache({name: value[0] for name, value in batched.items()}, model.config.n_layers)",
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
        imports="from gptviz.model.hooks import ActivationCache\nfrom gptviz.methods import (activation_histograms, "
                "branch_norms, logit_lens, norm_input_stats,\n    residual_norms, top_neurons)")


def embeddings(spec: ModelSpec, prompt_ids, n_sample: int) -> str:
    """The Embeddings page's weights-only views: every learned position against every other, and the PCA of a
    vocabulary sample with the prompt's distinct tokens."""
    if spec.source == K.SOURCE_BUNDLED:
        vocab = (f"vocab = training_vocab(bundled_models()[{spec.name!r}])   # the ids its training text used",
                 "from gptviz.model.checkpoint import training_vocab\nfrom gptviz.model.weights import bundled_models")
    else:
        vocab = ("vocab = None                                          # the whole vocabulary", "")
    return snippet(
        "the Embeddings page", spec, vocab[0],
        f"prompt_ids = {list(prompt_ids)!r}                # the prompt's distinct tokens",
        "wte = model.wte.weight.detach().float()",
        f"sample = [i for i in vocab_sample(wte.shape[0], {n_sample}, seed=0, ids=vocab).tolist() if i not in prompt_ids]",
        "fit = pca(wte[sample + prompt_ids], k=2)",
        "result = {",
        "    'position similarity': cosine_similarity_matrix(model.wpe.weight.detach().float()),  # [n_ctx, n_ctx]",
        "    'pca': (sample, fit.coords, fit.explained_variance_ratio),  # the sample, then the prompt's tokens",
        "}",
        imports="from gptviz.methods import cosine_similarity_matrix, pca, vocab_sample"
                + (f"\n{vocab[1]}" if vocab[1] else ""))


def twins(names: dict[str, str], ids, pair: int, probe_length: int, text: str | None) -> str:
    """Pre-norm vs post-norm, the twins side by side: their heads matched by role on a repeated random probe, the
    picked pair's maps on the prompt, and each twin's next-token probabilities."""
    return "\n".join([
        f"{MARK}Pre-norm vs post-norm, the twins side by side, reproduced",
        "from gptviz import capture, get_tokenizer, load_pretrained",
        "from gptviz.methods import induction_sequence, match_heads",
        "from gptviz.model.checkpoint import training_vocab\nfrom gptviz.model.weights import bundled_models",
        f"twins = {{'pre': load_pretrained({names['pre']!r}), 'post': load_pretrained({names['post']!r})}}",
        prompt_lines(ids, text),
        "# heads paired by their patterns on one probe both read: random training ids, then the same again",
        f"probe = induction_sequence(twins['pre'].config.vocab_size, {probe_length},",
        f"                           ids=training_vocab(bundled_models()[{names['pre']!r}])).tolist()",
        "on_probe = {norm: capture(m, [probe])[1].patterns()[:, 0] for norm, m in twins.items()}",
        f"pair = match_heads(on_probe['pre'], on_probe['post'])[{pair}]   # .a, .b: (layer, head); .similarity",
        "on_prompt = {norm: capture(m, [ids]) for norm, m in twins.items()}",
        "result = {",
        "    'pair': pair,",
        "    'pre map': on_prompt['pre'][1].pattern(pair.a[0])[0, pair.a[1]],     # [query, key]",
        "    'post map': on_prompt['post'][1].pattern(pair.b[0])[0, pair.b[1]],",
        "    'next token': {norm: logits[0, -1].softmax(-1).topk(5) for norm, (logits, _) in on_prompt.items()},",
        "}"]) + "\n"


def same_weights(cfg, ids, seed: int, init: str, view: str, random: bool, text: str | None) -> str:
    """Pre-norm vs post-norm, same weights: one set of random weights run both ways, one forward and one backward
    pass each; the losses, the embedding gradients and the per-layer gradient norms the page draws."""
    tokens = (f"ids = random_tokens({len(ids)}, config.vocab_size, seed={seed}).tolist()   # no structure at all"
              if random else prompt_lines(ids, text))
    return "\n".join([
        f"{MARK}Pre-norm vs post-norm, same weights, reproduced",
        "from gptviz import GPTConfig, PRESETS, get_tokenizer",
        "from gptviz.methods.wiring import compare_wirings, random_tokens",
        config_line(cfg), tokens,
        f"stats = compare_wirings(config, ids, seed={seed}, init={init!r})   # {{'pre': ..., 'post': ...}}",
        "result = {norm: {'loss': s.loss, 'embedding gradient': s.embed_grad_norm,",
        f"                'gradient per layer': s.grad({view!r})}} for norm, s in stats.items()}}"]) + "\n"


def depth_sweep(cfg, ids, seed: int, init: str, view: str, depths, random: bool, text: str | None) -> str:
    """Pre-norm vs post-norm, the depth sweep: the last layer's gradient of each wiring at each depth, and the
    exponent of its power law in the depth."""
    tokens = (f"ids = random_tokens({len(ids)}, config.vocab_size, seed={seed}).tolist()   # no structure at all"
              if random else prompt_lines(ids, text))
    return "\n".join([
        f"{MARK}Pre-norm vs post-norm, the depth sweep, reproduced",
        "import numpy as np",
        "from gptviz import GPTConfig, PRESETS, get_tokenizer",
        "from gptviz.methods.wiring import compare_wirings, depth_exponent, random_tokens",
        config_line(cfg), tokens,
        f"depths = np.array({sorted(depths)!r})",
        "last = {'pre': [], 'post': []}",
        "for depth in depths:",
        f"    stats = compare_wirings(config.replace(n_layers=int(depth)), ids, seed={seed}, init={init!r})",
        "    for norm in last:",
        f"        last[norm].append(stats[norm].grad({view!r})[-1])",
        "result = {norm: (np.asarray(values, float), depth_exponent(depths, np.asarray(values, float)))",
        "          for norm, values in last.items()}          # the last layer's gradients and the fitted exponent"]) + "\n"


def _index_lines(spec: ModelSpec, per_play: int | None, names: str) -> tuple[tuple[str, ...], str]:
    """The lines that load the neuron index a page read (the bundled model's shipped one, or the server's own scan
    of `per_play` tokens from the start of every play, rebuilt), and their import of `names` beside it."""
    if spec.source == K.SOURCE_BUNDLED:
        return ((f"index = bundled_index({spec.name!r})                 # shipped with the model",),
                f"from gptviz.index import bundled_index, {names}")
    return ((f"per_play = {per_play}",
             "docs = [Document(d.name, d.ids[:per_play], d.held_out) for d in corpus_documents()]",
             "index = build_index(model, docs)                     # the server's scan: the start of every play"),
            f"from gptviz.index import Document, build_index, corpus_documents, {names}")


def unit(spec: ModelSpec, unit_name: str, per_play: int | None) -> str:
    """What does this unit do?: a neuron's or head's summary, top examples, quantiles and histogram from the neuron
    index."""
    load, imports = _index_lines(spec, per_play, "histogram, quantiles, summary, top_examples")
    return snippet(
        "What does this unit do?", spec, *load,
        f"unit = {unit_name!r}",
        "result = {",
        "    'summary': summary(index, unit),",
        "    'top examples': top_examples(index, unit),        # .value, .doc_name, .pos: highest first",
        "    'quantiles': quantiles(index, unit),",
        "    'histogram': histogram(index, unit),              # (edges, counts) over every token scanned",
        "}",
        imports=imports)


def units_here(spec: ModelSpec, ids, pos: int, per_play: int | None, text: str | None) -> str:
    """The unit search, on the prompt: the neurons and heads most active at one token, against their corpus peaks."""
    load, imports = _index_lines(spec, per_play, "units_at")
    return snippet(
        "the unit search, most active here", spec, *load, prompt_lines(ids, text),
        f"pos = {pos}",
        "result = (units_at(model, ids, pos, index=index, k=8, kind='neuron')",
        "          + units_at(model, ids, pos, index=index, k=4, kind='head'))   # .unit, .value, .share_of_peak",
        imports=imports)


def units_for_word(spec: ModelSpec, token: int, per_play: int | None) -> str:
    """The unit search, by word: the neurons whose mean on one token is furthest above their own mean."""
    load, imports = _index_lines(spec, per_play, "units_for_token")
    return snippet(
        "the unit search, a word", spec, *load,
        f"token = {token}                                       # {_pieces(token)}",
        "result = units_for_token(index, token, k=10)         # .unit, .z, .mean",
        imports=imports)


def heads_forming(detector: str, step: int, twins: dict[str, str]) -> str:
    """Heads forming: each twin's `detector` scores for every head at the snapshot the step slider shows, its
    training loss there, and the step its head of that kind formed."""
    return "\n".join([
        f"{MARK}Heads forming, reproduced",
        "import numpy as np",
        "from gptviz.model.weights import bundled_models",
        "from gptviz.training.snapshots import formed_step, load_snapshots",
        f"detector, step = {detector!r}, {step}",
        "result = {}",
        f"for wiring, name in {twins!r}.items():",
        "    snaps = load_snapshots(bundled_models()[name])",
        "    i = max(0, int(np.searchsorted(snaps.steps, step, side='right')) - 1)   # the last snapshot at or before",
        "    scores = snaps.score_array()[i, snaps.detector_index(detector)]          # [layers, heads]",
        "    result[wiring] = {'snapshot step': snaps.steps[i], 'scores': scores, 'loss': snaps.train_loss[i],",
        "                      'formed (step, layer, head)': formed_step(snaps, detector)}"]) + "\n"


def training(configs: dict, settings, init: str) -> str:
    """Train a model: the same run in a script, on the same batches (the losses match step for step)."""
    lines = ",\n".join(f"    {name!r}: {cfg!r}" for name, cfg in configs.items())
    return "\n".join([
        f"{MARK}the Train page's run, reproduced",
        "from gptviz import GPTConfig",
        "from gptviz.training.train import TrainSettings, load_corpus, train_models",
        f"configs = {{\n{lines},\n}}",
        f"settings = {settings!r}",
        f"models, results = train_models(configs, settings, load_corpus(), init={init!r})",
        "result = {name: [step['train_loss'] for step in r.history] for name, r in results.items()}"]) + "\n"


def explainers(lo: float, hi: float, mask_n: int) -> str:
    """The Explainers: the model's own activation functions and their derivatives on the range, and its causal mask."""
    return "\n".join([
        f"{MARK}the Explainers, reproduced", "import torch",
        "from gptviz.methods import activation_curves, causal_mask",
        f"x = torch.linspace({lo!r}, {hi!r}, 801, dtype=torch.float64)",
        "result = {",
        "    'activations': activation_curves(x),     # {name: (f(x), f'(x))}, by the model's own activate()",
        f"    'causal mask': causal_mask({mask_n}),          # True where a query may look at a key",
        "}"]) + "\n"


def paper(settings: dict, depths, matrix: str, base: str) -> str:
    """Pre-norm vs post-norm, the paper's setting: the FFN gradient norms at initialisation for each init, the depth
    scaling and the claims of Xiong et al. (2020), checked as the page checks them."""
    lines = ",\n".join(f"    {title!r}: {setting!r}" for title, setting in settings.items())
    first = next(iter(settings))
    return "\n".join([
        f"{MARK}Pre-norm vs post-norm, the paper's setting, reproduced",
        "from gptviz import PRESETS",
        "from gptviz.methods.xiong import ProbeSetting, check_claims, depth_scaling, measure_ffn_gradients",
        "from gptviz.training.corpus import load_corpus",
        f"base, tokens = PRESETS[{base!r}], load_corpus()",
        f"settings = {{\n{lines},\n}}",
        "grads = {title: measure_ffn_gradients(s, base, tokens) for title, s in settings.items()}",
        f"scaling = depth_scaling(settings[{first!r}], base, tokens, {tuple(depths)!r}, {matrix!r})",
        f"result = {{'gradients': grads, 'depth scaling': scaling,",
        f"          'claims': check_claims(grads[{first!r}], {matrix!r}, scaling)}}"]) + "\n"
