"""The "What does this unit do?" page's computations: the units most active at a token of the prompt, a unit's
direct effect on the logits, each within a reservation of the server's memory (the examples and the index itself
are gptviz.app.unit_index's), the counts of the tokens the index lists, and the unit's page as Neuronpedia's
feature-dashboard JSON and as one HTML file."""

from __future__ import annotations

import numpy as np

from ... import index as ix
from ...model import sizes
from ...model.model import GPT
from ...model.tokenizer import tokenizer_for
from ...serve import limits, memory
from ...serve.limits import TOKEN_BOX_CHARS  # noqa: F401 (the page's one-token boxes read it here)
from .. import model_service
from .. import unit_index as ui
from . import cached


def index_tokens_limit() -> int:
    """The most corpus tokens an index built on request may scan (GPTVIZ_INDEX_TOKENS)."""
    return limits.server_limits().index_tokens


@cached
def units_here(spec: model_service.ModelSpec, ids: tuple[int, ...], pos: int) -> list[ix.UnitScore]:
    """The 8 neurons and 4 heads most active at `pos` of the prompt, relative to their corpus peaks (cached)."""
    loaded, model = ui.find_index(spec), model_service.load_model(spec)
    with memory.reserve(sizes.units_at_nbytes(model.config, len(ids)), f"every unit's value on {len(ids)} tokens"):
        return ix.units_at(model, ids, pos, index=loaded.index, k=8, kind="neuron") + ix.units_at(
            model, ids, pos, index=loaded.index, k=4, kind="head"
        )


def direct_effect(model: GPT, unit: ix.Unit, source: int | None = None) -> ix.DirectEffect:
    """The unit's direct effect on the logits, its memory reserved first (LimitError when there is no room)."""
    with memory.reserve(sizes.direct_effect_nbytes(model.config), f"the direct effect of {unit}"):
        if unit.kind == "neuron":
            return ix.direct_effect(model, unit.layer, unit.index)
        return ix.head_direct_effect(model, unit.layer, unit.index, source)


class TokenCounts:
    """How often each token the index lists occurs in the corpus, read from its sorted arrays by binary search (a
    dict of every listed token, built on each run, was the word search's largest allocation)."""

    def __init__(self, index: ix.NeuronIndex):
        self.ids, self.counts = index.arrays["token_ids"], index.arrays["token_counts"]

    def __contains__(self, token: int) -> bool:
        row = int(np.searchsorted(self.ids, token))
        return row < len(self.ids) and int(self.ids[row]) == token

    def __getitem__(self, token: int) -> int:
        if token not in self:
            raise KeyError(token)
        return int(self.counts[int(np.searchsorted(self.ids, token))])


def unit_dashboard(spec: model_service.ModelSpec, loaded: ui.Loaded, unit: ix.Unit, source: int | None) -> dict:
    """The unit's page as Neuronpedia's feature-dashboard JSON (gptviz.index.dashboard): its top and band examples'
    contexts as the page shows them (cached), its direct effect (a head's of attending to `source`)."""
    from ...index import dashboard

    model = model_service.load_model(spec)
    top, bands = ui.contexts(spec, loaded, unit), ui.band_contexts(spec, loaded, unit)
    effect = direct_effect(model, unit, source)
    features = [dashboard.feature(loaded.index, unit, top, bands, effect, source, tokenizer_for(model))]
    return dashboard.batch(loaded.index, features, unit.layer, unit.kind)


def unit_json(spec: model_service.ModelSpec, loaded: ui.Loaded, unit: ix.Unit, source: int | None) -> bytes:
    import json

    return json.dumps(unit_dashboard(spec, loaded, unit, source), indent=1, allow_nan=False).encode()


def unit_html(spec: model_service.ModelSpec, loaded: ui.Loaded, unit: ix.Unit, source: int | None) -> bytes:
    """The same page as one HTML file that opens offline, drawn from that JSON (gptviz.notebook.unit_page)."""
    from ...notebook.unit_page import dashboard_html

    enc = tokenizer_for(model_service.load_model(spec))  # the ids' labels in the model's own tokenizer
    return dashboard_html(unit_dashboard(spec, loaded, unit, source), enc=enc).encode()
