"""The "What does this unit do?" page's computations: the units most active at a token of the prompt, and a unit's
direct effect on the logits, each within a reservation of the server's memory (the examples and the index itself
are gptviz.app.unit_index's)."""
from __future__ import annotations

from ... import index as ix
from ...serve import limits, memory
from ...serve.limits import TOKEN_BOX_CHARS  # noqa: F401 (the page's one-token boxes read it here)
from ...model.model import GPT
from .. import models
from .. import unit_index as ui
from . import cached


def index_tokens_limit() -> int:
    """The most corpus tokens an index built on request may scan (GPTVIZ_INDEX_TOKENS)."""
    return limits.server_limits().index_tokens


@cached
def units_here(spec: models.ModelSpec, ids: tuple[int, ...], pos: int) -> list[ix.UnitScore]:
    """The 8 neurons and 4 heads most active at `pos` of the prompt, relative to their corpus peaks (cached)."""
    loaded, model = ui.find_index(spec), models.load_model(spec)
    with memory.reserve(ix.units_at_nbytes(model.config, len(ids)), f"every unit's value on {len(ids)} tokens"):
        return (ix.units_at(model, ids, pos, index=loaded.index, k=8, kind="neuron")
                + ix.units_at(model, ids, pos, index=loaded.index, k=4, kind="head"))


def direct_effect(model: GPT, unit: ix.Unit, source: int | None = None) -> ix.DirectEffect:
    """The unit's direct effect on the logits, its memory reserved first (LimitError when there is no room)."""
    with memory.reserve(memory.direct_effect_nbytes(model.config), f"the direct effect of {unit}"):
        if unit.kind == "neuron":
            return ix.direct_effect(model, unit.layer, unit.index)
        return ix.head_direct_effect(model, unit.layer, unit.index, source)
