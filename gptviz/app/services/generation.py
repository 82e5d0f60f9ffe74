"""The Generation page's one computation of its own: the first step the model would take after the prompt, before
anything is generated (the live generation itself is gptviz.app.live's)."""

from __future__ import annotations

from ...model import sizes
from ...model.generate import StepSummary, step_summary, stream
from ...serve import memory
from . import cached


@cached
def first_step(_model, spec, ids: tuple[int, ...], settings: tuple) -> StepSummary:
    """The step the model would take first after the prompt, with the page's settings (one forward pass). `_model`
    is the loaded model `spec` names (the key is the spec)."""
    with memory.reserve(
        sizes.generation_nbytes(_model.config, len(ids), 1), f"the next-token distribution after {len(ids)} tokens"
    ):
        return step_summary(next(stream(_model, list(ids), **{**dict(settings), "max_new_tokens": 1}, attention=True)))
