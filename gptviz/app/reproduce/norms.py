"""Copy as Python for Pre-norm vs post-norm: the twins, the same weights both ways, the depth sweep, the paper."""

from __future__ import annotations

from .core import config_line, prompt_lines, script


def twins(names: dict[str, str], ids, pair: int, probe_length: int, text: str | None) -> str:
    """Pre-norm vs post-norm, the twins side by side: their heads matched by role on a repeated random probe, the
    picked pair's maps on the prompt, and each twin's next-token probabilities."""
    return script(
        "Pre-norm vs post-norm, the twins side by side",
        "from gptviz import capture, get_tokenizer, load_pretrained",
        "from gptviz.methods import induction_sequence, match_heads",
        "from gptviz.model.checkpoint import training_vocab\nfrom gptviz.model.weights import bundled_models",
        f"twins = {{'pre': load_pretrained({names['pre']!r}), 'post': load_pretrained({names['post']!r})}}",
        prompt_lines(ids, text),
        "# heads paired by their patterns on one probe both read: random training ids, then the same again",
        f"probe = induction_sequence(twins['pre'].config.vocab_size, {probe_length},",
        f"                           ids=training_vocab(bundled_models()[{names['pre']!r}])).tolist()",
        "on_probe = {norm: capture(m, [probe])[1].prompt(0).patterns() for norm, m in twins.items()}",
        f"pair = match_heads(on_probe['pre'], on_probe['post'])[{pair}]   # .a, .b: (layer, head); .similarity",
        "on_prompt = {norm: capture(m, [ids]) for norm, m in twins.items()}",
        "result = {",
        "    'pair': pair,",
        "    'pre map': on_prompt['pre'][1].pattern(pair.a[0])[0, pair.a[1]],     # [query, key]",
        "    'post map': on_prompt['post'][1].pattern(pair.b[0])[0, pair.b[1]],",
        "    'next token': {norm: logits[0, -1].softmax(-1).topk(5) for norm, (logits, _) in on_prompt.items()},",
        "}",
    )


def _token_lines(ids, seed: int, random: bool, text: str | None) -> str:
    """The snippet's ids: the page's random tokens (a seed, no structure at all), or the prompt's."""
    if random:
        return f"ids = random_tokens({len(ids)}, config.vocab_size, seed={seed}).tolist()   # no structure at all"
    return prompt_lines(ids, text)


def same_weights(cfg, ids, seed: int, init: str, view: str, random: bool, text: str | None) -> str:
    """Pre-norm vs post-norm, same weights: one set of random weights run both ways, one forward and one backward
    pass each; the losses, the embedding gradients and the per-layer gradient norms the page draws."""
    tokens = _token_lines(ids, seed, random, text)
    return script(
        "Pre-norm vs post-norm, same weights",
        "from gptviz import GPTConfig, PRESETS, get_tokenizer",
        "from gptviz.methods.wiring import compare_wirings, random_tokens",
        config_line(cfg),
        tokens,
        f"stats = compare_wirings(config, ids, seed={seed}, init={init!r})   # {{'pre': ..., 'post': ...}}",
        "result = {norm: {'loss': s.loss, 'embedding gradient': s.embed_grad_norm,",
        f"                'gradient per layer': s.grad({view!r})}} for norm, s in stats.items()}}",
    )


def depth_sweep(cfg, ids, seed: int, init: str, view: str, depths, random: bool, text: str | None) -> str:
    """Pre-norm vs post-norm, the depth sweep: the last layer's gradient of each wiring at each depth, and the
    exponent of its power law in the depth."""
    tokens = _token_lines(ids, seed, random, text)
    return script(
        "Pre-norm vs post-norm, the depth sweep",
        "import numpy as np",
        "from gptviz import GPTConfig, PRESETS, get_tokenizer",
        "from gptviz.methods.wiring import compare_wirings, depth_exponent, random_tokens",
        config_line(cfg),
        tokens,
        f"depths = np.array({sorted(depths)!r})",
        "last = {'pre': [], 'post': []}",
        "for depth in depths:",
        f"    stats = compare_wirings(config.replace(n_layers=int(depth)), ids, seed={seed}, init={init!r})",
        "    for norm in last:",
        f"        last[norm].append(stats[norm].grad({view!r})[-1])",
        "result = {norm: (np.asarray(values, float), depth_exponent(depths, np.asarray(values, float)))",
        "          for norm, values in last.items()}          # the last layer's gradients and the fitted exponent",
    )


def paper(settings: dict, depths, matrix: str, base: str) -> str:
    """Pre-norm vs post-norm, the paper's setting: the FFN gradient norms at initialisation for each init, the depth
    scaling and the claims of Xiong et al. (2020), checked as the page checks them."""
    lines = ",\n".join(f"    {title!r}: {setting!r}" for title, setting in settings.items())
    first = next(iter(settings))
    return script(
        "Pre-norm vs post-norm, the paper's setting",
        "from gptviz import PRESETS",
        "from gptviz.training.xiong import ProbeSetting, check_claims, depth_scaling, measure_ffn_gradients",
        "from gptviz.training.corpus import load_corpus",
        f"base, tokens = PRESETS[{base!r}], load_corpus()",
        f"settings = {{\n{lines},\n}}",
        "grads = {title: measure_ffn_gradients(s, base, tokens) for title, s in settings.items()}",
        f"scaling = depth_scaling(settings[{first!r}], base, tokens, {tuple(depths)!r}, {matrix!r})",
        "result = {'gradients': grads, 'depth scaling': scaling,",
        f"          'claims': check_claims(grads[{first!r}], {matrix!r}, scaling)}}",
    )
