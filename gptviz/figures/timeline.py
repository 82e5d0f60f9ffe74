"""Figures of a training timeline (gptviz.training.snapshots): detector scores and losses over steps with the viewed
step marked, and every head's map at one step."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..model.unit_id import head_id
from ..training.snapshots import Snapshots, formed_step
from .attention import model_view
from .common import apply_layout, legend_on_top_room

RUN_COLORS = ("#4c78a8", "#e45756", "#54a24b", "#b279a2")
MARKER_COLOR = "#f58518"


def last_at_or_before(steps, step: int) -> int:
    """Index of the last of the sorted `steps` at or before `step` (0 if `step` comes before them all)."""
    return max(0, int(np.searchsorted(np.asarray(steps), step, side="right")) - 1)


def index_at(snaps: Snapshots, step: int) -> int:
    """The snapshot shown for `step`: the last one taken at or before it."""
    return last_at_or_before(snaps.steps, step)


def _mark_step(fig: go.Figure, step: int) -> None:
    fig.add_vline(x=step, line=dict(color=MARKER_COLOR, width=2, dash="dot"))


LEGEND_LINE = 22  # px of one more line of a horizontal legend


def detector_curves(
    runs: dict[str, Snapshots], detector: str, step: int, threshold: float, height: int = 330
) -> go.Figure:
    """Each run's best head's score over the steps (every head faint behind it), uniform attention's score
    dashed, the viewed step marked and the step each run's head formed (snapshots.formed_step) named."""
    fig = go.Figure()
    chance = None
    for i, (name, snaps) in enumerate(runs.items()):
        if not len(snaps):
            continue
        color = RUN_COLORS[i % len(RUN_COLORS)]
        d = snaps.detector_index(detector)
        chance = snaps.detectors[d].chance
        scores = snaps.score_array()[:, d]  # [S, L, H]
        for layer in range(snaps.n_layers):
            for head in range(snaps.n_heads):
                fig.add_trace(
                    go.Scatter(
                        x=snaps.steps,
                        y=scores[:, layer, head],
                        mode="lines",
                        showlegend=False,
                        line=dict(color=color, width=0.7),
                        opacity=0.25,
                        hovertemplate=f"{name} {head_id(layer, head)}: %{{y:.3f}} at step %{{x}}<extra></extra>",
                    )
                )
        fig.add_trace(
            go.Scatter(
                x=snaps.steps,
                y=scores.max(axis=(1, 2)),
                mode="lines",
                name=f"{name}: best head",
                line=dict(color=color, width=2.5),
                hovertemplate=f"{name} best head: %{{y:.3f}} at step %{{x}}<extra></extra>",
            )
        )
        formed = formed_step(snaps, detector, threshold)
        if formed is not None:
            at, layer, head = formed
            fig.add_annotation(
                x=at,
                y=threshold,
                text=f"{head_id(layer, head)} formed at step {at}",
                showarrow=True,
                arrowhead=2,
                ax=-60,
                ay=-30 - 22 * i,
                font=dict(color=color, size=12),
                bgcolor="rgba(255,255,255,0.8)",
            )
    if chance is not None:
        fig.add_hline(
            y=chance,
            line=dict(color="#888", dash="dash"),
            annotation_text=f"chance {chance:.3f}",
            annotation_position="bottom right",
        )
    fig.add_hline(y=threshold, line=dict(color="#bbb", width=1))
    _mark_step(fig, step)
    fig.update_yaxes(range=[0, 1.02], title=f"{detector} score")
    fig.update_xaxes(title="training step")
    apply_layout(
        fig,
        title=f"{detector.capitalize()} score of every head",
        height=height,
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0),
    )
    # room for the legend on two lines: on a phone the two runs' entries wrap, and a second line met the title
    fig.update_layout(margin=dict(t=legend_on_top_room("t") + LEGEND_LINE))
    return fig


def loss_curves(runs: dict[str, Snapshots], step: int, height: int = 330) -> go.Figure:
    """Training loss, held-out loss and the loss on the repeated probe's second half, per run, step marked."""
    fig = go.Figure()
    for i, (name, snaps) in enumerate(runs.items()):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        for label, values, dash in (
            ("training", snaps.train_loss, "solid"),
            ("held-out text", snaps.val_loss, "dot"),
            ("repeated half", snaps.repeat_loss, "dash"),
        ):
            if np.all(np.isnan(np.asarray(values, dtype=float))):
                continue
            fig.add_trace(
                go.Scatter(
                    x=snaps.steps,
                    y=values,
                    mode="lines",
                    name=f"{name}: {label}",
                    line=dict(color=color, dash=dash, width=2),
                    hovertemplate=f"{name} {label}: %{{y:.3f}} at step %{{x}}<extra></extra>",
                )
            )
    _mark_step(fig, step)
    fig.update_yaxes(title="loss (nats/token)", rangemode="tozero")
    fig.update_xaxes(title="training step")
    apply_layout(fig, title="Loss", height=height, legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    fig.update_layout(margin=dict(t=legend_on_top_room("t") + 20))
    return fig


def heads_at(
    snaps: Snapshots,
    step: int,
    probe: int,
    selected: tuple[int, int] | None = None,
    title: str | None = None,
    width_px: int = 640,
) -> go.Figure:
    """Every head's map on one probe at the snapshot shown for `step` (layers down, heads across)."""
    i = index_at(snaps, step)
    maps = snaps.pattern(i, probe)
    labels = list(snaps.probes[probe].tokens) or [str(t) for t in snaps.probes[probe].ids]
    return model_view(
        maps,
        labels,
        row_names=[f"layer {layer}" for layer in range(snaps.n_layers)],
        col_names=[f"head {h}" for h in range(snaps.n_heads)],
        selected=selected,
        title=title,
        width_px=width_px,
        scale="linear",
    )
