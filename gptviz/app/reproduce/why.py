"""Copy as Python for Why this token?: direct attribution, ablation, patching, saliency and information flow."""

from __future__ import annotations

from ..model_service import ModelSpec
from .core import pieces_comment, prompt_lines, snippet, tokenizer_call


def direct_attribution(spec: ModelSpec, ids, target: int, other: int, text: str | None) -> str:
    """Why this token?, direct attribution: every part's push toward `target` over `other`, read through the
    unembedding (the parts sum to the model's logit difference)."""
    return snippet(
        "Why this token?, direct attribution",
        spec,
        prompt_lines(ids, text, spec=spec),
        f"target, other = {target}, {other}           # {pieces_comment(target, other, spec=spec)}",
        "result = direct_logit_attribution(model, torch.tensor([ids]), target, other)",
        "# result.labels and result.values: each part's push; result.logit_diff: the model's own difference",
        imports="from gptviz.methods.attribution import direct_logit_attribution",
    )


def ablation(spec: ModelSpec, ids, heads, mode: str, text: str | None, target: int, other: int, effects: bool) -> str:
    """Why this token?, ablate heads: what the page shows, printed. The next-token probabilities before and after
    removing the chosen heads (the page's table: the top 5 of each, by the probability before; mean ablation's
    reference is this prompt's own positions) and, where the page compares them (`effects`: zero ablation on a
    pre-norm model), the heads' direct effect on logit(target) - logit(other) beside the total effect measured."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    decode_call = "decode" if tokenizer_call(spec) == "get_tokenizer()" else "tokenizer_for(model).decode"
    reference = (
        "_, reference = capture(model, [ids], "
        + repr([f"blocks.{layer}.attn.hook_z" for layer in sorted(by_layer)])
        + ")"
        if mode == "mean" and heads
        else "reference = None"
    )
    lines = [
        prompt_lines(ids, text, spec=spec),
        f"heads = {sorted(heads)!r}           # (layer, head) pairs ablated",
        f"target, other = {target}, {other}           # {pieces_comment(target, other, spec=spec)}",
        reference,
        f"edits = [ablate_heads(layer, hs, {mode!r}, reference=reference) for layer, hs in {by_layer!r}.items()]",
        "before = run_with_edits(model, torch.tensor([ids]), [])[0][0, -1].float().softmax(-1)",
        "after = run_with_edits(model, torch.tensor([ids]), edits)[0][0, -1].float().softmax(-1)",
        "shown = sorted(set(before.topk(5).indices.tolist()) | set(after.topk(5).indices.tolist()),",
        "               key=lambda i: -float(before[i]))   # the page's rows",
        "print(f\"{'id':>6}  {'token':<16}{'before':>9}{'after':>9}{'change':>9}\")",
        "for i in shown:",
        "    b, a = float(before[i]), float(after[i])",
        f'    print(f"{{i:>6}}  {{{decode_call}([i])!r:<16}}{{b:>9.2%}}{{a:>9.2%}}{{a - b:>+9.2%}}")',
        "result = {'before': {i: float(before[i]) for i in shown}, 'after': {i: float(after[i]) for i in shown}}",
    ]
    if effects:
        lines += [
            "metric = lambda p: float(torch.log(p[target]) - torch.log(p[other]))   # logit(target) - logit(other)",
            "dla = direct_logit_attribution(model, torch.tensor([ids]), target, other)",
            "result['direct effect'] = -sum(float(dla.head_values[layer, head]) for layer, head in heads)",
            "result['total effect'] = metric(after) - metric(before)",
            "print(f\"Direct effect on the metric: {result['direct effect']:+.3f}\")",
            "print(f\"Total effect (ablation, measured): {result['total effect']:+.3f}\")",
        ]
    imports = ["from gptviz.methods.interventions import ablate_heads, run_with_edits"]
    imports += ["from gptviz.model.tokenizer import decode"] if decode_call == "decode" else []
    if effects:
        imports.insert(0, "from gptviz.methods.attribution import direct_logit_attribution")
    return snippet("Why this token?, ablate heads", spec, *lines, imports="\n".join(imports))


def patching(spec: ModelSpec, clean, corrupted, goal: int, rival: int, texts: tuple) -> str:
    """Why this token?, patching: the corrupted run with one piece of the clean run copied in, at every layer and
    position of the residual stream and for every head's output (1 = the clean prediction restored)."""
    return snippet(
        "Why this token?, patching",
        spec,
        prompt_lines(clean, texts[0], "clean", spec=spec),
        prompt_lines(corrupted, texts[1], "corrupted", spec=spec),
        f"goal, rival = {goal}, {rival}"
        f"           # {pieces_comment(goal, rival, spec=spec)}: clean's top against corrupted's",
        "resid = residual_patching(model, clean, corrupted, goal, rival)",
        "by_head = head_patching(model, clean, corrupted, goal, rival)",
        "result = {'residual stream': resid.scores,           # [layers, positions]",
        "          'heads': by_head.scores,                   # [layers, heads]",
        "          'logit difference': (resid.clean, resid.corrupted)}",
        imports="from gptviz.methods.attribution import head_patching, residual_patching",
    )


def saliency(spec: ModelSpec, ids, target: int, other: int, steps: int, text: str | None) -> str:
    """Why this token?, saliency: integrated gradients and gradient x input on the prompt's tokens."""
    return snippet(
        "Why this token?, saliency",
        spec,
        prompt_lines(ids, text, spec=spec),
        f"target, other = {target}, {other}           # {pieces_comment(target, other, spec=spec)}",
        f"ig = integrated_gradients(model, ids, target, other, steps={steps})",
        "result = {'integrated gradients': ig.scores,      # one per prompt token; they sum to ig.metric - "
        "ig.baseline_metric",
        "          'gradient x input': gradient_x_input(model, ids, target, other).scores}",
        imports="from gptviz.methods.attribution import gradient_x_input, integrated_gradients",
    )


def flow(spec: ModelSpec, ids, threshold: float, text: str | None) -> str:
    """Why this token?, information flow: the parts the last token's output is built from, above the threshold."""
    return snippet(
        "Why this token?, information flow",
        spec,
        prompt_lines(ids, text, spec=spec),
        f"result = information_flow(model, torch.tensor([ids]), threshold={threshold!r})",
        "# result.edges: .kind (attention, mlp or residual), .layer, .source, .target, .importance, .head",
        imports="from gptviz.methods.flow import information_flow",
    )
