"""Reading an index: top examples with their contexts, units active on a prompt or a token, summaries."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..model.hooks import act_name, capture, capturing, unit_hook_names
from .constants import DEAD_PEAK, TOP_TOKENS
from .corpus import Document, _as_documents, _checksum, corpus_documents, scoring_window, tokenize_corpus
from .histograms import _edges
from .store import NeuronIndex
from .unit_ids import Unit, UnitLike, _unit_at, _values_from_store, head_write_norms, unit_values


def index_documents(index: NeuronIndex, folder=None, enc=None) -> list[Document]:
    """The documents an index was built from, read again and checked against the index's lengths and checksums
    (ValueError when they differ): from `folder` when given; else from the corpus file or folder the index records
    (an index over your own corpus, tokenized again into a memory-mapped temporary file), else the complete works.
    `enc`: the tokenizer the index was built with (its model's, tokenizer_for; default GPT-2's)."""
    from .tokens import tokenizer_mismatch

    why = tokenizer_mismatch(index.meta, enc)
    if why:
        raise ValueError(why)
    corpus = index.meta["corpus"]
    if folder is None and corpus.get("path"):
        with tempfile.NamedTemporaryFile(prefix="gptviz-corpus-", suffix=".ids") as store:
            # the documents hold the file open: they read it after its name is gone
            docs = tokenize_corpus(
                corpus["path"],
                Path(store.name),
                text_column=corpus.get("text_column", "text"),
                limit_tokens=corpus["tokens"],
                on_skip=lambda name, why: None,
                enc=enc,
            )  # said
            # at the scan
    else:
        docs = corpus_documents(
            folder, [d["name"] for d in index.documents if d["held_out"]], limit_tokens=corpus["tokens"], enc=enc
        )  # as far as the scan read (--max-tokens)
    check_documents(index, docs)
    return docs


def check_documents(index: NeuronIndex, docs) -> None:
    docs = _as_documents(docs)
    listed = index.documents
    if len(docs) != len(listed):
        raise ValueError(f"the index was built from {len(listed)} documents, not {len(docs)}")
    for d, m in zip(docs, listed, strict=True):
        if len(d.ids) != m["tokens"] or _checksum(d.ids) != m["crc32"]:
            raise ValueError(f"document {m['name']!r} differs from the one the index was built from")


@dataclass(frozen=True)
class Example:
    unit: Unit
    rank: int  # 0 = the unit's highest activation in the corpus
    doc: int  # document index
    doc_name: str
    pos: int  # token position in the document
    value: float


def top_examples(index: NeuronIndex, unit: UnitLike, k: int | None = None) -> list[Example]:
    """The unit's k highest activations over the corpus (all kept, TOP_K, by default), highest first."""
    u = index.unit(unit)
    i = index.flat(u)
    a = index.arrays
    n = a["top_values"].shape[1] if k is None else min(k, a["top_values"].shape[1])
    return [
        Example(
            u,
            r,
            int(a["top_doc"][i, r]),
            index.documents[int(a["top_doc"][i, r])]["name"],
            int(a["top_pos"][i, r]),
            float(a["top_values"][i, r]),
        )
        for r in range(n)
        if a["top_doc"][i, r] >= 0
    ]


@dataclass(frozen=True)
class Band:
    """One band of a unit's positive values: its values lie in (lo, hi], between the quantiles `levels` of the
    positive values (0.2, 0.4: the second fifth), and `examples` are a uniform sample of them (bands.py), highest
    first. `sampled`: how many of the unit's sampled positive values fell in it (fewer than BAND_EXAMPLES: fewer
    examples)."""

    number: int  # 0 = the weakest fifth
    lo: float
    hi: float
    levels: tuple[float, float]
    examples: list[Example]
    sampled: int


def positive_count(index: NeuronIndex, unit: UnitLike) -> int:
    """How many of the tokens scanned the unit is > 0 on (its histogram's bins above the 0 edge hold exactly those)."""
    edges, counts = histogram(index, unit)
    return int(counts[edges[:-1] >= 0].sum())


def band_examples(index: NeuronIndex, unit: UnitLike) -> list[Band]:
    """The unit's bands from its weakest positive values to its strongest, each with its examples; empty when the
    unit was never > 0 on the corpus."""
    u = index.unit(unit)
    i = index.flat(u)
    a = index.arrays
    edges = a["band_edges"][i]
    if not np.isfinite(edges).all():
        return []
    levels = [0.0, *index.meta["bands"]["levels"], 1.0]
    out = []
    for b in range(len(edges) - 1):
        doc, pos, value = a["band_doc"][i, b], a["band_pos"][i, b], a["band_values"][i, b]
        examples = [
            Example(u, r, int(doc[r]), index.documents[int(doc[r])]["name"], int(pos[r]), float(value[r]))
            for r in range(len(doc))
            if doc[r] >= 0
        ]
        out.append(
            Band(
                b,
                float(edges[b]),
                float(edges[b + 1]),
                (levels[b], levels[b + 1]),
                examples,
                int(a["band_sampled"][i, b]),
            )
        )
    return out


@dataclass(frozen=True)
class Context:
    """Tokens around a position and the unit's score on each, as the scan scored it (each token in its own
    scoring window: the same left context the index saw)."""

    unit: Unit
    doc: int
    pos: int
    positions: np.ndarray  # document positions of the context's tokens
    ids: np.ndarray
    values: np.ndarray  # the unit's score on each token
    peak: int  # index of `pos` within positions
    attention: np.ndarray | None = None  # heads: the weight the query at `pos` puts on each context token
    # (0 after it; NaN before its scoring window)


@dataclass(frozen=True)
class Attended:
    """Where a head's query at a context's peak puts most of its attention."""

    token: int  # the token id it attends to most
    back: int  # how many positions before the peak (0: itself, 1: the previous token)
    weight: float  # its attention weight
    after_copy: bool  # the token before it is the peak's own token: the pattern of an induction head


def attended(context: Context) -> Attended | None:
    """For a head's context: the token the peak attends to most; None for a neuron or when the context holds none of
    the peak's keys."""
    a = context.attention
    if a is None or not np.isfinite(a).any():
        return None
    j = int(np.nanargmax(a))
    after_copy = 1 <= j < context.peak and context.ids[j - 1] == context.ids[context.peak]
    return Attended(int(context.ids[j]), int(context.peak - j), float(a[j]), bool(after_copy))


def example_context(
    index: NeuronIndex, corpus_docs, doc: int, pos: int, *, model, unit: UnitLike, before: int = 24, after: int = 8
) -> Context:
    """Token ids from `before` tokens before `pos` to `after` after it (clipped to the document) with the unit's
    score on each, recomputed with fresh captures of each token's scoring window; for a head also where the query
    at `pos` attends. `corpus_docs`: the index's documents (index_documents(index))."""
    u = index.unit(unit)
    _check_model(index, model)
    docs = _as_documents(corpus_docs)
    if not 0 <= doc < len(docs) or len(docs[doc].ids) != index.documents[doc]["tokens"]:
        raise ValueError(f"document {doc} is not the index's document {doc}")
    ids = docs[doc].ids
    if not 0 <= pos < len(ids):
        raise ValueError(f"position {pos} is outside document {doc} ({len(ids)} tokens)")
    n_ctx, stride = index.meta["windows"]["n_ctx"], index.meta["windows"]["stride"]
    lo, hi = max(0, pos - before), min(len(ids), pos + after + 1)
    positions = np.arange(lo, hi)
    starts = np.asarray([scoring_window(int(t), n_ctx, stride) for t in positions])
    values = np.empty(len(positions), dtype=np.float32)
    flat = index.flat(u)
    attention = None
    for start in np.unique(starts):
        mine = starts == start
        end = int(positions[mine].max()) + 1  # causal: the window's later tokens change nothing before `end`
        window = torch.from_numpy(ids[start:end])
        _, cache = capture(model, window[None], unit_hook_names(model.config))  # the scan's (fused) attention path
        all_values = _values_from_store(model, cache, end - start)
        values[mine] = all_values[positions[mine] - start, flat].numpy()
        if u.kind == "head" and start == scoring_window(pos, n_ctx, stride):
            _, cache = capture(model, torch.from_numpy(ids[start : pos + 1])[None], act_name("pattern", u.layer))
            row = cache[act_name("pattern", u.layer)][0, u.index, pos - start].numpy()  # over keys start..pos
            attention = np.full(len(positions), np.nan, dtype=np.float32)
            for j, t in enumerate(positions):
                if start <= t <= pos:
                    attention[j] = row[t - start]
                elif t > pos:
                    attention[j] = 0.0
    return Context(u, doc, pos, positions, ids[lo:hi].copy(), values, int(pos - lo), attention)


def _context_plan(index: NeuronIndex, docs: list[Document], examples: Sequence[Example], before: int, after: int):
    """example_contexts' batch, before anything runs: segments, the (doc, start, end) windows to run, and per
    example its positions, their scoring windows' starts and their rows in the batch."""
    if any(e.unit != examples[0].unit for e in examples):
        raise ValueError("example_contexts takes examples of one unit")
    n_ctx, stride = index.meta["windows"]["n_ctx"], index.meta["windows"]["stride"]
    segments, plans = [], []
    for e in examples:
        if not 0 <= e.doc < len(docs) or len(docs[e.doc].ids) != index.documents[e.doc]["tokens"]:
            raise ValueError(f"document {e.doc} is not the index's document {e.doc}")
        ids = docs[e.doc].ids
        lo, hi = max(0, e.pos - before), min(len(ids), e.pos + after + 1)
        positions = np.arange(lo, hi)
        starts = np.asarray([scoring_window(int(t), n_ctx, stride) for t in positions])
        rows = np.empty(len(positions), dtype=np.int64)
        for start in np.unique(starts):
            mine = starts == start
            rows[mine] = len(segments)
            segments.append((e.doc, int(start), int(positions[mine].max()) + 1))
        plans.append((positions, starts, rows))
    return segments, plans


def context_batch(
    index: NeuronIndex, corpus_docs, examples: Sequence[Example], *, before: int = 24, after: int = 8
) -> tuple[int, int]:
    """The batch example_contexts runs for `examples`: (windows, the longest window's tokens); (0, 0) for none.
    Its memory is gptviz.model.sizes.example_contexts_nbytes of these."""
    if not examples:
        return 0, 0
    segments, _ = _context_plan(index, _as_documents(corpus_docs), examples, before, after)
    return len(segments), max(end - start for _, start, end in segments)


def example_contexts(
    index: NeuronIndex, corpus_docs, examples: Sequence[Example], *, model, before: int = 24, after: int = 8
) -> list[Context]:
    """example_context for several examples of one unit in one batched forward pass (without the LM head): the
    same tokens, scoring windows and values (up to float rounding of batched matmuls), and for a head where the
    query at each peak attends. What a page showing a unit's top examples calls."""
    if not examples:
        return []
    u = examples[0].unit
    _check_model(index, model)
    docs = _as_documents(corpus_docs)
    n_ctx, stride = index.meta["windows"]["n_ctx"], index.meta["windows"]["stride"]
    segments, plans = _context_plan(index, docs, examples, before, after)
    T = max(end - start for _, start, end in segments)
    batch = torch.zeros(len(segments), T, dtype=torch.long)  # right-padded: causal attention keeps it out
    for b, (d, start, end) in enumerate(segments):
        batch[b, : end - start] = torch.from_numpy(docs[d].ids[start:end])
    hooks = {u.hook} | ({act_name("pattern", u.layer)} if u.kind == "head" else set())
    with capturing(frozenset(hooks)) as store, torch.inference_mode():
        model.final_hidden(batch)
    if u.kind == "neuron":
        scores = store[u.hook][..., u.index]  # (B, T)
    else:
        scores = head_write_norms(store[u.hook], model.blocks[u.layer].attn.c_proj.weight)[..., u.index]
    out = []
    for e, (positions, starts, rows) in zip(examples, plans, strict=True):
        values = scores[torch.from_numpy(rows), torch.from_numpy(positions - starts)].float().numpy()
        attention = None
        if u.kind == "head":
            peak_start = scoring_window(e.pos, n_ctx, stride)
            row = store[act_name("pattern", u.layer)][int(rows[positions == e.pos][0]), u.index, e.pos - peak_start]
            attention = np.where(positions > e.pos, 0.0, np.nan).astype(np.float32)
            inside = (positions >= peak_start) & (positions <= e.pos)
            attention[inside] = row[positions[inside] - peak_start].float().numpy()
        out.append(
            Context(
                u,
                e.doc,
                e.pos,
                positions,
                docs[e.doc].ids[positions[0] : positions[-1] + 1].copy(),
                values.astype(np.float32),
                int(e.pos - positions[0]),
                attention,
            )
        )
    return out


def _check_model(index: NeuronIndex, model) -> None:
    c = model.config
    mine = index.meta["config"]
    for field in ("n_layers", "d_ff", "n_heads", "n_ctx", "vocab_size", "d_model"):
        if getattr(c, field) != mine[field]:
            raise ValueError(f"this model's {field} is {getattr(c, field)}; the index's model has {mine[field]}")


@dataclass(frozen=True)
class UnitScore:
    unit: Unit
    value: float
    share_of_peak: float | None  # value / the unit's highest value in the index's corpus (None without an index)


def units_at(
    model, ids, position: int, *, index: NeuronIndex | None = None, k: int = 10, kind: str | None = None
) -> list[UnitScore]:
    """The units most active at `position` of a prompt (a fresh capture): ranked by value / the unit's corpus peak
    when an index is given (comparable across units), else by raw value. `kind`: "neuron", "head" or None (both)."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    if not -len(ids) <= position < len(ids):
        raise ValueError(f"position {position} is outside the prompt's {len(ids)} tokens")
    values = unit_values(model, ids)[position]
    c = model.config
    if index is not None:
        _check_model(index, model)
        peak = torch.from_numpy(index.arrays["top_values"][:, 0])
        # a unit that never rose clearly above 0 in the corpus (a dead neuron peaks near 0) has no scale to share:
        # dividing by its ~0 peak ranked it first everywhere
        rank = torch.where(peak > DEAD_PEAK, values / peak.clamp(min=DEAD_PEAK), torch.tensor(-math.inf))
    else:
        peak, rank = None, values.clone()
    n_neurons = c.n_layers * c.d_ff
    if kind == "neuron":
        rank[n_neurons:] = -math.inf
    elif kind == "head":
        rank[:n_neurons] = -math.inf
    elif kind is not None:
        raise ValueError(f"kind must be 'neuron', 'head' or None, got {kind!r}")
    top = rank.topk(min(k, int(torch.isfinite(rank).sum())))
    return [
        UnitScore(
            _unit_at(int(i), c.n_layers, c.d_ff, c.n_heads),
            float(values[i]),
            float(rank[i]) if peak is not None else None,
        )
        for i in top.indices
    ]


@dataclass(frozen=True)
class TokenUnit:
    unit: Unit
    z: float  # (the unit's mean on the token - its corpus mean) / its corpus standard deviation
    mean: float  # the unit's mean on the token


def units_for_token(index: NeuronIndex, token_id: int, k: int = 10, kind: str = "neuron") -> list[TokenUnit]:
    """The neurons (kind="head": heads) that fire most on `token_id` across the corpus, by z-scored mean; empty
    when the token occurs fewer than min_count times in the corpus."""
    a = index.arrays
    row = np.searchsorted(a["token_ids"], token_id)
    if row >= len(a["token_ids"]) or a["token_ids"][row] != token_id:
        return []
    if kind not in ("neuron", "head"):
        raise ValueError(f"kind must be 'neuron' or 'head', got {kind!r}")
    units, zs = (a["token_neurons"], a["token_neuron_z"]) if kind == "neuron" else (a["token_heads"], a["token_head_z"])
    out = []
    for i, z in zip(units[row][:k], zs[row][:k], strict=True):
        out.append(TokenUnit(index.unit(int(i)), float(z), float(z * a["std"][i] + a["mean"][i])))
    return out


def histogram(index: NeuronIndex, unit: UnitLike) -> tuple[np.ndarray, np.ndarray]:
    """(edges [bins + 1], counts [bins]) of the unit's values over every token scanned."""
    i = index.flat(unit)
    a = index.arrays
    edges = _edges(a["hist_range"][i : i + 1], a["min_max"][i : i + 1], index.meta["bins"])[0]
    return edges, a["hist_counts"][i].astype(np.int64)


def quantiles(index: NeuronIndex, unit: UnitLike) -> dict[float, float]:
    i = index.flat(unit)
    return {
        float(q): float(v) for q, v in zip(index.meta["quantile_levels"], index.arrays["quantiles"][i], strict=True)
    }


def top_tokens(index: NeuronIndex, unit: UnitLike, k: int = TOP_TOKENS) -> list[tuple[int, float]]:
    """(token id, the unit's mean on it) for the tokens it fires on most (see TOKEN_RANK)."""
    i = index.flat(unit)
    a = index.arrays
    return [(int(t), float(m)) for t, m in zip(a["top_token_ids"][i][:k], a["top_token_mean"][i][:k], strict=True)]


def active_phrase(index: NeuronIndex, unit: UnitLike) -> str:
    """How often a neuron is active (> 0), in words that never round a rare neuron to 0 or a busy one to all:
    "active on 13.3% of tokens", "active on 3 of 1,465,708 tokens (0.0002%)", "never active (> 0) on the ..."."""
    share = float(index.arrays["active_share"][index.flat(unit)])
    count = round(share * index.tokens)
    if count == 0:
        return f"never active (> 0) on the {index.tokens:,} tokens"
    if 0.001 <= share <= 0.999:
        return f"active on {share:.1%} of tokens"
    return f"active on {count:,} of {index.tokens:,} tokens ({100 * share:.2g}%)"


def summary(index: NeuronIndex, unit: UnitLike, enc=None) -> str:
    """One line about a unit, computed from the index, e.g. "L2N17: active on 4.1% of tokens; median -0.04,
    99% 0.61, peak 2.3; top tokens: ' the', ' my', ...". `enc`: the index's tokenizer (its model's; GPT-2's)."""
    from ..model.tokenizer import get_tokenizer

    u = index.unit(unit)
    i = index.flat(u)
    a = index.arrays
    enc = enc or get_tokenizer()
    q = quantiles(index, u)
    words = ", ".join(repr(enc.decode([t])) for t, _ in top_tokens(index, u, 5)) or "none frequent enough"
    peak = float(a["top_values"][i, 0]) + 0.0  # + 0.0: -0.0 (GELU far below 0) reads "0", not "-0"
    median, top = q.get(0.5, float("nan")) + 0.0, q.get(0.99, float("nan")) + 0.0
    spread = f"median {median:.3g}, 99% {top:.3g}, peak {peak:.3g}"
    if u.kind == "neuron":
        return f"{u}: {active_phrase(index, u)}; {spread}; top tokens: {words}"
    return f"{u}: output norm {spread}; top tokens: {words}"
