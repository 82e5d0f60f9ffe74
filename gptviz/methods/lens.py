"""The logit lens: each residual-stream state decoded as the model decodes its last one."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..model.model import GPT


@torch.no_grad()
def lens_logits(model: GPT, resid: torch.Tensor) -> torch.Tensor:
    """Decode a residual-stream state [..., d_model] as the model decodes its last one: ln_f, then
    lm_head. Float32 on the CPU."""
    p = model.lm_head.weight
    return model.lm_head(model.ln_f(resid.to(device=p.device, dtype=p.dtype))).float().cpu()


class LogitLens(NamedTuple):
    top_ids: torch.Tensor  # [layers + 1, T] most likely next token read off each state
    top_probs: torch.Tensor  # [layers + 1, T] its probability
    target_ids: torch.Tensor  # [T] the model's final prediction (argmax of its real logits)
    target_probs: torch.Tensor  # [layers + 1, T] probability of that final prediction at each state


@torch.no_grad()
def logit_lens(model: GPT, cache) -> LogitLens:
    """The logit lens: every residual state (entering each block, then the output of the last) decoded
    through the final norm and the unembedding. The last row is the model's real output.

    Takes one prompt's cache, with its batch axis of 1 (`capture(model, [ids])`, the pages' cached captures) or
    without one (ActivationCache.prompt(i)); a batch of several prompts raises ValueError."""
    states = cache.resid_stream()  # [layers + 1, T, d], or [layers + 1, batch, T, d] with the batch axis
    if states.dim() == 4:
        if states.shape[1] != 1:
            raise ValueError(
                f"logit_lens reads one prompt: got a batch of {states.shape[1]}; capture one prompt "
                "(capture(model, [ids])) or pass the cache of one row"
            )
        states = states[:, 0]
    target = lens_logits(model, states[-1]).argmax(-1)  # the model's own prediction at each position
    top_ids, top_probs, target_probs = [], [], []
    for state in states:  # one state at a time: [T, vocab] each, never [layers, T, vocab] at once
        probs = lens_logits(model, state).softmax(-1)
        p, i = probs.max(-1)
        top_ids.append(i)
        top_probs.append(p)
        target_probs.append(probs.gather(-1, target[:, None])[:, 0])
        del probs  # else it lives on beside the next state's logits and probabilities: three [T, vocab] at once
    return LogitLens(torch.stack(top_ids), torch.stack(top_probs), target, torch.stack(target_probs))
