"""Copy as Python for Why this token?: direct attribution, ablation, patching, saliency and information flow."""
from __future__ import annotations

from ..models import ModelSpec
from .core import prompt_lines, snippet, pieces_comment


def direct_attribution(spec: ModelSpec, ids, target: int, other: int, text: str | None) -> str:
    """Why this token?, direct attribution: every part's push toward `target` over `other`, read through the
    unembedding (the parts sum to the model's logit difference)."""
    return snippet(
        "Why this token?, direct attribution", spec, prompt_lines(ids, text),
        f"target, other = {target}, {other}           # {pieces_comment(target, other)}",
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
        f"goal, rival = {goal}, {rival}           # {pieces_comment(goal, rival)}: clean's top against corrupted's",
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
        f"target, other = {target}, {other}           # {pieces_comment(target, other)}",
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
