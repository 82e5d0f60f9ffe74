"""Figures for training runs: loss curves of one or more runs overlaid, the step-by-step gradient norm and
learning rate, and the next-token distributions of twins. Pure Plotly: history records in, go.Figure out.

A history is a list of step records as written by gptviz.training.train: {step, lr, train_loss, grad_norm,
val_loss (None except at evaluations), elapsed_s}.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import apply_layout, distinct_percent_format, logged_line

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
NORM_COLORS = {"pre": "#1f77b4", "post": "#d62728"}


def plain(text: str) -> str:
    """Text for Plotly labels and hover: its few HTML-like tags (<b>, <br>, ...) must stay literal."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def run_color(name: str, index: int) -> str:
    """Pre- and post-norm runs keep the page-wide colours (blue, red); other runs take the palette."""
    for norm, color in NORM_COLORS.items():
        if name == norm or name.endswith(f"-{norm}") or name.startswith(f"{norm}-") or name.startswith(f"{norm} "):
            return color
    return PALETTE[index % len(PALETTE)]


def ema(values, alpha: float) -> np.ndarray:
    """Exponential moving average with bias correction (the first points are not pulled toward 0)."""
    out, avg = np.empty(len(values)), 0.0
    for i, v in enumerate(values):
        avg = alpha * avg + (1 - alpha) * float(v)
        out[i] = avg / (1 - alpha ** (i + 1))
    return out


def full_vocab_switch(histories: dict[str, list[dict]]) -> int | None:
    """The first step whose training loss is over the full vocabulary, when earlier steps were normalised
    over the corpus's own ids only (records with full_vocab False; see gptviz.training.train); else None."""
    for history in histories.values():
        if any(h.get("full_vocab") is False for h in history):
            return next((h["step"] for h in history if h.get("full_vocab", True)), None)
    return None


def _train_line(name, color, steps, y, label: str, width: float, hover: str = "train loss", **extra) -> go.Scatter:
    """A run's training loss as a line in the run's colour, grouped with its other lines in the legend."""
    return go.Scatter(
        x=steps,
        y=y,
        mode="lines",
        name=f"{name} {label}",
        legendgroup=name,
        line=dict(color=color, width=width),
        hovertemplate=f"{name}<br>step %{{x}}<br>{hover} %{{y:.4f}}<extra></extra>",
        **extra,
    )


def loss_curves(
    histories: dict[str, list[dict]],
    smoothing: float = 0.0,
    references: dict[str, float] | None = None,
    title: str | None = None,
    height: int = 420,
) -> go.Figure:
    """Training loss (lines; faint raw values under a smoothed line when smoothing > 0) and validation
    loss (markers) of each run, against the step. `references` adds labelled horizontal lines, e.g. the
    loss of a uniform guess, ln(vocab)."""
    fig = go.Figure()
    for i, (name, history) in enumerate(histories.items()):
        color = run_color(name, i)
        steps = [h["step"] for h in history]
        train = [h["train_loss"] for h in history]
        if smoothing > 0 and len(train) > 1:
            fig.add_trace(_train_line(name, color, steps, train, "train (raw)", 1, opacity=0.25, showlegend=False))
            smoothed = ema(train, smoothing)
            fig.add_trace(_train_line(name, color, steps, smoothed, "train", 2.5, hover="train loss (smoothed)"))
        else:
            fig.add_trace(_train_line(name, color, steps, train, "train", 2))
        val = [(h["step"], h["val_loss"]) for h in history if h.get("val_loss") is not None]
        if val:
            fig.add_trace(
                logged_line(
                    val,
                    mode="lines+markers",
                    name=f"{name} validation",
                    legendgroup=name,
                    line=dict(color=color, dash="dash", width=1.5),
                    marker=dict(symbol="diamond", size=8, color=color, line=dict(color="white", width=1)),
                    hovertemplate=f"{name}<br>step %{{x}}<br>validation loss %{{y:.4f}}<extra></extra>",
                )
            )
    switch = full_vocab_switch(histories)
    if switch is not None:
        fig.add_vrect(x0=0, x1=switch, fillcolor="#999", opacity=0.08, line_width=0)
        fig.add_vline(
            x=switch,
            line=dict(color="#777", dash="dash", width=1),
            annotation_text=f"full-vocabulary softmax from step {switch}",
            annotation_position="bottom left",
        )
    for label, value in (references or {}).items():
        if value is not None and math.isfinite(value):
            fig.add_hline(
                y=value,
                line=dict(color="#777", dash="dot", width=1),
                annotation_text=f"{label}: {value:.2f}",
                annotation_position="top right",
            )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="cross-entropy (nats / token)")
    return apply_layout(
        fig, title, height=height, hovermode="x unified", legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0)
    )


def training_dynamics(histories: dict[str, list[dict]], clip: float | None = None, height: int = 360) -> go.Figure:
    """Two panels against the step: the global gradient norm before clipping (log scale; a dotted line at
    the clipping threshold), and the learning rate schedule."""
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=("Gradient norm (before clipping)", "Learning rate")
    )
    for i, (name, history) in enumerate(histories.items()):
        color = run_color(name, i)
        steps = [h["step"] for h in history]
        for col, field, what in ((1, "grad_norm", "gradient norm"), (2, "lr", "learning rate")):
            lr = field == "lr"  # the runs' schedules often coincide: dotted after the first, and one legend entry
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=[h[field] for h in history],
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=False if lr else None,
                    line=dict(color=color, width=2, dash=("dot" if i else "solid") if lr else None),
                    hovertemplate=f"{name}<br>step %{{x}}<br>{what} %{{y:.3g}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    if clip and histories:  # a trace, not an annotation: annotations on a log axis are placed in log units
        steps = [h["step"] for history in histories.values() for h in history]
        if steps:
            fig.add_trace(
                go.Scatter(
                    x=[min(steps), max(steps)],
                    y=[clip, clip],
                    mode="lines",
                    name=f"clipping threshold ({clip:g})",
                    line=dict(color="#777", dash="dot", width=1),
                    hovertemplate=f"clipping threshold {clip:g}<extra></extra>",
                ),
                row=1,
                col=1,
            )
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(tickformat=".1e", row=1, col=2)
    fig.update_xaxes(title_text="step")
    return apply_layout(fig, height=height, legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))


def next_token_bars(distributions: dict[str, list[tuple[str, float]]], context: str | None = None) -> go.Figure:
    """Side-by-side horizontal bars: each model's most probable next tokens (label, probability), most
    probable on top."""
    names = list(distributions)
    fig = make_subplots(rows=1, cols=len(names), horizontal_spacing=0.18, subplot_titles=names)
    for col, name in enumerate(names, start=1):
        top = distributions[name]
        labels = [f"{rank + 1}. {plain(label)}" for rank, (label, _) in enumerate(top)]
        probs = [p for _, p in top]
        fig.add_trace(
            go.Bar(
                x=probs,
                y=labels,
                orientation="h",
                marker_color=run_color(name, col - 1),
                customdata=[plain(label) for label, _ in top],
                name=name,
                showlegend=False,
                text=[f"{p:.1%}" for p in probs],
                textposition="outside",
                cliponaxis=False,
                hovertemplate=f"{name}<br>next token %{{customdata}}<br>p = %{{x:.4f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(autorange="reversed", type="category", row=1, col=col)
        fig.update_xaxes(
            range=[0, max(probs + [1e-9]) * 1.3],
            row=1,
            col=col,
            tickformat=distinct_percent_format(max(probs + [1e-9]) * 1.3),
            title_text="probability",
        )
    rows = max((len(v) for v in distributions.values()), default=1)
    apply_layout(fig, f"Next token after {plain(context)}" if context else None, height=max(260, 26 * rows + 110))
    if context:  # the columns' own titles sit between the figure's title and the bars: a line of room for them
        fig.update_layout(margin=dict(t=fig.layout.margin.t + SUBPLOT_TITLE_ROOM))  # (on a phone they met)
    return fig


SUBPLOT_TITLE_ROOM = 22
