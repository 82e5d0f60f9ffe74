"""One neuron or head over a corpus, as the app's unit page draws it: a summary line (with the exact share of tokens
where a neuron is active), its top examples as rows of tokens coloured by its value (the app's token_rows.js; a
head's rows name the token its peak attends to), the histogram of its values with its quantiles, and the tokens its
output promotes and suppresses (gptviz.figures.unit_page, the page's own figure factories).

    from gptviz import load_pretrained
    from gptviz.notebook import unit
    unit(load_pretrained("shakespeare-pre"), "L2N26", "shakespeare-pre")   # the bundled model's shipped index
"""

from __future__ import annotations

from pathlib import Path

from .. import index as ix
from ..figures import unit_page as fu

# the unit page's context around each peak (gptviz.app.unit_index.EXAMPLES_BEFORE / EXAMPLES_AFTER: that module
# imports Streamlit, so the two numbers are repeated here; tests/notebook/test_notebook_widgets.py checks they agree)
EXAMPLES_BEFORE, EXAMPLES_AFTER = 20, 6
COLOURS = ("value", "attention")


def find_index(index, model) -> ix.NeuronIndex:
    """`index` as a NeuronIndex: one already loaded, a folder (python -m gptviz index --out), or a bundled model's
    name (its shipped index). It must have been built from these very weights: another model's examples and values
    would be shown as this one's."""
    if isinstance(index, ix.NeuronIndex):
        found = index
    elif isinstance(index, (str, Path)) and Path(index).is_dir():
        found = ix.load_index(index)
    elif isinstance(index, str):
        found = ix.bundled_index(index)
        if found is None:
            raise ValueError(f"{index!r} is neither a folder holding an index nor a bundled model with one")
    else:
        raise TypeError(
            f"index must be a NeuronIndex, an index folder or a bundled model's name, not {type(index).__name__}"
        )
    why = ix.index_mismatch(found, model, weights=True)  # other weights, or its ids in another tokenizer
    if why:
        raise ValueError(why)
    return found


def distribution_line(index: ix.NeuronIndex, u: ix.Unit) -> str:
    """What the histogram shows, as the unit page says it; a neuron's share of active tokens is exact
    (ix.active_phrase: "active on 3 of 1,465,708 tokens (0.0002%)", never rounded to 0)."""
    i = index.flat(u)
    what = (
        f"{ix.active_phrase(index, u)} (active: > 0), of the {index.tokens:,} scanned"
        if u.kind == "neuron"
        else f"its output norm at each of the {index.tokens:,} tokens"
    )
    return (
        f"Distribution: {what}; dashed lines at the 1%, 50% and 99% quantiles (mean "
        f"{index.arrays['mean'][i]:.3g}, sd {index.arrays['std'][i]:.3g})."
    )


class UnitData:
    """What unit() shows, without widgets (for code and tests): the unit, its summary and distribution lines, its
    top examples and their contexts, the rows drawn, the token_rows payload, the histogram and direct-effect
    figures (go.Figure)."""

    def __init__(
        self,
        model,
        unit,
        index,
        *,
        docs=None,
        k: int | None = None,
        colour: str = "value",
        effect: bool = True,
        log: bool = True,
        before: int = EXAMPLES_BEFORE,
        after: int = EXAMPLES_AFTER,
    ):
        from ..figures.browser.token_rows import payload
        from ..model.tokenizer import token_labels, tokenizer_for

        if colour not in COLOURS:
            raise ValueError(f"colour must be one of {', '.join(COLOURS)}, got {colour!r}")
        self.index = find_index(index, model)
        self.unit = u = self.index.unit(unit)
        if colour == "attention" and u.kind != "head":
            raise ValueError("colour='attention' is for a head (where its peak token looks); a neuron has its value")
        enc = tokenizer_for(model)  # the index's ids are the model's tokenizer's (find_index checked)
        self.summary = ix.summary(self.index, u, enc)
        self.distribution = distribution_line(self.index, u)
        self.examples = ix.top_examples(self.index, u, k)
        docs = ix.index_documents(self.index, enc=enc) if docs is None else docs
        self.contexts = ix.example_contexts(self.index, docs, self.examples, model=model, before=before, after=after)
        by_attention = colour == "attention"
        self.value_name = "attention" if by_attention else ("activation" if u.kind == "neuron" else "output norm")
        cmax = 1.0 if by_attention else max((e.value for e in self.examples), default=1.0)
        self.rows = fu.example_rows(self.index, self.contexts, self.examples, by_attention=by_attention, enc=enc)
        self.payload = payload(self.rows, value_name=self.value_name, cmax=cmax)
        edges, counts = ix.histogram(self.index, u)
        self.histogram = fu.unit_histogram(
            edges,
            counts,
            ix.quantiles(self.index, u),
            log=log,
            value_name="activation" if u.kind == "neuron" else "output norm",
        )
        self.effect = None
        if effect:
            if u.kind == "neuron":
                found = ix.direct_effect(model, u.layer, u.index)
                self.effect_line = (
                    "Direct effect on the logits: its output weights through the final norm and the unembedding."
                )
            else:  # what attending to the token its top example looks at most writes (the page's default source)
                looks = ix.attended(self.contexts[0]) if self.contexts else None
                source = looks.token if looks is not None else 0
                found = ix.head_direct_effect(model, u.layer, u.index, source)
                self.effect_line = (
                    f"Direct effect on the logits: what attending to {token_labels([source], enc)[0]} "
                    "writes, through the final norm and the unembedding."
                )
            labels = lambda items: [(token_labels([t], enc)[0], v) for t, v in items]  # noqa: E731
            self.effect = fu.direct_effect_bars(labels(found.promoted), labels(found.suppressed))


def unit(
    model, unit, index, *, docs=None, k: int | None = None, colour: str = "value", effect: bool = True, log: bool = True
):
    """A neuron's or head's top examples over the corpus an index scanned, as on the app's unit page. `unit`:
    "L2N26", "L1H2", a gptviz.index.Unit or a flat unit number; `index`: a NeuronIndex, an index folder or a
    bundled model's name; `docs`: the index's documents (read again from its corpus when None); `k`: how many
    examples (all it kept when None); `colour`: "value" (activation, or a head's output norm) or, for a head,
    "attention" (where its peak token looks); `effect`: also the tokens its output promotes and suppresses."""
    from .widgets import UnitView

    return UnitView(UnitData(model, unit, index, docs=docs, k=k, colour=colour, effect=effect, log=log))


__all__ = ["unit", "UnitData", "find_index", "distribution_line", "EXAMPLES_BEFORE", "EXAMPLES_AFTER"]
