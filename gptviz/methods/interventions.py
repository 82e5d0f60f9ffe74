"""Edits at hook points: ablate heads, neurons or whole sub-layers, patch activations from another run, steer the
residual stream. Each function returns an `Edit` (a hook name and a function of the hook's value); pass a list of
them to `run_with_edits`, `capture(..., edits=)`, `generate(..., edits=)` or `stream(..., edits=)`.

Edits live in the call, like captures: the shared model is never changed, so threads running different edits
on one model each get their own result. Positions are absolute positions in the model's window; during
KV-cache generation an edit sees only the new token, at its own position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ..model.hooks import ActivationCache, EditFn, act_name, capture

MODES = ("zero", "mean")


@dataclass(frozen=True)
class Edit:
    hook: str  # e.g. "blocks.1.attn.hook_z"
    fn: EditFn  # (value, offset of its first position) -> new value
    label: str  # what it does, for people: "L1H3 zero-ablated"


def run_with_edits(model, ids, edits: Edit | Sequence[Edit], names=()) -> tuple[torch.Tensor, ActivationCache]:
    """Logits of `model` on `ids` with `edits` applied, and a cache of the hooks in `names` (none by default;
    recorded after the edits)."""
    return capture(model, ids, names, edits=edits)


def _local_positions(positions: Iterable[int] | None, T: int, offset: int) -> torch.Tensor | None:
    """The indices along a value's sequence axis (length T, first position `offset`) of the absolute
    `positions`; None means every position."""
    if positions is None:
        return None
    local = [p - offset for p in positions if offset <= p < offset + T]
    return torch.tensor(local, dtype=torch.long)


def _check_positions(positions) -> tuple[int, ...] | None:
    if positions is None:
        return None
    positions = tuple(int(p) for p in positions)
    if any(p < 0 for p in positions):
        raise ValueError(f"positions must be >= 0, got {min(positions)}")
    return positions


def _check_mode(mode: str, reference) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "mean" and reference is None:
        raise ValueError("mean ablation needs a reference: a cache (or tensor) of the same hook on reference text")


def _reference_mean(reference, hook: str) -> torch.Tensor:
    """The mean of a hook's value over the reference's batch and positions: [...] (the features only)."""
    values = reference[hook] if isinstance(reference, Mapping) else torch.as_tensor(reference)
    return values.float().reshape(-1, *values.shape[2:]).mean(0)


def _replace_units(hook: str, units: Sequence[int], mode: str, positions, reference) -> EditFn:
    """An edit that zeroes (or sets to the reference mean) the chosen units (axis 2 of a [batch, T, units, ...]
    value: heads of hook_z, neurons of mlp.hook_post) at the chosen positions."""
    mean = _reference_mean(reference, hook) if mode == "mean" else None
    index = torch.tensor(units, dtype=torch.long)

    def fn(value: torch.Tensor, offset: int) -> torch.Tensor:
        if int(index.max()) >= value.shape[2]:
            raise ValueError(f"{hook}: unit {int(index.max())} does not exist (there are {value.shape[2]})")
        idx = index.to(value.device)
        fill = 0.0 if mean is None else mean.to(value.device, value.dtype)[idx]
        value = value.clone()
        rows = _local_positions(positions, value.shape[1], offset)
        if rows is None:
            value[:, :, idx] = fill
        elif rows.numel():
            value[:, rows.to(value.device)[:, None], idx] = fill
        return value

    return fn


def _units(units, what: str) -> tuple[int, ...]:
    units = (units,) if isinstance(units, int) else tuple(int(u) for u in units)
    if not units:
        raise ValueError(f"no {what} chosen")
    if min(units) < 0:
        raise ValueError(f"{what} indices must be >= 0, got {min(units)}")
    return units


def ablate_heads(layer: int, heads, mode: str = "zero", positions=None, reference=None) -> Edit:
    """Remove heads' outputs: `hook_z` of the chosen heads set to zero, or to its mean over `reference` (a cache
    or a [batch, T, heads, d_head] tensor of this layer's hook_z on reference text), at `positions` (default
    all)."""
    _check_mode(mode, reference)
    heads, positions = _units(heads, "heads"), _check_positions(positions)
    hook = act_name("z", layer)
    where = "" if positions is None else f" at {len(positions)} position(s)"
    label = f"L{layer} head(s) {', '.join(map(str, heads))} {mode}-ablated{where}"
    return Edit(hook, _replace_units(hook, heads, mode, positions, reference), label)


def ablate_neurons(layer: int, neurons, mode: str = "zero", positions=None, reference=None) -> Edit:
    """Remove MLP neurons: `mlp.hook_post` of the chosen neurons set to zero or to their mean over `reference`."""
    _check_mode(mode, reference)
    neurons, positions = _units(neurons, "neurons"), _check_positions(positions)
    hook = act_name("post", layer)
    label = f"L{layer} {len(neurons)} MLP neuron(s) {mode}-ablated"
    return Edit(hook, _replace_units(hook, neurons, mode, positions, reference), label)


def ablate_sublayer(layer: int, which: str, positions=None) -> Edit:
    """Remove a whole attention or MLP sub-layer's output (`hook_attn_out` / `hook_mlp_out` set to zero). In
    post-norm the LayerNorm after the addition still runs."""
    if which not in ("attn", "mlp"):
        raise ValueError(f"which must be 'attn' or 'mlp', got {which!r}")
    positions = _check_positions(positions)

    def fn(value: torch.Tensor, offset: int) -> torch.Tensor:
        rows = _local_positions(positions, value.shape[1], offset)
        if rows is None:
            return torch.zeros_like(value)
        value = value.clone()
        value[:, rows] = 0.0
        return value

    return Edit(f"blocks.{layer}.hook_{which}_out", fn, f"L{layer} {which.upper()} removed")


def patch_from(source: Mapping[str, torch.Tensor], names: str | Sequence[str], positions=None) -> list[Edit]:
    """Activation patching: replace each named hook's value with `source`'s (a cache of the same model on another
    input of the same length) at `positions` (default all). Positions past the source's length are left alone."""
    names = [names] if isinstance(names, str) else list(names)
    positions = _check_positions(positions)
    edits = []
    for name in names:
        stored = source[name]

        def fn(value: torch.Tensor, offset: int, stored=stored, name=name) -> torch.Tensor:
            if stored.shape[0] not in (1, value.shape[0]) or stored.shape[2:] != value.shape[2:]:
                raise ValueError(f"{name}: the source has shape {tuple(stored.shape)}, this run {tuple(value.shape)}")
            T = value.shape[1]
            wanted = range(offset, offset + T) if positions is None else positions
            rows = _local_positions([p for p in wanted if p < stored.shape[1]], T, offset)
            if rows.numel() == 0:
                return value
            value = value.clone()
            value[:, rows] = stored[:, rows + offset].to(value.device, value.dtype)
            return value

        edits.append(Edit(name, fn, f"{name} patched from the other run"))
    return edits


def add_to_resid(layer: int, vector: torch.Tensor, scale: float = 1.0, positions=None) -> Edit:
    """Steering: add `scale * vector` ([d_model]) to the residual stream entering block `layer`."""
    vector = torch.as_tensor(vector).float()
    if vector.dim() != 1:
        raise ValueError(f"the steering vector must be [d_model], got shape {tuple(vector.shape)}")
    positions = _check_positions(positions)

    def fn(value: torch.Tensor, offset: int) -> torch.Tensor:
        if value.shape[-1] != vector.shape[0]:
            raise ValueError(f"the steering vector has {vector.shape[0]} dims; the model has {value.shape[-1]}")
        add = (scale * vector).to(value.device, value.dtype)
        rows = _local_positions(positions, value.shape[1], offset)
        if rows is None:
            return value + add
        value = value.clone()
        value[:, rows] += add
        return value

    return Edit(act_name("resid_pre", layer), fn, f"{scale:g} x vector added before block {layer}")
