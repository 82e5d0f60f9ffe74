"""What the Explainers page draws: the causal mask, the activation functions with their derivatives, and the
regions where a curve does something."""

from __future__ import annotations

import torch


def causal_mask(n: int) -> torch.Tensor:
    """[n, n] bool: True where query i may attend to key j; the very mask the model's attention uses."""
    from ..model.model import _causal_mask

    return _causal_mask(n, 0, "cpu")


def activation_curves(x: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{activation: (f(x), f'(x))} for the model's own activation functions (gptviz.model.model.activate),
    derivatives by autograd."""
    from ..model.config import ACTIVATIONS
    from ..model.model import activate

    out = {}
    for name in ACTIVATIONS:
        xs = x.detach().double().clone().requires_grad_(True)
        y = activate(xs, name)
        (dy,) = torch.autograd.grad(y.sum(), xs)
        out[name] = (y.detach(), dy.detach())
    return out


def regions_where(mask: torch.Tensor, x: torch.Tensor) -> list[tuple[float, float]]:
    """Contiguous runs of True in mask (over sorted x) as (x_start, x_end) intervals."""
    runs, start = [], None
    for i, flag in enumerate(mask.tolist()):
        if flag and start is None:
            start = i
        if not flag and start is not None:
            runs.append((float(x[start]), float(x[i - 1])))
            start = None
    if start is not None:
        runs.append((float(x[start]), float(x[-1])))
    return runs
