"""Units (MLP neurons and attention heads), their ids, and their scores from a capture."""

from __future__ import annotations

from typing import Union

import numpy as np
import torch

from ..model.hooks import act_name, capture, unit_hook_names
from ..model.unit_id import Unit

UnitLike = Union["Unit", str, int, tuple]


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
        unit = Unit.parse(unit)
    kind, layer, index = unit
    if kind not in ("neuron", "head"):
        raise ValueError(f"unit kind must be 'neuron' or 'head', got {kind!r}")
    size = d_ff if kind == "neuron" else n_heads
    if not (0 <= int(layer) < n_layers and 0 <= int(index) < size):
        raise ValueError(f"{kind} {index} of layer {layer} does not exist ({n_layers} layers x {size})")
    return Unit(kind, int(layer), int(index))


def head_write_factor(c_proj_weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Each head's R^T, float32 (nh, d_head, d_head), from c_proj's [out, in] weight: W_O^h^T = Q R (QR, Q's columns
    orthonormal, R d_head x d_head), so ||z W_O^h|| = ||z R^T||. A scan computes it once per layer, not per batch."""
    w = c_proj_weight.detach().to(torch.float32).t().reshape(n_heads, -1, c_proj_weight.shape[0])  # (nh, hs, C): W_O^h
    return torch.linalg.qr(w.transpose(1, 2), mode="r").R.transpose(1, 2)


def head_write_norms(z: torch.Tensor, c_proj_weight: torch.Tensor, factor: torch.Tensor | None = None) -> torch.Tensor:
    """HEAD_SCORE: [..., heads, d_head] z and c_proj's [out, in] weight -> [..., heads] norms of each head's write.
    `factor`: head_write_factor(c_proj_weight, heads), where the caller has it."""
    n_heads, d_head = z.shape[-2], z.shape[-1]
    # through each head's d_head x d_head factor, never the (tokens, nh, C) writes themselves (12x fewer
    # multiplications for gpt2-small; equal to the direct norm within 3e-7 relative, tested)
    r_t = head_write_factor(c_proj_weight, n_heads) if factor is None else factor
    # one matmul per head over every position, reading z where it lies: attention's fused kernel lays its (B, nh, T,
    # hs) output out as (B, T, nh, hs), so the hook's z is row-major, [positions, nh, hs] is a view of it and each
    # head's [positions, hs] a strided matrix that bmm reads in place (several times faster than broadcasting over
    # the [..., nh, T, hs] transpose, which matmul copied first; `python -m benchmarks index` times the scan)
    zz = z.to(torch.float32).reshape(-1, n_heads, d_head).transpose(0, 1)  # (nh, positions, hs)
    norms = torch.linalg.vector_norm(torch.bmm(zz, r_t), dim=-1)  # (nh, positions)
    return norms.t().reshape(z.shape[:-1])


def _values_from_store(model, store, rows: int) -> torch.Tensor:
    """Every unit's score from a capture's store: [rows, n_units] (rows = batch x T, flattened)."""
    L = model.config.n_layers
    parts = [store[act_name("post", layer)].reshape(rows, -1) for layer in range(L)]
    parts += [
        head_write_norms(store[act_name("z", layer)], model.blocks[layer].attn.c_proj.weight).reshape(rows, -1)
        for layer in range(L)
    ]
    return torch.cat(parts, dim=1)


def unit_values(model, ids) -> torch.Tensor:
    """Every unit's score at every position of one sequence (a fresh capture): [T, n_units], units numbered as in
    an index (neurons layer by layer, then heads)."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    _, cache = capture(model, ids, unit_hook_names(model.config))
    return _values_from_store(model, cache, ids.shape[1])
