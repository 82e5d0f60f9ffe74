"""Copy as Python for the neuron index: a unit's page and the unit search."""

from __future__ import annotations

from .. import keys as K
from ..model_service import ModelSpec
from .core import pieces_comment, prompt_lines, snippet, tokenizer_call


def _index_lines(spec: ModelSpec, per_play: int | None, names: str) -> tuple[tuple[str, ...], str]:
    """The lines that load the neuron index a page read (the bundled model's shipped one, or the server's own scan
    of `per_play` tokens from the start of every play, rebuilt), and their import of `names` beside it."""
    if spec.source == K.SOURCE_BUNDLED:
        return (
            (f"index = bundled_index({spec.name!r})                 # shipped with the model",),
            f"from gptviz.index import bundled_index, {names}",
        )
    enc = "" if tokenizer_call(spec) == "get_tokenizer()" else "enc=tokenizer_for(model)"  # its own ids (GPT-1's)
    return (
        (
            f"per_play = {per_play}",
            f"docs = [Document(d.name, d.ids[:per_play], d.held_out) for d in corpus_documents({enc})]",
            "index = build_index(model, docs)                     # the server's scan: the start of every play",
        ),
        f"from gptviz.index import Document, build_index, corpus_documents, {names}",
    )


def unit(spec: ModelSpec, unit_name: str, per_play: int | None) -> str:
    """What does this unit do?: a neuron's or head's summary, top examples, examples from each band of its positive
    values, quantiles and histogram from the neuron index."""
    load, imports = _index_lines(spec, per_play, "band_examples, histogram, quantiles, summary, top_examples")
    own = "" if tokenizer_call(spec) == "get_tokenizer()" else ", tokenizer_for(model)"
    return snippet(
        "What does this unit do?",
        spec,
        *load,
        f"unit = {unit_name!r}",
        "result = {",
        f"    'summary': summary(index, unit{own}),",
        "    'top examples': top_examples(index, unit),        # .value, .doc_name, .pos: highest first",
        "    'bands': band_examples(index, unit),              # weakest fifth first: .lo, .hi, .examples",
        "    'quantiles': quantiles(index, unit),",
        "    'histogram': histogram(index, unit),              # (edges, counts) over every token scanned",
        "}",
        imports=imports,
    )


def units_here(spec: ModelSpec, ids, pos: int, per_play: int | None, text: str | None) -> str:
    """The unit search, on the prompt: the neurons and heads most active at one token, against their corpus peaks."""
    load, imports = _index_lines(spec, per_play, "units_at")
    return snippet(
        "the unit search, most active here",
        spec,
        *load,
        prompt_lines(ids, text, spec=spec),
        f"pos = {pos}",
        "result = (units_at(model, ids, pos, index=index, k=8, kind='neuron')",
        "          + units_at(model, ids, pos, index=index, k=4, kind='head'))   # .unit, .value, .share_of_peak",
        imports=imports,
    )


def units_for_word(spec: ModelSpec, token: int, per_play: int | None) -> str:
    """The unit search, by word: the neurons whose mean on one token is furthest above their own mean."""
    load, imports = _index_lines(spec, per_play, "units_for_token")
    return snippet(
        "the unit search, a word",
        spec,
        *load,
        f"token = {token}                                       # {pieces_comment(token, spec=spec)}",
        "result = units_for_token(index, token, k=10)         # .unit, .z, .mean",
        imports=imports,
    )
