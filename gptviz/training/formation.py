"""The model card's account of a run's snapshots: when its heads formed (formation_section), and how a rerun's
logged losses compare with the committed run's (logged_losses, reproduction)."""

from __future__ import annotations

import re

import numpy as np

from ..model.unit_id import head_id
from .snapshots import Snapshots


def logged_losses(log_text: str) -> dict[int, float]:
    """step -> training loss from `python -m gptviz train`'s printed lines ("step   20/1000 loss 7.6127 ...")."""
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step\s+(\d+)/\d+ loss ([\d.]+)", log_text)}


def reproduction(rerun: dict[int, float], committed: dict[int, float], decimals: int = 4) -> dict:
    """How a rerun's logged losses compare with the committed run's at the steps both logged: the last step up to
    which every one agrees to `decimals` places, and the largest difference over all of them."""
    common = sorted(set(rerun) & set(committed))
    if not common:
        return {"steps": 0, "exact_until": 0, "max_diff": float("nan")}
    tolerance = 0.5 * 10**-decimals + 1e-12
    exact_until = 0
    for step in common:
        if abs(rerun[step] - committed[step]) > tolerance:
            break
        exact_until = step
    return {
        "steps": len(common),
        "exact_until": exact_until,
        "max_diff": max(abs(rerun[s] - committed[s]) for s in common),
    }


def formation_section(
    snaps: Snapshots, compared: dict | None = None, low: float = 0.1, high: float = 0.8, threshold: float = 0.5
) -> str:
    """Markdown: when the run's best induction head went from below `low` to above `high`, the step some head
    first reached `threshold`, the losses at those steps, and how the rerun compares with the committed log."""
    ind = snaps.score_array()[:, snaps.detector_index("induction")].max(axis=(1, 2))
    prev = snaps.score_array()[:, snaps.detector_index("previous-token")].max(axis=(1, 2))
    steps = np.asarray(snaps.steps)
    chance = {d.name: d.chance for d in snaps.detectors}
    rows = []
    below, above = steps[ind < low], steps[ind > high]
    for label, hits in (
        (f"last snapshot with the best induction score below {low}", below[-1:] if len(below) else []),
        (f"first snapshot above {high}", above[:1]),
    ):
        for step in hits:
            i = int(np.flatnonzero(steps == step)[0])
            rows.append(f"| {label} | {step} | {ind[i]:.3f} | {prev[i]:.3f} | {snaps.train_loss[i]:.3f} |")
    lines = [
        f"| | step | best induction (chance {chance['induction']:.3f}) | best previous-token (chance "
        f"{chance['previous-token']:.3f}) | training loss |",
        "|---|---|---|---|---|",
        *rows,
    ]
    hits = {name: snaps.crossing(name, threshold) for name in ("induction", "previous-token")}
    crossings = [
        f"{name}: {head_id(*hit[1:])} at step {hit[0]}" if hit else f"{name}: not within the run"
        for name, hit in hits.items()
    ]
    text = (
        f"{len(snaps)} snapshots over steps 1 to {steps[-1]} (every {snaps.every} steps, and every "
        f"{snaps.min_gap} while the smoothed loss moved by {snaps.loss_delta} nats or more; recording took "
        f"{snaps.share_recording():.1%} of the training time). First head to reach {threshold}: "
        f"{'; '.join(crossings)}. Scores on the snapshots' own probes (a repeated sequence of "
        f"{snaps.probes[0].length} copy ids; 48 held-out tokens).\n\n" + "\n".join(lines)
    )
    if compared and compared.get("steps"):
        text += (
            f"\n\nThe rerun's training losses equal the committed log's to 4 decimals at every logged step "
            f"through step {compared['exact_until']}"
            + (
                f", then drift apart by at most {compared['max_diff']:.4f} nats (the same seed and batches; the "
                f"rerun used one CPU thread where the committed run used the default, and a different summation "
                f"order, which changes the last bits, is the likely cause: the fast phase amplifies them)"
                if compared["max_diff"] > 0.5e-4
                else ""
            )
            + f" ({compared['steps']} logged steps compared)."
        )
    return text
