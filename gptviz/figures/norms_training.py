"""Training curves of the pre-norm vs post-norm comparisons: the twins' losses over their stages with where their
heads formed, and the warmup experiment's losses and per-layer gradients. Pure Plotly: arrays in, go.Figure out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import apply_layout, logged_line
from .norms import WIRING_COLORS, sd_band
from .palette import sequential


def stage_history(
    runs: dict[str, list[dict]],
    boundaries: list[tuple[int, str]],
    formed: dict[str, dict[str, int]],
    key: str = "val_loss",
) -> go.Figure:
    """Every stage's logged losses on one cumulative step axis ({run: records}), dotted lines at the stage
    boundaries, and a marker where each run's heads formed ({run: {"previous-token": step, ...}})."""
    fig = go.Figure()
    colors = {n: WIRING_COLORS["pre" if "pre" in n else "post"] for n in runs}
    for j, (name, records) in enumerate(runs.items()):
        train = [(r["step"], r["train_loss"]) for r in records]
        val = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        # the run's training loss faint and thin under its held-out loss
        for points, part, mode, width, extra in (
            (train, "train", "lines", 1, dict(opacity=0.45)),
            (val, "held-out", "lines+markers", 2.5, {}),
        ):
            line = dict(color=colors[name], width=width)
            fig.add_trace(logged_line(points, mode=mode, name=f"{name}: {part}", line=line, legendgroup=name, **extra))
        for i, (what, step) in enumerate(formed.get(name, {}).items()):
            if step is None:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[step],
                    y=[0.5 + 0.7 * (len(runs) * i + j)],
                    mode="markers+text",
                    text=[f"{what} ({name})"],
                    textposition="middle right",
                    marker=dict(symbol="triangle-up", size=12, color=colors[name]),
                    showlegend=False,
                    hovertemplate=f"{what}, {name}: step %{{x}}<extra></extra>",
                )
            )
    for step, label in boundaries:
        fig.add_vline(x=step, line=dict(color="#888", dash="dot", width=1))
        fig.add_annotation(
            x=step,
            y=1,
            yref="paper",
            text=label,
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font=dict(size=11, color="#555"),
        )
    fig.update_xaxes(title_text="step (all stages)")
    fig.update_yaxes(title_text="loss (nats/token)", rangemode="tozero")
    return apply_layout(fig, None, height=420, legend=dict(orientation="h", yanchor="top", y=-0.18, x=0))


def warmup_losses(
    bands: dict[str, tuple[np.ndarray, np.ndarray]], colors: dict[str, str], baseline: float | None = None
) -> go.Figure:
    """Each arm's mean loss per step with a ± sd band; `baseline` (the frequency-only loss) as a dotted line."""
    fig = go.Figure()
    for arm, (mean, sd) in bands.items():
        for trace in sd_band(np.arange(1, len(mean) + 1), mean, sd, colors[arm], arm, True, arm):
            fig.add_trace(trace)
    if baseline is not None:  # a legend entry, not an annotation: a label on the line sat on the curves
        steps = max((len(mean) for mean, _ in bands.values()), default=1)
        fig.add_trace(
            go.Scatter(
                x=[1, steps],
                y=[baseline, baseline],
                mode="lines",
                hoverinfo="skip",
                line=dict(dash="dot", color="grey"),
                name=f"frequency-only loss {baseline:.2f}",
            )
        )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="training loss, mean ± sd over seeds")
    return apply_layout(fig, None, height=360, legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))


def _log10(grid: np.ndarray) -> np.ndarray:
    return np.log10(np.clip(grid, 1e-12, None))


def log_range(grids: dict[str, np.ndarray]) -> tuple[float, float]:
    """The log10 range over every grid: one colour scale when the arms are drawn as separate figures."""
    logs = [_log10(g) for g in grids.values()]
    return min(float(v.min()) for v in logs), max(float(v.max()) for v in logs)


def warmup_grads(grids: dict[str, np.ndarray], zrange: tuple[float, float] | None = None) -> go.Figure:
    """Per arm, a heatmap of each layer's FFN gradient norm per step (log10; mean over seeds), on one colour scale
    (`zrange`, log10; by default the grids' own)."""
    fig = make_subplots(rows=1, cols=len(grids), subplot_titles=list(grids), shared_yaxes=True, horizontal_spacing=0.04)
    logs = {arm: _log10(g) for arm, g in grids.items()}
    lo, hi = zrange or log_range(grids)
    for col, (arm, values) in enumerate(logs.items(), start=1):
        fig.add_trace(
            go.Heatmap(
                z=values,
                x=np.arange(1, values.shape[1] + 1),
                y=list(range(values.shape[0])),
                zmin=lo,
                zmax=hi,
                colorscale=sequential("Viridis"),
                showscale=col == len(logs),
                colorbar=dict(title="log10 |g|"),
                hovertemplate=f"{arm}<br>step %{{x}}, layer %{{y}}: 10^%{{z:.2f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="step", row=1, col=col)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    return apply_layout(fig, None, height=320)
