"""What does this neuron do? Corpus-wide top activations for every MLP neuron and attention head.

One scan of a corpus (token ids split into documents, e.g. one per play) keeps, for every unit, its top activations
with their locations, a histogram of all its values, quantiles, the share of positions where it is active, and the
tokens it fires on most. Nothing is held for all positions at once: windows stream through the model in batches and
every statistic is a running one (top-k by torch.topk merges, histograms by bincount, sums per token).

Units. Neurons are `blocks.{l}.mlp.hook_post` (after the activation function), every layer x d_ff. Heads are scored
per query position by HEAD_SCORE: the L2 norm of what the head writes into the residual stream at that position,
||z_h W_O^h|| (its attention-weighted values through its slice of c_proj's weight; c_proj's bias, shared by all
heads, is left out). It is always >= 0; a head that parks its attention on a sink with small values scores low,
and a head that moves a large vector scores high. Units are numbered flat: neurons layer by layer, then heads.

Windows. A document is cut into windows of the model's n_ctx tokens that start every `stride` tokens
(default n_ctx - n_ctx // 4, so windows overlap by a quarter). Each token is scored once, in the window where it
has left context: the first window of a document scores all its positions; each later one only its last `stride`
positions, so every token has at least n_ctx - stride tokens of left context, or the whole document before it.
Position t of a document is scored in window k = 0 if t < n_ctx, else (t - n_ctx) // stride + 1, which starts at
k * stride (`scoring_window`).

Histograms have BINS bins per unit: uniform over the range (widened to include 0) that a first pass over a spread
sample of the windows saw, shifted so that 0 is a bin edge; a value outside falls into the outer bin, whose outer
edge is then moved to the scan's exact minimum or maximum, so every value lies within the edges and the counts add
up to the tokens scanned. Bins are left-open, (a, b], and a value's side of the 0 edge is decided by its sign alone,
so 0 and -0.0 (GELU far below 0) fall below it and the bins above it hold exactly the values > 0. A neuron's share of
active positions (> 0) is counted directly. Quantiles are read from the histogram (linear within a bin, then clipped
to the unit's exact extremes: off by at most one bin's width). Mean and standard deviation are running sums.

Top tokens: for each unit, the TOP_TOKENS token ids with the highest mean activation over their occurrences, among
tokens that occur at least `min_count` times in the corpus. For each such token, the units with the highest
z-scored mean on it ((mean on the token - the unit's mean) / the unit's standard deviation), for
units_for_token.

On disk (`save_index` / `load_index`): a folder with index.json (metadata: format and version, model name, config
and weights fingerprint, the corpus's documents with their lengths, checksums and which are held-out plays,
windows, score definitions, scan time and memory) and index.npz (arrays; loaded with allow_pickle=False).
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Union

import numpy as np
import torch

from .hooks import act_name, capture, capturing

FORMAT = "gptviz-index"
VERSION = 2  # 2: active share counted directly, sign-exact bins, exact extremes (version 1 misbinned -0.0)
INDEX_JSON, INDEX_NPZ = "index.json", "index.npz"
TOP_K = 20              # top activations kept per unit
BINS = 128              # histogram bins per unit
QUANTILES = (0.01, 0.5, 0.99)
TOP_TOKENS = 10         # tokens listed per unit
MIN_COUNT = 20          # a token needs this many occurrences to be ranked by its mean
TOKEN_UNITS = 10        # neurons (and up to this many heads) listed per token
SAMPLE_WINDOWS = 256    # windows of the first pass that fixes the histogram range
DEAD_PEAK = 1e-3        # units_at skips a unit whose corpus peak is at most this (a dead neuron)
BATCH_VALUES = 9_000_000  # default batch: about this many unit values (36 MB of float32) per forward pass

NEURON_SCORE = ("activation after the MLP's nonlinearity (blocks.{layer}.mlp.hook_post), at each position; "
                "active means > 0")
HEAD_SCORE = ("L2 norm of the head's write into the residual stream at each query position: "
              "||z_h @ W_O^h||, z_h = blocks.{layer}.attn.hook_z[..., h, :], W_O^h = the head's d_head rows of "
              "c_proj's [in, out] weight; c_proj's bias (shared by all heads) left out")
TOKEN_RANK = ("per unit: token ids by the unit's mean activation over their occurrences, among tokens occurring at "
              "least min_count times; per token: units by z-scored mean ((mean on token - unit mean) / unit std)")

UnitLike = Union["Unit", str, int, tuple]


class IndexFormatError(ValueError):
    """An index folder is missing, corrupt, of another format version, or does not match what it describes."""


class Unit(NamedTuple):
    """A neuron (`kind` "neuron", index in 0..d_ff-1) or a head (`kind` "head", index in 0..n_heads-1)."""
    kind: str
    layer: int
    index: int

    def __str__(self) -> str:
        return f"L{self.layer}{'N' if self.kind == 'neuron' else 'H'}{self.index}"

    @property
    def hook(self) -> str:
        return act_name("post" if self.kind == "neuron" else "z", self.layer)


@dataclass(frozen=True)
class Document:
    """One document of a corpus (a play): its token ids and whether the bundled models were trained on it."""
    name: str
    ids: np.ndarray  # int64
    held_out: bool = False


@dataclass
class NeuronIndex:
    """A scan's results: `meta` (JSON-able) and `arrays` (numpy, one row per unit unless said otherwise)."""
    meta: dict
    arrays: dict[str, np.ndarray]

    @property
    def n_layers(self) -> int:
        return self.meta["config"]["n_layers"]

    @property
    def d_ff(self) -> int:
        return self.meta["config"]["d_ff"]

    @property
    def n_heads(self) -> int:
        return self.meta["config"]["n_heads"]

    @property
    def n_neurons(self) -> int:
        return self.n_layers * self.d_ff

    @property
    def n_units(self) -> int:
        return self.n_neurons + self.n_layers * self.n_heads

    @property
    def documents(self) -> list[dict]:
        return self.meta["corpus"]["documents"]

    @property
    def tokens(self) -> int:
        return self.meta["corpus"]["tokens"]

    def unit(self, unit: UnitLike) -> Unit:
        return _as_unit(unit, self.n_layers, self.d_ff, self.n_heads)

    def flat(self, unit: UnitLike) -> int:
        return _flat(self.unit(unit), self.d_ff, self.n_heads, self.n_layers)

    def units(self) -> list[Unit]:
        return [_unit_at(i, self.n_layers, self.d_ff, self.n_heads) for i in range(self.n_units)]


# ---------------------------------------------------------------------------------------------------- units

def _flat(unit: Unit, d_ff: int, n_heads: int, n_layers: int) -> int:
    if unit.kind == "neuron":
        return unit.layer * d_ff + unit.index
    return n_layers * d_ff + unit.layer * n_heads + unit.index


def _unit_at(i: int, n_layers: int, d_ff: int, n_heads: int) -> Unit:
    n_neurons = n_layers * d_ff
    if i < n_neurons:
        return Unit("neuron", i // d_ff, i % d_ff)
    return Unit("head", (i - n_neurons) // n_heads, (i - n_neurons) % n_heads)


def _as_unit(unit: UnitLike, n_layers: int, d_ff: int, n_heads: int) -> Unit:
    """A Unit from a Unit, "L2N123" / "L1H3", a (kind, layer, index) tuple or a flat index; ValueError when out of
    range."""
    if isinstance(unit, (int, np.integer)) and not isinstance(unit, bool):
        if not 0 <= unit < n_layers * (d_ff + n_heads):
            raise ValueError(f"unit {unit} is not in 0..{n_layers * (d_ff + n_heads) - 1}")
        return _unit_at(int(unit), n_layers, d_ff, n_heads)
    if isinstance(unit, str):
        text = unit.strip().upper()
        try:
            layer_text, kind, index_text = (text[1:].partition("N") if "N" in text
                                            else text[1:].partition("H"))
            if not text.startswith("L") or not kind:
                raise ValueError
            unit = Unit("neuron" if kind == "N" else "head", int(layer_text), int(index_text))
        except ValueError:
            raise ValueError(f"unit {unit!r}: write it as L<layer>N<neuron> or L<layer>H<head>, e.g. L2N123") from None
    kind, layer, index = unit
    if kind not in ("neuron", "head"):
        raise ValueError(f"unit kind must be 'neuron' or 'head', got {kind!r}")
    size = d_ff if kind == "neuron" else n_heads
    if not (0 <= int(layer) < n_layers and 0 <= int(index) < size):
        raise ValueError(f"{kind} {index} of layer {layer} does not exist ({n_layers} layers x {size})")
    return Unit(kind, int(layer), int(index))


def head_write_norms(z: torch.Tensor, c_proj_weight: torch.Tensor) -> torch.Tensor:
    """HEAD_SCORE: [..., heads, d_head] z and c_proj's [out, in] weight -> [..., heads] norms of each head's write."""
    n_heads, d_head = z.shape[-2], z.shape[-1]
    w = c_proj_weight.detach().to(torch.float32).t().reshape(n_heads, d_head, -1)  # (nh, hs, C): W_O^h
    return torch.einsum("...nj,njc->...nc", z.to(torch.float32), w).norm(dim=-1)


def _unit_hooks(config) -> list[str]:
    return ([act_name("post", l) for l in range(config.n_layers)]
            + [act_name("z", l) for l in range(config.n_layers)])


def _values_from_store(model, store, rows: int) -> torch.Tensor:
    """Every unit's score from a capture's store: [rows, n_units] (rows = batch x T, flattened)."""
    L = model.config.n_layers
    parts = [store[act_name("post", l)].reshape(rows, -1) for l in range(L)]
    parts += [head_write_norms(store[act_name("z", l)], model.blocks[l].attn.c_proj.weight).reshape(rows, -1)
              for l in range(L)]
    return torch.cat(parts, dim=1)


def unit_values(model, ids) -> torch.Tensor:
    """Every unit's score at every position of one sequence (a fresh capture): [T, n_units], units numbered as in
    an index (neurons layer by layer, then heads)."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    _, cache = capture(model, ids, _unit_hooks(model.config))
    return _values_from_store(model, cache, ids.shape[1])


# ---------------------------------------------------------------------------------------------------- corpus

def corpus_documents(folder=None, held_out: Sequence[str] | None = None) -> list[Document]:
    """A folder of plays (default: the complete works) as documents, one per file in `play_files` order, each the
    file's GPT-2 ids (no <|endoftext|>); `held_out` (default HELD_OUT_PLAYS) marks the plays the bundled models
    never trained on."""
    from .corpus import HELD_OUT_PLAYS, WORKS, play_files, play_name
    from .tokenizer import get_tokenizer
    held = set(HELD_OUT_PLAYS if held_out is None else held_out)
    enc = get_tokenizer()
    return [Document(play_name(p), np.asarray(enc.encode(p.read_text(encoding="utf-8")), dtype=np.int64),
                     play_name(p) in held) for p in play_files(WORKS if folder is None else folder)]


def _as_documents(docs) -> list[Document]:
    out = []
    for i, d in enumerate(docs):
        if isinstance(d, Document):
            out.append(Document(d.name, np.asarray(d.ids, dtype=np.int64).reshape(-1), d.held_out))
        else:
            out.append(Document(f"doc{i}", np.asarray(d, dtype=np.int64).reshape(-1)))
    return out


def _checksum(ids: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(ids, dtype=np.int64).tobytes())


def index_documents(index: NeuronIndex, folder=None) -> list[Document]:
    """The documents an index was built from, read again from `folder` (default: the complete works) and checked
    against the index's lengths and checksums; ValueError when they differ."""
    docs = corpus_documents(folder, [d["name"] for d in index.documents if d["held_out"]])
    check_documents(index, docs)
    return docs


def check_documents(index: NeuronIndex, docs) -> None:
    docs = _as_documents(docs)
    listed = index.documents
    if len(docs) != len(listed):
        raise ValueError(f"the index was built from {len(listed)} documents, not {len(docs)}")
    for d, m in zip(docs, listed):
        if len(d.ids) != m["tokens"] or _checksum(d.ids) != m["crc32"]:
            raise ValueError(f"document {m['name']!r} differs from the one the index was built from")


def model_fingerprint(model) -> str:
    """sha256 of the model's config and weights (float32), to tell whether an index belongs to a model."""
    h = hashlib.sha256(json.dumps(_config_dict(model.config), sort_keys=True).encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def _config_dict(config) -> dict:
    import dataclasses
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


# ---------------------------------------------------------------------------------------------------- windows

def default_stride(n_ctx: int) -> int:
    return max(1, n_ctx - n_ctx // 4)


def scoring_window(pos: int, n_ctx: int, stride: int) -> int:
    """Where the scan scored position `pos` of a document: the start of its window (see the module docstring)."""
    return 0 if pos < n_ctx else ((pos - n_ctx) // stride + 1) * stride


def _windows(lengths: Sequence[int], n_ctx: int, stride: int) -> np.ndarray:
    """[n, 4] int64: document, start, length, first scored offset of every window, in corpus order."""
    rows = []
    for d, n in enumerate(lengths):
        k = 0
        while True:
            start = k * stride
            first = 0 if k == 0 else n_ctx - stride
            if k > 0 and start + first >= n:
                break
            rows.append((d, start, min(n_ctx, n - start), first))
            if start + n_ctx >= n:
                break
            k += 1
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4)


def _run_windows(model, docs, offsets, windows: np.ndarray, hooks):
    """Forward one batch of windows (right-padded: causal attention keeps padding out of earlier positions) without
    the LM head; -> (values [n_units, scored], global locations [scored], token ids [scored])."""
    B, T = len(windows), int(windows[:, 2].max())
    ids = torch.zeros(B, T, dtype=torch.long)
    scored = torch.zeros(B, T, dtype=torch.bool)
    for b, (d, start, length, first) in enumerate(windows):
        ids[b, :length] = torch.from_numpy(docs[d].ids[start:start + length])
        scored[b, first:length] = True
    sel = scored.reshape(-1).nonzero().squeeze(1)
    cfg = model.config
    L, F, H = cfg.n_layers, cfg.d_ff, cfg.n_heads
    values = torch.empty(L * (F + H), len(sel))  # (units, scored tokens): reductions run along rows
    with capturing(frozenset(hooks)) as store, torch.inference_mode():
        model.final_hidden(ids)
        for l in range(L):
            values[l * F:(l + 1) * F] = store[act_name("post", l)].reshape(B * T, F)[sel].t()
            norms = head_write_norms(store[act_name("z", l)], model.blocks[l].attn.c_proj.weight)
            values[L * F + l * H:L * F + (l + 1) * H] = norms.reshape(B * T, H)[sel].t()
    base = torch.from_numpy(offsets[windows[:, 0]] + windows[:, 1])  # global index of each window's start
    loc = (base[:, None] + torch.arange(T)[None]).reshape(-1)[sel]
    return values, loc, ids.reshape(-1)[sel]


# ---------------------------------------------------------------------------------------------------- the scan

def scan_nbytes(config, docs, *, batch: int | None = None, top_k: int = TOP_K, bins: int = BINS,
                min_count: int = MIN_COUNT) -> int:
    """About the most memory build_index takes beyond the model for `docs` (an estimate to check before a scan:
    the running sums per unit and frequent token, the histograms, one batch's activations and unit values)."""
    docs = _as_documents(docs)
    L, F, H, n_ctx = config.n_layers, config.d_ff, config.n_heads, config.n_ctx
    U = L * (F + H)
    if batch is None:
        batch = max(1, BATCH_VALUES // (n_ctx * U))
    counts = np.bincount(np.concatenate([d.ids for d in docs]), minlength=1) if docs else np.zeros(1)
    frequent = int((counts >= min_count).sum())
    per_unit = U * ((frequent + 1) * 4 * 3 + bins * 8 * 2 + top_k * 12 * 3 + 64)  # sums, means and z; counts
    tokens = batch * n_ctx
    activations = tokens * 4 * L * (F + config.d_model * 8 + H * n_ctx)  # captured post and z, the forward's
    return int(per_unit + tokens * U * 4 * 4 + activations)



def build_index(model, docs, *, model_name: str = "", source: str = "", stride: int | None = None,
                batch: int | None = None, top_k: int = TOP_K, bins: int = BINS, min_count: int = MIN_COUNT,
                progress: Callable[[int, int], None] | None = None) -> NeuronIndex:
    """Scan `docs` (Documents, or token-id sequences) with `model` once and return the index. `batch`: windows per
    forward pass (default: as many as keep a batch's unit values near BATCH_VALUES floats, 32 windows for
    shakespeare-pre, 1 for gpt2-small); `progress(tokens_done, tokens_total)` is called after each batch."""
    started = time.perf_counter()
    model.eval()
    cfg = model.config
    docs = _as_documents(docs)
    if not docs or any(len(d.ids) == 0 for d in docs):
        raise ValueError("every document needs at least one token")
    n_ctx = cfg.n_ctx
    stride = default_stride(n_ctx) if stride is None else int(stride)
    if not 1 <= stride <= n_ctx:
        raise ValueError(f"stride must be in 1..{n_ctx}, got {stride}")
    lengths = [len(d.ids) for d in docs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total = int(offsets[-1])
    all_ids = np.concatenate([d.ids for d in docs])
    if all_ids.min() < 0 or all_ids.max() >= cfg.vocab_size:
        raise ValueError(f"token ids must be in 0..{cfg.vocab_size - 1}")
    windows = _windows(lengths, n_ctx, stride)
    hooks = _unit_hooks(cfg)
    L, F, H = cfg.n_layers, cfg.d_ff, cfg.n_heads
    U = L * (F + H)
    K = min(top_k, total)
    if batch is None:
        batch = max(1, BATCH_VALUES // (n_ctx * U))

    # First pass: the histogram range from windows spread over the corpus.
    sample = windows[np.unique(np.linspace(0, len(windows) - 1, min(len(windows), SAMPLE_WINDOWS)).astype(int))]
    lo = torch.full((U,), math.inf)
    hi = torch.full((U,), -math.inf)
    for i in range(0, len(sample), batch):
        values, _, _ = _run_windows(model, docs, offsets, sample[i:i + batch], hooks)
        low, high = torch.aminmax(values, dim=1)
        lo, hi = torch.minimum(lo, low), torch.maximum(hi, high)
    # Uniform bins with 0 on an edge (bin `zero_bin` starts at 0), so the share of active positions (> 0) is the
    # count of the bins from there on; at least one bin below 0 and the sample's range covered.
    lo, hi = lo.clamp(max=0).double(), hi.clamp(min=0).double()
    width = ((hi - lo) / (bins - 1)).clamp(min=1e-6)
    zero_bin = torch.clamp(torch.ceil(-lo / width - 1e-9), min=1, max=bins - 1)
    lo = -zero_bin * width
    hi = lo + bins * width
    zero_bin = zero_bin.long()
    lo, inv_width = lo.float()[:, None], (1 / width).float()[:, None]
    zero_col = zero_bin.float()[:, None]

    # Tokens ranked by their mean need a slot each; rarer ones share a discarded slot.
    token_counts = np.bincount(all_ids, minlength=cfg.vocab_size)
    frequent = np.flatnonzero(token_counts >= min_count)
    slot_of = np.full(cfg.vocab_size, len(frequent), dtype=np.int64)
    slot_of[frequent] = np.arange(len(frequent))
    slot_of = torch.from_numpy(slot_of)

    best_v = torch.full((U, K), -math.inf)
    best_loc = torch.full((U, K), -1, dtype=torch.long)
    counts = torch.zeros(U * bins, dtype=torch.long)
    bin_base = (torch.arange(U, dtype=torch.int32) * bins)[:, None]
    vmin = torch.full((U,), math.inf)
    vmax = torch.full((U,), -math.inf)
    vsq = torch.zeros(U, dtype=torch.float64)
    active = torch.zeros(U, dtype=torch.long)  # values > 0, counted directly
    token_sums = torch.zeros(U, len(frequent) + 1)  # the last slot gathers the rare tokens
    done = 0
    for i in range(0, len(windows), batch):
        values, loc, tok = _run_windows(model, docs, offsets, windows[i:i + batch], hooks)  # (U, n)
        n = len(loc)
        top = values.topk(min(K, n), dim=1)                                   # (U, k)
        merged_v = torch.cat([best_v, top.values], dim=1)
        merged_loc = torch.cat([best_loc, loc[top.indices]], dim=1)
        keep = merged_v.topk(K, dim=1)
        best_v, best_loc = keep.values, merged_loc.gather(1, keep.indices)
        counts += torch.bincount(_bin_of(values, inv_width, zero_col, bins).add_(bin_base).reshape(-1),
                                 minlength=U * bins)
        active += (values > 0).sum(1)
        low, high = torch.aminmax(values, dim=1)
        vmin, vmax = torch.minimum(vmin, low), torch.maximum(vmax, high)
        vsq += torch.linalg.vecdot(values, values, dim=1).double()
        token_sums.index_add_(1, slot_of[tok], values)
        done += n
        if progress is not None:
            progress(done, total)
    assert done == total, (done, total)

    counts = counts.reshape(U, bins)
    mean = token_sums.double().sum(1) / total
    std = (vsq / total - mean * mean).clamp(min=0).sqrt()
    lo, hi = lo[:, 0], hi.float()
    edges_lo, edges_hi = torch.minimum(lo, vmin), torch.maximum(hi, best_v[:, 0])
    hist_range = torch.stack([lo, hi], 1)
    arrays = {
        "top_values": best_v.numpy().astype(np.float32),
        "top_doc": np.zeros((U, K), dtype=np.int32), "top_pos": np.zeros((U, K), dtype=np.int32),
        "hist_counts": counts.numpy().astype(np.int32),
        "hist_range": hist_range.numpy().astype(np.float32),
        "min_max": torch.stack([edges_lo, edges_hi], 1).numpy().astype(np.float32),
        "value_range": torch.stack([vmin, vmax], 1).numpy().astype(np.float32),
        "mean": mean.numpy().astype(np.float32), "std": std.numpy().astype(np.float32),
        "active_share": np.where(np.arange(U) < L * F, active.numpy() / total, np.nan).astype(np.float32),
    }
    loc = best_loc.numpy()
    doc = np.searchsorted(offsets, loc, side="right") - 1
    arrays["top_doc"] = np.where(loc >= 0, doc, -1).astype(np.int32)
    arrays["top_pos"] = np.where(loc >= 0, loc - offsets[np.clip(doc, 0, None)], -1).astype(np.int32)
    arrays["quantiles"] = np.clip(_quantiles(_edges(arrays["hist_range"], arrays["min_max"], bins),
                                             arrays["hist_counts"], QUANTILES),
                                  arrays["value_range"][:, :1], arrays["value_range"][:, 1:]).astype(np.float32)

    # Tokens: per unit the highest means; per token the highest z-scored means.
    freq_counts = torch.from_numpy(token_counts[frequent]).to(torch.float32)
    means = (token_sums[:, :len(frequent)] / freq_counts[None]).t()            # (V', U)
    kt = min(TOP_TOKENS, len(frequent))
    if kt:
        top_tok = means.topk(kt, dim=0)
        arrays["top_token_ids"] = frequent[top_tok.indices.t().numpy()].astype(np.int32)
        arrays["top_token_mean"] = top_tok.values.t().numpy().astype(np.float32)
    else:
        arrays["top_token_ids"] = np.zeros((U, 0), np.int32)
        arrays["top_token_mean"] = np.zeros((U, 0), np.float32)
    z = (means - mean.float()) / std.float().clamp(min=1e-12)
    kn, kh = min(TOKEN_UNITS, L * F), min(TOKEN_UNITS, L * H)
    zn, zh = z[:, :L * F].topk(kn, dim=1), z[:, L * F:].topk(kh, dim=1)
    arrays.update({
        "token_ids": frequent.astype(np.int32), "token_counts": token_counts[frequent].astype(np.int32),
        "token_neurons": zn.indices.numpy().astype(np.int32), "token_neuron_z": zn.values.numpy().astype(np.float32),
        "token_heads": (zh.indices + L * F).numpy().astype(np.int32),
        "token_head_z": zh.values.numpy().astype(np.float32),
    })
    seconds = time.perf_counter() - started
    meta = {
        "format": FORMAT, "version": VERSION,
        "model": {"name": model_name or getattr(cfg, "name", ""), "fingerprint": model_fingerprint(model)},
        "config": _config_dict(cfg),
        "corpus": {"source": source, "tokens": total,
                   "documents": [{"name": d.name, "tokens": len(d.ids), "held_out": bool(d.held_out),
                                  "crc32": _checksum(d.ids)} for d in docs]},
        "windows": {"n_ctx": n_ctx, "stride": stride, "min_left_context": n_ctx - stride, "count": len(windows),
                    "rule": "windows of n_ctx tokens every `stride` tokens of a document; the first window scores "
                            "all its positions, each later one its last `stride`; position t is scored in the "
                            "window starting at 0 if t < n_ctx else ((t - n_ctx) // stride + 1) * stride"},
        "scores": {"neuron": NEURON_SCORE, "head": HEAD_SCORE},
        "units": {"neurons": L * F, "heads": L * H,
                  "order": "flat index: neurons layer by layer (layer * d_ff + neuron), then heads "
                           "(n_layers * d_ff + layer * n_heads + head)"},
        "top_k": K, "bins": bins, "quantile_levels": list(QUANTILES),
        "histogram": "bins uniform over hist_range (a first pass over a sample of windows), 0 an edge, each bin "
                     "left-open (a, b] so 0 and -0.0 fall below the 0 edge; the outer edges moved to min_max to "
                     "cover the scan's exact extremes (value_range); quantiles read from the histogram (linear "
                     "within a bin) and clipped to value_range; active_share counted directly (values > 0)",
        "top_tokens": {"k": kt, "min_count": min_count, "rank": TOKEN_RANK, "frequent_tokens": len(frequent)},
        "scan": {"seconds": round(seconds, 2), "tokens_per_s": round(total / seconds), "batch": batch,
                 "threads": torch.get_num_threads(), "torch": torch.__version__},
    }
    return NeuronIndex(meta, arrays)


def _bin_of(values: torch.Tensor, inv_width: torch.Tensor, zero_bin: torch.Tensor, bins: int) -> torch.Tensor:
    """Each value's histogram bin, int32 [units, n] (`inv_width`, `zero_bin`: float [units, 1]). Bins are left-open, (edge_k, edge_k+1], so 0 and -0.0 fall in
    the bin just below the 0 edge and every value > 0 in a bin above it, decided by the value's sign alone: the
    position (v / width) is rounded in float32, and when it was taken from the lower edge (v - lo) / width, values
    within rounding of 0 (GELU's -0.0 and tiny negatives) landed above the 0 edge and counted as active."""
    steps = torch.mul(values, inv_width).ceil_()                     # bins above (> 0) or below (<= 0) the 0 edge
    steps = torch.where(values > 0, steps.clamp(min=1), steps)       # a positive value never rounds down to 0
    # bin = zero_bin - 1 + steps, clamped into the outer bins
    return steps.clamp_(1 - zero_bin, bins - zero_bin).add_(zero_bin - 1).to(torch.int32)


def _edges(hist_range: np.ndarray, min_max: np.ndarray, bins: int) -> np.ndarray:
    lo, hi = hist_range[:, :1].astype(np.float64), hist_range[:, 1:].astype(np.float64)
    width = (hi - lo) / bins
    zero_bin = np.rint(-lo / width)  # 0 is an edge: multiples of the width from it, so that edge is exactly 0
    edges = (np.arange(bins + 1)[None] - zero_bin) * width
    edges[:, 0], edges[:, -1] = min_max[:, 0], min_max[:, 1]
    return edges


def _quantiles(edges: np.ndarray, counts: np.ndarray, levels) -> np.ndarray:
    """Quantiles from histograms, linear within a bin: [units, len(levels)]."""
    cum = np.cumsum(counts, axis=1, dtype=np.float64)
    total = cum[:, -1:]
    out = np.empty((len(counts), len(levels)))
    rows = np.arange(len(counts))
    for j, q in enumerate(levels):
        target = q * total[:, 0]
        b = np.minimum((cum < target[:, None]).sum(1), counts.shape[1] - 1)
        before = np.where(b > 0, cum[rows, np.maximum(b - 1, 0)], 0.0)
        inside = np.maximum(counts[rows, b], 1)
        frac = np.clip((target - before) / inside, 0, 1)
        out[:, j] = edges[rows, b] + frac * (edges[rows, b + 1] - edges[rows, b])
    return out


# ---------------------------------------------------------------------------------------------------- disk

def _expected_shapes(meta: dict) -> dict[str, tuple[tuple, str]]:
    c = meta["config"]
    L, F, H = int(c["n_layers"]), int(c["d_ff"]), int(c["n_heads"])
    U, K, B = L * (F + H), int(meta["top_k"]), int(meta["bins"])
    Q, T, V = len(meta["quantile_levels"]), int(meta["top_tokens"]["k"]), int(meta["top_tokens"]["frequent_tokens"])
    return {"top_values": ((U, K), "f"), "top_doc": ((U, K), "i"), "top_pos": ((U, K), "i"),
            "hist_counts": ((U, B), "i"), "hist_range": ((U, 2), "f"), "min_max": ((U, 2), "f"),
            "value_range": ((U, 2), "f"),
            "mean": ((U,), "f"), "std": ((U,), "f"), "active_share": ((U,), "f"), "quantiles": ((U, Q), "f"),
            "top_token_ids": ((U, T), "i"), "top_token_mean": ((U, T), "f"),
            "token_ids": ((V,), "i"), "token_counts": ((V,), "i"),
            "token_neurons": ((V, min(TOKEN_UNITS, L * F)), "i"), "token_neuron_z": ((V, min(TOKEN_UNITS, L * F)), "f"),
            "token_heads": ((V, min(TOKEN_UNITS, L * H)), "i"), "token_head_z": ((V, min(TOKEN_UNITS, L * H)), "f")}


def save_index(index: NeuronIndex, folder) -> Path:
    """Write index.json and index.npz (compressed) into `folder` (created); returns the folder."""
    _validate(index.meta, index.arrays)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(folder / INDEX_NPZ, **index.arrays)
    (folder / INDEX_JSON).write_text(json.dumps(index.meta, indent=1) + "\n", encoding="utf-8")
    return folder


def load_index(folder) -> NeuronIndex:
    """Read a folder written by save_index. IndexFormatError (a ValueError) when a file is missing or corrupt, of
    another format version, or its arrays' shapes disagree with its metadata. Never unpickles."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / INDEX_JSON).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(f"no {INDEX_JSON} in the index folder {folder.name!r}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise IndexFormatError(f"{INDEX_JSON} is not readable JSON ({type(err).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise IndexFormatError(f"{INDEX_JSON} is not a gptviz neuron index")
    if meta.get("version") != VERSION:
        raise IndexFormatError(f"index format version {meta.get('version')!r}; this gptviz reads version {VERSION} "
                               f"(rebuild it with `python -m gptviz index`)")
    try:
        with np.load(folder / INDEX_NPZ, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise IndexFormatError(f"no {INDEX_NPZ} in the index folder {folder.name!r}") from None
    except Exception as err:  # zipfile.BadZipFile, ValueError (pickled object), zlib.error, OSError, EOFError...
        raise IndexFormatError(f"{INDEX_NPZ} is corrupt ({type(err).__name__})") from None
    _validate(meta, arrays)
    return NeuronIndex(meta, arrays)


def _validate(meta: dict, arrays: dict[str, np.ndarray]) -> None:
    try:
        expected = _expected_shapes(meta)
        docs = meta["corpus"]["documents"]
        total = int(meta["corpus"]["tokens"])
        lengths = np.asarray([int(d["tokens"]) for d in docs] or [0])
    except (KeyError, TypeError, ValueError) as err:
        raise IndexFormatError(f"{INDEX_JSON} lacks or garbles a field ({type(err).__name__}: {err})") from None
    missing = sorted(set(expected) - set(arrays))
    if missing:
        raise IndexFormatError(f"{INDEX_NPZ} lacks {', '.join(missing)}")
    for name, (shape, kind) in expected.items():
        a = arrays[name]
        if a.shape != shape or a.dtype.kind != kind:
            raise IndexFormatError(f"{INDEX_NPZ}: {name} is {a.dtype}{list(a.shape)}, expected "
                                   f"{'float' if kind == 'f' else 'int'}{list(shape)} for the model in {INDEX_JSON}")
    if total != int(lengths.sum()):
        raise IndexFormatError(f"{INDEX_JSON}: the documents' lengths do not add up to the tokens scanned")
    if (arrays["hist_counts"].astype(np.int64).sum(1) != total).any():
        raise IndexFormatError(f"{INDEX_NPZ}: a histogram's counts do not add up to the {total:,} tokens scanned")
    doc, pos = arrays["top_doc"], arrays["top_pos"]
    listed = doc >= 0
    if (doc >= len(docs)).any() or (doc < -1).any() or (pos[listed] < 0).any() \
            or (pos[listed] >= lengths[doc[listed]]).any():
        raise IndexFormatError(f"{INDEX_NPZ}: a top example lies outside its document")


# ---------------------------------------------------------------------------------------------------- shipped

def index_folder(model_name: str) -> Path:
    """Where a bundled model's shipped index lives: gptviz/models/<name>/index."""
    from .weights import MODELS_DIR
    return MODELS_DIR / model_name / "index"


def bundled_index(model_name: str) -> NeuronIndex | None:
    """The shipped index of a bundled model, or None when it has none."""
    folder = index_folder(model_name)
    return load_index(folder) if (folder / INDEX_JSON).exists() else None


def index_matches(index: NeuronIndex, model) -> bool:
    """Whether `index` was built with exactly this model (config and weights)."""
    return index.meta["model"]["fingerprint"] == model_fingerprint(model)


# ---------------------------------------------------------------------------------------------------- reading

@dataclass(frozen=True)
class Example:
    unit: Unit
    rank: int       # 0 = the unit's highest activation in the corpus
    doc: int        # document index
    doc_name: str
    pos: int        # token position in the document
    value: float


def top_examples(index: NeuronIndex, unit: UnitLike, k: int | None = None) -> list[Example]:
    """The unit's k highest activations over the corpus (all kept, TOP_K, by default), highest first."""
    u = index.unit(unit)
    i = index.flat(u)
    a = index.arrays
    n = a["top_values"].shape[1] if k is None else min(k, a["top_values"].shape[1])
    return [Example(u, r, int(a["top_doc"][i, r]), index.documents[int(a["top_doc"][i, r])]["name"],
                    int(a["top_pos"][i, r]), float(a["top_values"][i, r]))
            for r in range(n) if a["top_doc"][i, r] >= 0]


@dataclass(frozen=True)
class Context:
    """Tokens around a position and the unit's score on each, as the scan scored it (each token in its own
    scoring window: the same left context the index saw)."""
    unit: Unit
    doc: int
    pos: int
    positions: np.ndarray  # document positions of the context's tokens
    ids: np.ndarray
    values: np.ndarray     # the unit's score on each token
    peak: int              # index of `pos` within positions
    attention: np.ndarray | None = None  # heads: the weight the query at `pos` puts on each context token
                                         # (0 after it; NaN before its scoring window)


def example_context(index: NeuronIndex, corpus_docs, doc: int, pos: int, *, model, unit: UnitLike,
                    before: int = 24, after: int = 8) -> Context:
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
        _, cache = capture(model, window[None], _unit_hooks(model.config))  # the scan's (fused) attention path
        all_values = _values_from_store(model, cache, end - start)
        values[mine] = all_values[positions[mine] - start, flat].numpy()
        if u.kind == "head" and start == scoring_window(pos, n_ctx, stride):
            _, cache = capture(model, torch.from_numpy(ids[start:pos + 1])[None], act_name("pattern", u.layer))
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


def example_contexts_nbytes(index: NeuronIndex, corpus_docs, examples: Sequence[Example], config, *,
                            before: int = 24, after: int = 8) -> int:
    """What example_contexts holds at its peak, from its batch's size (B windows of up to T tokens): the captured
    unit hook (and the head's pattern), the forward pass's working memory, and a head's per-head writes."""
    from .memory import FLOAT32, forward_nbytes
    from .hooks import capture_nbytes
    if not examples:
        return 0
    segments, _ = _context_plan(index, _as_documents(corpus_docs), examples, before, after)
    B, T, u = len(segments), max(end - start for _, start, end in segments), examples[0].unit
    hooks = [u.hook] + ([act_name("pattern", u.layer)] if u.kind == "head" else [])
    writes = T * config.n_heads * config.d_model if u.kind == "head" else 0
    forward = forward_nbytes(config, T, B, patterns=u.kind == "head", all_logits=False) \
        - FLOAT32 * B * config.vocab_size
    return B * capture_nbytes(config, hooks, T, logits=False) + FLOAT32 * B * writes + forward  # no LM head runs


def units_at_nbytes(config, T: int) -> int:
    """What units_at holds at its peak on T tokens: the capture of every unit's hook with the forward pass beside
    it, each head's writes [T, heads, d_model] for one layer, and every unit's value and rank."""
    from .memory import FLOAT32, capture_work_nbytes
    n_units = config.n_layers * (config.d_ff + config.n_heads)
    return capture_work_nbytes(config, _unit_hooks(config), T) \
        + FLOAT32 * T * (config.n_heads * config.d_model + 2 * n_units)


def example_contexts(index: NeuronIndex, corpus_docs, examples: Sequence[Example], *, model, before: int = 24,
                     after: int = 8) -> list[Context]:
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
        batch[b, :end - start] = torch.from_numpy(docs[d].ids[start:end])
    hooks = {u.hook} | ({act_name("pattern", u.layer)} if u.kind == "head" else set())
    with capturing(frozenset(hooks)) as store, torch.inference_mode():
        model.final_hidden(batch)
    if u.kind == "neuron":
        scores = store[u.hook][..., u.index]                                                     # (B, T)
    else:
        scores = head_write_norms(store[u.hook], model.blocks[u.layer].attn.c_proj.weight)[..., u.index]
    out = []
    for e, (positions, starts, rows) in zip(examples, plans):
        values = scores[torch.from_numpy(rows), torch.from_numpy(positions - starts)].float().numpy()
        attention = None
        if u.kind == "head":
            peak_start = scoring_window(e.pos, n_ctx, stride)
            row = store[act_name("pattern", u.layer)][int(rows[positions == e.pos][0]), u.index, e.pos - peak_start]
            attention = np.where(positions > e.pos, 0.0, np.nan).astype(np.float32)
            inside = (positions >= peak_start) & (positions <= e.pos)
            attention[inside] = row[positions[inside] - peak_start].float().numpy()
        out.append(Context(u, e.doc, e.pos, positions, docs[e.doc].ids[positions[0]:positions[-1] + 1].copy(),
                           values.astype(np.float32), int(e.pos - positions[0]), attention))
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


def units_at(model, ids, position: int, *, index: NeuronIndex | None = None, k: int = 10,
             kind: str | None = None) -> list[UnitScore]:
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
    return [UnitScore(_unit_at(int(i), c.n_layers, c.d_ff, c.n_heads), float(values[i]),
                      float(rank[i]) if peak is not None else None) for i in top.indices]


@dataclass(frozen=True)
class TokenUnit:
    unit: Unit
    z: float       # (the unit's mean on the token - its corpus mean) / its corpus standard deviation
    mean: float    # the unit's mean on the token


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
    for i, z in zip(units[row][:k], zs[row][:k]):
        out.append(TokenUnit(index.unit(int(i)), float(z), float(z * a["std"][i] + a["mean"][i])))
    return out


def histogram(index: NeuronIndex, unit: UnitLike) -> tuple[np.ndarray, np.ndarray]:
    """(edges [bins + 1], counts [bins]) of the unit's values over every token scanned."""
    i = index.flat(unit)
    a = index.arrays
    edges = _edges(a["hist_range"][i:i + 1], a["min_max"][i:i + 1], index.meta["bins"])[0]
    return edges, a["hist_counts"][i].astype(np.int64)


def quantiles(index: NeuronIndex, unit: UnitLike) -> dict[float, float]:
    i = index.flat(unit)
    return {float(q): float(v) for q, v in zip(index.meta["quantile_levels"], index.arrays["quantiles"][i])}


def top_tokens(index: NeuronIndex, unit: UnitLike, k: int = TOP_TOKENS) -> list[tuple[int, float]]:
    """(token id, the unit's mean on it) for the tokens it fires on most (see TOKEN_RANK)."""
    i = index.flat(unit)
    a = index.arrays
    return [(int(t), float(m)) for t, m in zip(a["top_token_ids"][i][:k], a["top_token_mean"][i][:k])]


def summary(index: NeuronIndex, unit: UnitLike) -> str:
    """One line about a unit, computed from the index, e.g. "L2N17: active on 4.1% of tokens; median -0.04,
    99% 0.61, peak 2.3; top tokens: ' the', ' my', ..."."""
    from .tokenizer import get_tokenizer
    u = index.unit(unit)
    i = index.flat(u)
    a = index.arrays
    enc = get_tokenizer()
    q = quantiles(index, u)
    words = ", ".join(repr(enc.decode([t])) for t, _ in top_tokens(index, u, 5)) or "none frequent enough"
    peak = float(a["top_values"][i, 0]) + 0.0  # + 0.0: -0.0 (GELU far below 0) reads "0", not "-0"
    median, top = q.get(0.5, float("nan")) + 0.0, q.get(0.99, float("nan")) + 0.0
    spread = f"median {median:.3g}, 99% {top:.3g}, peak {peak:.3g}"
    if u.kind == "neuron":
        return f"{u}: active on {100 * float(a['active_share'][i]):.1f}% of tokens; {spread}; top tokens: {words}"
    return f"{u}: output norm {spread}; top tokens: {words}"


# ---------------------------------------------------------------------------------------------------- weights

@dataclass(frozen=True)
class DirectEffect:
    effect: torch.Tensor                 # [vocab]: the logit change per unit of the neuron's activation
    promoted: list[tuple[int, float]]    # (token id, effect), highest first
    suppressed: list[tuple[int, float]]  # (token id, effect), lowest first


def _norms_after(model, layer: int, sublayer: str) -> list:
    """The norms a sub-layer's output crosses on its direct path to the unembedding: ln_f for pre-norm; for
    post-norm also its own block's norm(s) after it and every later block's."""
    if model.config.norm == "pre":
        return [model.ln_f]
    norms = [model.blocks[layer].ln_1, model.blocks[layer].ln_2] if sublayer == "attn" else [model.blocks[layer].ln_2]
    for block in model.blocks[layer + 1:]:
        norms += [block.ln_1, block.ln_2]
    return norms + [model.ln_f]


def _through_norms(v: torch.Tensor, norms) -> torch.Tensor:
    """A residual direction through norms as far as they are linear: centred (LayerNorm) and scaled by each gain;
    the division by the input's spread (one positive number per position) and the biases are left out."""
    for norm in norms:
        if isinstance(norm, torch.nn.LayerNorm):
            v = v - v.mean(-1, keepdim=True)
        if norm.weight is not None:
            v = v * norm.weight.detach()
    return v


def _effect(model, direction: torch.Tensor, norms, k: int) -> DirectEffect:
    with torch.no_grad():
        if norms:
            direction = _through_norms(direction, norms)
        effect = direction @ model.lm_head.weight.detach().t()  # W_U: (C, vocab)
    k = min(k, effect.numel())
    up, down = effect.topk(k), (-effect).topk(k)
    return DirectEffect(effect, [(int(i), float(effect[i])) for i in up.indices],
                        [(int(i), float(effect[i])) for i in down.indices])


def direct_effect(model, layer: int, neuron: int, k: int = 10, fold_ln: bool = True) -> DirectEffect:
    """The tokens a neuron promotes and suppresses directly: its output weights (c_proj's column for it, W_out[n])
    times the unembedding W_U. With `fold_ln` (default), through the final norm first (and, post-norm, the norms
    after it), as far as they are linear: centred and scaled by the gain; the division by the residual's spread, a
    positive factor per position, changes no ranking and is left out."""
    w_out = model.blocks[layer].mlp.c_proj.weight.detach()[:, neuron].to(torch.float32)  # (C,)
    return _effect(model, w_out, _norms_after(model, layer, "mlp") if fold_ln else [], k)


def head_direct_effect(model, layer: int, head: int, source_token: int, k: int = 10,
                       fold_ln: bool = True) -> DirectEffect:
    """The head's OV circuit for one source token: what attending to `source_token` writes, read by the
    unembedding. The token's embedding through the head's input norm (ln_1, pre-norm), its value projection
    (with bias) and its W_O^h, then as in direct_effect. Positional embeddings and earlier layers are left out."""
    c = model.config
    hs = c.d_head
    with torch.no_grad():
        x = model.wte.weight.detach()[source_token].to(torch.float32)
        if c.norm == "pre":
            x = model.blocks[layer].ln_1(x)
        attn = model.blocks[layer].attn
        w_v = attn.c_attn.weight.detach()[2 * c.d_model + head * hs: 2 * c.d_model + (head + 1) * hs]  # (hs, C)
        v = x @ w_v.t()
        if attn.c_attn.bias is not None:
            v = v + attn.c_attn.bias.detach()[2 * c.d_model + head * hs: 2 * c.d_model + (head + 1) * hs]
        out = v @ attn.c_proj.weight.detach()[:, head * hs:(head + 1) * hs].t()  # (C,)
    return _effect(model, out, _norms_after(model, layer, "attn") if fold_ln else [], k)


# ---------------------------------------------------------------------------------------------------- CLI helper

def text_progress(label: str, stream=None, every: float = 1.0) -> Callable[[int, int], None]:
    """A progress callback printing "label: done/total tokens (pct) elapsed" to stderr at most every `every` s."""
    stream = sys.stderr if stream is None else stream
    started = time.perf_counter()
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.perf_counter() - started
        if now - last[0] >= every or done >= total:
            last[0] = now
            rate = done / now if now > 0 else 0
            end = "\n" if done >= total else ""
            left = f", {_duration((total - done) / rate)} left" if 0 < rate and done < total else ""
            stream.write(f"\r{label}: {_bar(done / total)} {done:,}/{total:,} tokens ({100 * done / total:.0f}%) "
                         f"{_duration(now)}, {rate:,.0f} tok/s{left}{end}")
            stream.flush()
    return report


def _bar(fraction: float, width: int = 24) -> str:
    filled = int(round(width * min(max(fraction, 0.0), 1.0)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds} s"
