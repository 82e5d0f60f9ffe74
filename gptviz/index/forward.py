"""One batch of the scan's windows through the model: every unit's value at every scored position."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..model.hooks import act_name, capturing
from .unit_ids import head_write_factor, head_write_norms

# consume(first unit, values, rows): values [rows, units first ..] float32 on the CPU (rows None: every row of it is
# scored; else the scored rows' indices into it)
Consume = Callable[[int, torch.Tensor, "torch.Tensor | None"], None]


def _batch_inputs(docs, offsets, windows: np.ndarray):
    """A batch of windows as model input, right-padded (causal attention keeps padding out of earlier positions):
    -> (ids [B, T], scored rows of the flattened [B * T] positions, those rows as one slice where they are one run
    (else None), their global locations, their token ids)."""
    B, T = len(windows), int(windows[:, 2].max())
    ids = torch.zeros(B, T, dtype=torch.long)
    scored = torch.zeros(B, T, dtype=torch.bool)
    for b, (d, start, length, first) in enumerate(windows):
        ids[b, :length] = torch.from_numpy(np.asarray(docs[d].ids[start : start + length], dtype=np.int64))
        scored[b, first:length] = True
    sel = scored.reshape(-1).nonzero().squeeze(1)
    # one run of rows (every position, or the scored tail of a single window): a view of the capture, no copy
    run = slice(int(sel[0]), int(sel[-1]) + 1) if len(sel) and int(sel[-1] - sel[0]) + 1 == len(sel) else None
    base = torch.from_numpy(offsets[windows[:, 0]] + windows[:, 1])  # global index of each window's start
    loc = (base[:, None] + torch.arange(T)[None]).reshape(-1)[sel]
    return ids, sel, run, loc, ids.reshape(-1)[sel]


def head_factors(model) -> list[torch.Tensor]:
    """Each layer's head_write_factor, on the model's device: computed once per scan, passed to each batch."""
    return [head_write_factor(block.attn.c_proj.weight, model.config.n_heads) for block in model.blocks]


def _stream_unit_blocks(
    model,
    ids: torch.Tensor,
    sel: torch.Tensor,
    run: slice | None,
    consume: Consume,
    in_place: bool = False,
    factors: list[torch.Tensor] | None = None,
) -> None:
    """Forward `ids` up to the last unit (forward_through_units), on the model's device and dtype, handing each
    layer's units to `consume` while the forward pass runs, as soon as they exist: each layer's heads (their write
    norms), then its neurons.
    `in_place`: a neuron block whose scored rows are not one run comes as every row of the activation with the
    scored rows' indices, for a reader that takes the rows where they are (native.py); otherwise as the scored rows.
    `factors`: head_factors(model), where the caller keeps them across batches.

    As they come, not captured for later: a layer's activations are read while they are still in the cache, then
    freed with the forward pass's own intermediates, so the next layer reuses their memory. Held until the pass ended,
    they made the forward pass inside the bundled model's scan slower than the same pass alone: its GELU and its matrix
    products wrote to memory out of the cache (torch.profiler; docs/benchmarks-history.md;
    `python -m benchmarks index` times the scan against the pass alone).

    Token-major blocks, not one [units, tokens] matrix: the statistics reduce over the token axis of each block as it
    comes, so no transposed copy of every value is made, and a batch whose scored positions are one run of rows (every
    position, or one window's scored tail: gpt2-small's batches of one) needs no copy at all."""
    cfg = model.config
    B, T = ids.shape
    L, F, H = cfg.n_layers, cfg.d_ff, cfg.n_heads
    on = run if run is not None else sel.to(next(model.parameters()).device)
    factors = head_factors(model) if factors is None else factors

    def neurons(layer: int):
        def read(x: torch.Tensor, _offset: int) -> torch.Tensor:
            post = x.detach().reshape(B * T, F)
            if in_place and run is None and post.dtype == torch.float32 and post.device.type == "cpu":
                consume(layer * F, post, sel)
            else:
                consume(layer * F, post[on].float().cpu(), None)
            return x

        return read

    def heads(layer: int):
        def read(z: torch.Tensor, _offset: int) -> torch.Tensor:
            weight, factor = model.blocks[layer].attn.c_proj.weight, factors[layer]
            if B == 1:  # one window: its scored rows are a view of z
                norms = head_write_norms(z.detach()[0, on], weight, factor)
            else:  # every position's norms (from z where it lies: cheaper than gathering the scored rows of z first)
                norms = head_write_norms(z.detach(), weight, factor).reshape(B * T, H)[on]
            consume(L * F + layer * H, norms.float().cpu().contiguous(), None)
            return z

        return read

    edits = {act_name("post", layer): (neurons(layer),) for layer in range(L)} | {
        act_name("z", layer): (heads(layer),) for layer in range(L)
    }
    forward_through_units(model, ids, edits)


class _UnitsRead(Exception):
    """Raised after the last hook a scan reads, to end the forward pass there."""


def forward_through_units(model, ids: torch.Tensor, edits: dict | None = None) -> None:
    """model.final_hidden(ids) with `edits`, ended as soon as the last layer's MLP activations have been handed to
    them: what comes after (that layer's output projection, its residual addition, the final norm) feeds no unit, so
    a scan does not run it (a few per cent of the bundled model's forward pass, less of gpt2-small's: the LM head is
    not part of it; `python -m benchmarks index` times this pass as `units_forward_*`).
    Without edits: the forward pass a scan runs, for benchmarks to compare the scan against."""
    last = act_name("post", model.config.n_layers - 1)

    def stop(_x: torch.Tensor, _offset: int) -> torch.Tensor:
        raise _UnitsRead

    edits = dict(edits or {})
    edits[last] = (*edits.get(last, ()), stop)
    with capturing(frozenset(), edits), torch.inference_mode():
        try:
            model.final_hidden(ids)
        except _UnitsRead:
            pass


def _unit_blocks(model, docs, offsets, windows: np.ndarray, in_place: bool = False):
    """The units of one batch of windows, collected: -> (blocks, global locations [scored], token ids [scored]), where
    blocks are (first unit, values, rows) as _stream_unit_blocks hands them: each layer's heads, then its neurons."""
    ids, sel, run, loc, tok = _batch_inputs(docs, offsets, windows)
    blocks = []
    _stream_unit_blocks(model, ids, sel, run, lambda *block: blocks.append(block), in_place)
    return blocks, loc, tok


def _run_windows(model, docs, offsets, windows: np.ndarray):
    """As _unit_blocks, the values as one [units, scored] matrix (for checks that read every unit at once)."""
    blocks, loc, tok = _unit_blocks(model, docs, offsets, windows)
    blocks.sort(key=lambda block: block[0])
    return torch.cat([values for _, values, _ in blocks], 1).t().contiguous(), loc, tok
